"""Winograd minimal-filtering convolution solvers for miocore (plugin ``winograd``)."""

from __future__ import annotations

from miocore_winograd.solver import BLOCKS, TILES, WinogradRxS
from miocore_winograd.transforms import POINTS, kron_transforms, toom_cook

__all__ = ["BLOCKS", "POINTS", "TILES", "WinogradRxS", "kron_transforms", "toom_cook"]
