"""The ``cudnn`` plugin module named by the ``miocore`` entry point.

Every process that uses miocore imports this module, so it imports nothing of the solvers:
the hundred engines are declared lazily (name, family, backend) and ``miocore_cudnn.solvers``
(with its plan module) is imported when a CUDA find first asks one of them a question.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import miocore

#: Engine ids registered: ``cudnn.eng0`` .. ``cudnn.eng{MAX_ENGINE_ID}`` (the same number as
#: ``miocore_cudnn.solvers.MAX_ENGINE_ID``; a test checks that they agree).
MAX_ENGINE_ID = 99


def make_engine(engine: int) -> Any:
    """The registered solver of cuDNN engine ``engine`` (imports the solvers module)."""
    from miocore_cudnn.solvers import SOLVERS

    return SOLVERS[engine]


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """Register ``cudnn.eng0`` .. ``cudnn.eng99``, one solver per cuDNN engine id. They apply
    on the cuda backend only, where ``import cudnn`` works and a cuDNN handle can be made."""
    for engine in range(MAX_ENGINE_ID + 1):
        yield miocore.SolverRecord(
            factory=functools.partial(make_engine, engine),
            name=f"cudnn.eng{engine}",
            algorithm="implicit_gemm",
            backends=("cuda",),
            library=True,  # cuDNN decides which engines it offers: absent ones are not new
        )
