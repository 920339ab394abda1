"""Float32 arrays laid out one after another in a solver's workspace.

The compiled depthwise and grouped solvers stage their tensors in float32 regions of the
caller's workspace, each starting on a 64-byte boundary (a cache line, and aligned for any
vector width the kernels use).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from miocore.backends.cpu import workspace_view

if TYPE_CHECKING:
    import numpy as np

ALIGN = 64  # bytes between regions


class Float32Regions:
    """Where each region of ``shapes`` starts, and the workspace bytes they need in all."""

    __slots__ = ("nbytes", "offsets", "shapes")

    def __init__(self, shapes: Sequence[Sequence[int]]) -> None:
        self.shapes = tuple(tuple(s) for s in shapes)
        self.offsets: list[int] = []
        total = 0
        for shape in self.shapes:
            self.offsets.append(total)
            total += -(-4 * math.prod(shape) // ALIGN) * ALIGN
        #: The workspace bytes all regions take.
        self.nbytes = total

    def views(self, workspace: Any) -> list[np.ndarray]:
        """A float32 array of each region's shape over the caller's workspace."""
        import numpy as np

        ws = workspace_view(workspace, self.nbytes)
        flat = ws[: self.nbytes] if ws is not None else np.empty(0, np.uint8)
        return [
            flat[o : o + 4 * math.prod(s)].view(np.float32).reshape(s)
            for o, s in zip(self.offsets, self.shapes, strict=True)
        ]
