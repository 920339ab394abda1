"""Winograd minimal-filtering convolution solvers for miocore (plugin ``winograd``).

The names below load on first access (PEP 562): importing the package, as the plugin scan
does, imports none of its solver modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from miocore import lazy_exports

if TYPE_CHECKING:
    from miocore_winograd.fused import WinogradFused
    from miocore_winograd.solver import BLOCKS, TILES, WinogradRxS
    from miocore_winograd.transforms import POINTS, kron_transforms, toom_cook

#: Public name -> the module that defines it.
_EXPORTS = {
    "BLOCKS": "miocore_winograd.solver",
    "TILES": "miocore_winograd.solver",
    "WinogradRxS": "miocore_winograd.solver",
    "WinogradFused": "miocore_winograd.fused",
    "POINTS": "miocore_winograd.transforms",
    "kron_transforms": "miocore_winograd.transforms",
    "toom_cook": "miocore_winograd.transforms",
}

__all__ = [
    "BLOCKS",
    "POINTS",
    "TILES",
    "WinogradFused",
    "WinogradRxS",
    "kron_transforms",
    "toom_cook",
]


__getattr__ = lazy_exports(__name__, _EXPORTS)
