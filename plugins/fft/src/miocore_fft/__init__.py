"""miocore-fft: FFT convolution (overlap-save tiling) for miocore, all three directions.

The names below load on first access (PEP 562): importing the package, as the plugin scan
does, imports none of its solver modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from miocore import lazy_exports

if TYPE_CHECKING:
    from miocore_fft.plan import FftPlan
    from miocore_fft.solver import FftOverlapSave

#: Public name -> the module that defines it.
_EXPORTS = {
    "FftPlan": "miocore_fft.plan",
    "FftOverlapSave": "miocore_fft.solver",
}

__all__ = ["FftOverlapSave", "FftPlan"]


__getattr__ = lazy_exports(__name__, _EXPORTS)
