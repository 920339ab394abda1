"""The MFMA path of the igemm tensor-core kernels (``MIO_MFMA`` in ``miocore_gpu.h``), marked
``gpu``.

On an NVIDIA GPU the kernels are built with ``-DMIO_MFMA_EMULATE``: the 8 warps become 4 waves
of 64 exactly as on AMD, and each ``v_mfma_*`` instruction is computed in software from AMD's
documented lane layouts; on AMD gfx90a / gfx94x the same tests run the real instructions (no
option added). Two levels:

* one 16 x 16 tile per instruction kind (``kernels/igemm_mfma_check.cu``): fragments loaded by
  the documented layouts, D = A * B + C compared exactly (inputs are multiples of 1/8 whose
  products and sums fp32 holds exactly; fp32 against float64 within 1e-6). On CUDA this pins
  the emulation to the documentation, so the convolution tests below cannot pass through an
  emulation that is wrong in the same way as the kernels; on AMD it checks the hardware;
* whole convolutions through the four solvers, as in ``test_gpu_igemm.py`` and
  ``test_gpu_igemm_wrw.py`` (corpus-derived problems, outputs poisoned with NaN, the float64
  reference): forward and backward data (strided phases included) in NHWC and NCHW, backward
  weights, fp16 / bf16 at ``miocore.testing.TOLERANCES`` and fp32 at the **exact fp32**
  tolerance (``v_mfma_f32_16x16x4f32`` multiplies in full fp32, unlike TF32); configs over the
  tuning space (tiles, pipeline depth, split-K, atomic and slab reductions).

``MIOCORE_GPU_MFMA_TEST_PROBLEMS`` (60) corpus problems per case (a fifth in NCHW): fewer
than the mma.sync tests run, as the emulation and its compiles are slow.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import test_gpu_igemm as fwd
import test_gpu_igemm_wrw as wrw
from test_gpu_solvers import _handle

import miocore

pytestmark = pytest.mark.gpu

COUNT = int(os.environ.get("MIOCORE_GPU_MFMA_TEST_PROBLEMS", "60"))
#: The emulation's static shared scratch (4 waves x 64 lanes x 4 words) comes on top of a
#: config's dynamic shared memory, and the CUDA backend opts a launch in to more than 48 KiB
#: only when the dynamic memory alone exceeds it: configs within 4 KiB under 48 KiB (or under
#: sm_90's 227 KiB maximum) cannot launch emulated (the first device run failed on them with
#: CUDA_ERROR_INVALID_VALUE). Native MFMA on AMD has no scratch.
SCRATCH = 4096


def _launchable(shared: int) -> bool:
    """Whether a config with ``shared`` bytes of dynamic shared memory launches emulated."""
    return not 48 * 1024 - SCRATCH < shared <= 48 * 1024 and shared <= 227 * 1024 - SCRATCH


@functools.cache
def _options() -> tuple[str, ...] | None:
    """Compile options that select the MFMA path here, or None where it cannot run."""
    h = _handle()
    if h is None:
        return None
    if h.context.backend == "cuda":
        return ("-DMIO_MFMA_EMULATE",)
    from miocore_igemm.gpu import uses_mfma

    return () if uses_mfma(h.context) else None


def _need() -> tuple[str, ...]:
    options = _options()
    if options is None:
        pytest.skip("no GPU device with an MFMA path (CUDA emulation or AMD gfx90a/gfx94x)")
    return options


@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
def test_mfma_tile_matches_the_documented_layouts(dtype: str) -> None:
    options = _need()
    h = _handle()
    kdim = 4 if dtype == "float32" else 16
    rng = np.random.default_rng(7)
    if dtype == "float32":
        a = rng.standard_normal((16, kdim)).astype(np.float32)
        b = rng.standard_normal((kdim, 16)).astype(np.float32)
        c = rng.standard_normal((16, 16)).astype(np.float32)
    else:  # multiples of 1/8 up to 8: exact in fp16 and bf16, products and sums exact in fp32
        a, b, c = (
            rng.integers(-64, 65, shape).astype(np.float32) / 8
            for shape in ((16, kdim), (kdim, 16), (16, 16))
        )
    from miocore.backends.gpu_kernels import DTYPE_OPTIONS, KernelArgs

    info = miocore.KernelInfo(
        source="igemm/igemm_mfma_check.cu",
        kernel_name="igemm_mfma_tile",
        options=(DTYPE_OPTIONS[miocore.DataType.parse(dtype)], *options),
        grid=(1,),
        block=(64,),
    )
    (kernel,) = h.backend.compile([info])

    def dev(values: np.ndarray) -> object:
        desc = miocore.TensorDescriptor("float32", (1, 1, *values.shape))
        return h.backend.from_host(desc, values.reshape(1, 1, *values.shape))

    bufs = [dev(a), dev(b), dev(c), dev(np.full((16, 16), np.nan, np.float32))]
    kernel.launch(KernelArgs([("ptr", t.ptr) for t in bufs]))
    got = h.backend.to_host(bufs[3]).reshape(16, 16).astype(np.float64)
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    if dtype == "float32":
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


_CASES = [(fwd.MMA, "FP16"), (fwd.MMA, "BF16"), (fwd.TF32, "FP32")]
_WRW_CASES = [(wrw.MMA, "FP16"), (wrw.MMA, "BF16"), (wrw.TF32, "FP32")]

# Most telling first (a device run has a time limit): the corpus in NHWC (16-byte loads), the
# tuning space (256-wide tiles; groups with strides and dilation), then NCHW (scalar loads).


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize(("solver", "dtype"), _CASES, ids=str)
def test_mfma_igemm_matches_reference_on_corpus(solver: str, dtype: str, direction: str) -> None:
    fwd.corpus_case(solver, dtype, direction, "NHWC", COUNT, _need(), exact_fp32=True)


@pytest.mark.parametrize(("solver", "dtype"), _WRW_CASES, ids=str)
def test_mfma_wrw_matches_reference_on_corpus(solver: str, dtype: str) -> None:
    wrw.corpus_case(solver, dtype, _need(), exact_fp32=True, count=COUNT)


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
@pytest.mark.parametrize("shape", (4, 1), ids=("256_tiles", "groups_strides_dilation"))
def test_mfma_igemm_configs(shape: int, dtype: str, direction: str) -> None:
    fwd.configs_case(dtype, shape, direction, _need(), _launchable, exact_fp32=True, sample=4)


@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
@pytest.mark.parametrize("shape", (1, 4), ids=("groups_strides_dilation", "nchw"))
def test_mfma_wrw_configs(shape: int, dtype: str) -> None:
    wrw.configs_case(dtype, shape, _need(), _launchable, exact_fp32=True, sample=3)


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize(("solver", "dtype"), _CASES, ids=str)
def test_mfma_igemm_nchw_scalar_loads(solver: str, dtype: str, direction: str) -> None:
    fwd.corpus_case(solver, dtype, direction, "NCHW", max(10, COUNT // 5), _need(), True)
