"""Accuracy of fft.overlap_save: the relative errors its tests hold it to, per dtype.

Tolerances are relative errors (max abs error / max abs reference, as
:func:`miocore.testing.check_solver` measures them):

* float32: 2e-5. An FFT convolution's rounding error is not that of a direct sum: every output
  mixes all samples of its tile through ``2 log2 L`` butterfly stages, so its error is about
  ``eps32 * c * log2(L) * ||tile|| * ||filter||`` instead of ``eps32 * |terms|``: relative to
  the largest output it stays below ``eps32 * log2(L) * sqrt(reduction)``, which for the
  lengths used here (L <= 256, 8 stages; channel and batch sums of the tests) is <= ~2e-6.
  Measured worst over the corpus sample and every tile length up to 256 (250x240 images, batch
  sums of 2x60x60 for weights): 4.2e-7. 2e-5 keeps a ~50x margin
  yet fails at once on any indexing error (those give errors of order 1).
* float16: 2e-3 and bfloat16: 1.6e-2: inputs are exact in float32 and the result is rounded
  once to the output type (half an ulp is 2^-11 = 4.9e-4 and 2^-8 = 3.9e-3 of the largest
  value), which dominates the float32 FFT error by two orders of magnitude.
"""

from __future__ import annotations

from miocore import DataType

TOLERANCES: dict[DataType, float] = {
    DataType.FLOAT32: 2e-5,
    DataType.FLOAT16: 2e-3,
    DataType.BFLOAT16: 1.6e-2,
}
