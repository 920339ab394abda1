"""Winograd minimal-filtering convolution solvers for miocore (plugin ``winograd``).

The names below load on first access (PEP 562): importing the package, as the plugin scan
does, imports none of its solver modules."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from miocore_winograd.solver import BLOCKS, TILES, WinogradRxS
    from miocore_winograd.transforms import POINTS, kron_transforms, toom_cook

#: Public name -> the module that defines it.
_EXPORTS = {
    "BLOCKS": "miocore_winograd.solver",
    "TILES": "miocore_winograd.solver",
    "WinogradRxS": "miocore_winograd.solver",
    "POINTS": "miocore_winograd.transforms",
    "kron_transforms": "miocore_winograd.transforms",
    "toom_cook": "miocore_winograd.transforms",
}

__all__ = ["BLOCKS", "POINTS", "TILES", "WinogradRxS", "kron_transforms", "toom_cook"]


def __getattr__(name: str) -> Any:
    """Import the module of a public name on first access."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip this function
    return value
