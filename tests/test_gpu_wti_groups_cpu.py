"""GEMM-shaped GPU solvers rate narrow groups as what they are (no device needed).

On the sm90 database's records the GEMM-family solvers ran depthwise layers 390-7,000x below
their dense rate; their WTI had rated a depthwise layer like a dense one, so where no learned
model decides (another GPU, a TF32 find) a GEMM could keep the depthwise kernels out of
DYNAMIC_HYBRID's measurements. ``miocore.backends.gpu_kernels.gemm_fill`` scales them.
"""

from __future__ import annotations

import dataclasses
import importlib

import pytest

import miocore
from miocore.backends.gpu_kernels import FULL_GEMM_SIDE, gemm_fill
from miocore.problem.dtypes import DataType
from miocore.solver import Ceilings
from miocore.testing import cpu_context

#: (module, class) of each GEMM-shaped GPU solver, and the math mode / dtype it runs in.
GEMM_SOLVERS = (
    ("miocore_gemm.gpu_nhwc", "GpuChannelsLastGemmSolver", "exact", "float32"),
    ("miocore_gemm.gpu_nhwc", "GpuChannelsLastGemmTf32Solver", "tf32", "float32"),
    ("miocore_gemm.gpu", "GpuIm2colGemmSolver", "exact", "float32"),
    ("miocore_igemm.gpu_fma", "GpuFmaIgemmSolver", "exact", "float32"),
)


def _ctx(math_mode: str = "exact") -> miocore.ExecutionContext:
    # H200-like ceilings: fp16 tensor rate ~15x the fp32 one, 4.8 TB/s.
    gflops = {dt: 60_000.0 for dt in DataType}
    gflops[DataType.FLOAT16] = gflops[DataType.BFLOAT16] = 900_000.0
    device = dataclasses.replace(
        cpu_context().device,
        backend="cuda",
        compute_units=132,
        arch="sm_90",
        measure_ceilings=lambda: Ceilings(gflops=gflops, gbps=4800.0),
    )
    return miocore.ExecutionContext(device=device, math_mode=math_mode)


def _layer(direction: str, groups: int, dtype: str = "float32") -> miocore.ConvProblem:
    return miocore.ConvProblem.from_sizes(
        direction,
        n=32,
        c=144,
        k=144,
        in_spatial=(56, 56),
        filter_spatial=(3, 3),
        pads=(1, 1),
        groups=groups,
        dtype=dtype,
        layout="NHWC",
    ).canonical


def test_gemm_fill_is_one_for_ordinary_layers_and_small_for_narrow_groups() -> None:
    dense, depthwise = _layer("forward", 1), _layer("forward", 144)
    assert gemm_fill(dense) == 1.0
    assert gemm_fill(depthwise) == pytest.approx((1 / FULL_GEMM_SIDE) * (9 / FULL_GEMM_SIDE))
    grouped = _layer("forward", 36)  # ResNeXt-like: 4 channels a group
    assert gemm_fill(depthwise) < gemm_fill(grouped) < gemm_fill(dense)
    # The same GEMM in every direction (the sides swap roles, not sizes).
    assert {
        gemm_fill(_layer(d, 144)) for d in ("forward", "backward_data", "backward_weights")
    } == {gemm_fill(depthwise)}


def _solver(module: str, name: str) -> object:
    mod = pytest.importorskip(module)
    return getattr(mod, name)()


@pytest.mark.parametrize(("module", "name", "mode", "dtype"), GEMM_SOLVERS)
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_a_gemm_solver_predicts_a_depthwise_layer_slower_than_the_plain_direct_kernel(
    module: str, name: str, mode: str, dtype: str, direction: str
) -> None:
    """What the records say (2.8 ms for ``gemm.gpu_nhwc`` against 0.67 for
    ``direct.gpu_naive`` on this layer in fp32): the GEMM's predicted time is the longer."""
    naive_mod = pytest.importorskip("miocore_direct.gpu")
    solver = _solver(module, name)
    naive = naive_mod.GpuNaiveDirectSolver()
    ctx = _ctx(mode)
    p = _layer(direction, 144, dtype)
    if not solver.is_applicable(ctx, p) or not naive.is_applicable(ctx, p):
        pytest.skip(f"{solver.name} or direct.gpu_naive does not apply")
    ideal = ctx.ideal_ms(p)
    gemm_ms, naive_ms = ideal / solver.wti(ctx, p), ideal / naive.wti(ctx, p)
    assert gemm_ms > naive_ms, (solver.name, gemm_ms, naive_ms)
    # ... while on the dense layer of the same sizes the GEMM is predicted the faster.
    dense = _layer(direction, 1, dtype)
    assert ideal_ms_ratio(ctx, solver, naive, dense) < 1.0


def ideal_ms_ratio(ctx: miocore.ExecutionContext, a: object, b: object, p: object) -> float:
    """``a``'s predicted time over ``b``'s on ``p``."""
    return b.wti(ctx, p) / a.wti(ctx, p)  # type: ignore[attr-defined]


def test_the_solver_classes_named_here_exist_where_their_plugin_is_installed() -> None:
    for module, name, _, _ in GEMM_SOLVERS:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        assert hasattr(mod, name), f"{module}.{name}"
