"""miocore-fft: FFT convolution (overlap-save tiling) for miocore, all three directions."""

from __future__ import annotations

from miocore_fft.plan import FftPlan
from miocore_fft.solver import FftOverlapSave

__all__ = ["FftOverlapSave", "FftPlan"]
