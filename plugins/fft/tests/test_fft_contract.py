"""miocore's solver contract suite on the FFT solver (fft.overlap_save)."""

from __future__ import annotations

from miocore_fft import FftOverlapSave

from miocore.testing import SolverContract


class TestFftOverlapSaveContract(SolverContract):
    """fft.overlap_save: every direction, tunable FFT length."""

    solver = FftOverlapSave()
