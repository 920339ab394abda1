"""``igemm.gpu_mma`` (fp16/bf16 tensor cores) and ``igemm.gpu_tf32`` against the float64
reference (marked ``gpu``), forward and backward data.

Problems are corpus-derived: 2-D rows of the corpus (filters, pads, strides, dilations, groups
kept) run as forward and as backward data, in NHWC (the fast layout), shrunk with 4, 8 or 16
channels per group so that both the scalar-load path (channels not a multiple of 16 bytes) and
the 16-byte cp.async path run; at least ``MIOCORE_GPU_TEST_PROBLEMS`` (200) per dtype and
direction; a smaller NCHW set checks the any-layout scalar path. Outputs (y forward, x
backward data) are poisoned with NaN first. Tolerances: fp16/bf16,
``miocore.testing.TOLERANCES`` (output rounding plus fp32 accumulation); TF32, elementwise
``|y - ref| <= (2**-10 + R * 2**-23) * sum(|x| * |w|) + 1e-30`` with R the reduction length
(each input rounded to 10 mantissa bits, products exact in fp32, fp32 accumulation). Also:
configs spread over the tuning space (tiles, depth, bk, split-K) on a few shapes, and the math
mode: an exact handle never gets ``igemm.gpu_tf32``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import pytest
from gpu_igemm_fixtures import (
    check,
    handle_for,
    need_exact,
    precompile,
    run,
    run_configs,
    with_options,
)

import miocore
from miocore.corpus import find_corpus, sample_rows, shrink_row

pytestmark = pytest.mark.gpu

MMA = "igemm.gpu_mma"
TF32 = "igemm.gpu_tf32"
PER_DTYPE = int(os.environ.get("MIOCORE_GPU_TEST_PROBLEMS", "200"))
__all__ = ["MMA", "TF32", "configs_case", "corpus_case", "with_options"]


@functools.cache
def _rows() -> list[dict]:
    if find_corpus() is None:
        return []
    rows = sample_rows(2 * PER_DTYPE, seed=11)
    return [r for r in rows if len(r["x"]) == 2]


def _problems(
    h: miocore.Handle, solver: str, dtype: str, direction: str, layout: str = "NHWC", count=None
) -> list[miocore.ConvProblem]:
    sol = h.registry.get(solver).solver
    want = PER_DTYPE if count is None else count
    out = []
    for i, row in enumerate(_rows()):
        p = shrink_row(
            {**row, "dtype": dtype, "layout": layout},
            max_channels_per_group=(4, 8, 16)[i % 3],
            direction=direction,
        )
        if sol.is_applicable(h.context, p.canonical):
            out.append(p)
        if len(out) >= want + 20:
            break
    return out


def corpus_case(
    solver: str,
    dtype: str,
    direction: str,
    layout: str,
    count=None,
    options: tuple[str, ...] = (),
    exact_fp32: bool = False,
) -> None:
    """Corpus-derived problems of one solver, dtype, direction and layout against the float64
    reference, the kernels built with ``options`` added; ``exact_fp32``: fp32 held to the exact
    fp32 tolerance instead of the TF32 bound (the MFMA path multiplies in full fp32)."""
    h = handle_for(solver, TF32)
    problems = _problems(h, solver, dtype, direction, layout, count)
    if not problems:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    precompile(h, solver, problems, options)
    failures = []
    vec = 0
    for i, p in enumerate(problems):
        got, inputs = run(h, solver, p, seed=i, options=options)
        why = check(p, got, inputs, tf32=solver == TF32 and not exact_fp32)
        if why:
            failures.append(f"{p.key}: {why}")
        vec += gpu_module().vector_width(p.canonical) > 1
    print(
        f"{solver} {' '.join(options)} {dtype} {direction} {layout}: {len(problems)} problems "
        f"checked ({vec} on the 16-byte path)"
    )
    assert not failures, f"{len(failures)}/{len(problems)} failed:\n" + "\n".join(failures[:20])
    assert len(problems) >= min(200, count or PER_DTYPE)


def gpu_module():
    """The solver module (for its vector-width rule)."""
    from miocore_igemm import gpu

    return gpu


_CASES = [(MMA, "FP16"), (MMA, "BF16"), (TF32, "FP32")]


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize(("solver", "dtype"), _CASES, ids=str)
def test_igemm_gpu_matches_reference_on_corpus(solver: str, dtype: str, direction: str) -> None:
    corpus_case(solver, dtype, direction, "NHWC")


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize(("solver", "dtype"), _CASES, ids=str)
def test_igemm_gpu_nchw_scalar_path(solver: str, dtype: str, direction: str) -> None:
    corpus_case(solver, dtype, direction, "NCHW", count=max(10, PER_DTYPE // 5))


_SHAPES = (
    # n, c, k, hw, filter, pads, strides, dilations, groups
    (2, 64, 96, (13, 19), (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (3, 32, 40, (17, 11), (5, 3), (2, 0), (2, 3), (1, 2), 2),
    (2, 128, 256, (7, 7), (1, 1), (0, 0), (1, 1), (1, 1), 1),
    (1, 24, 20, (10, 10), (1, 7), (0, 3), (3, 1), (2, 1), 1),
    (2, 256, 256, (12, 12), (3, 3), (1, 1), (1, 1), (1, 1), 1),  # 256-wide tiles both ways
    (2, 128, 64, (9, 9), (1, 1), (0, 0), (2, 2), (1, 1), 1),  # strided 1x1 (downsample)
)


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
@pytest.mark.parametrize("shape", range(len(_SHAPES)))
def test_igemm_gpu_configs(dtype: str, shape: int, direction: str) -> None:
    configs_case(dtype, shape, direction)


def configs_case(
    dtype: str,
    shape: int,
    direction: str,
    options: tuple[str, ...] = (),
    shared_ok: Callable[[int], bool] | None = None,
    exact_fp32: bool = False,
    sample: int = 10,
) -> None:
    """About ``sample`` configs spread over the tuning space of one of ``_SHAPES`` (plus two
    split-K and two 256 x 128 ones), each against the float64 reference, the kernels built with
    ``options`` added; ``shared_ok`` (given) keeps only configs whose dynamic shared memory
    (bytes) it accepts; ``exact_fp32`` as in :func:`corpus_case`."""
    solver = TF32 if dtype == "float32" else MMA
    h = handle_for(solver, TF32)
    n, c, k, hw, f, pads, strides, dils, groups = _SHAPES[shape]
    problem = miocore.ConvProblem.from_sizes(
        direction,
        n=n,
        c=c,
        k=k,
        in_spatial=hw,
        filter_spatial=f,
        pads=pads,
        strides=strides,
        dilations=dils,
        groups=groups,
        dtype=dtype,
        layout="NHWC",
    )
    reg = h.registry.get(solver).solver
    space = reg.perf_config_space(h.context, problem.canonical)
    assert space
    configs = space[:: max(1, len(space) // sample)]
    configs += [c for c in space if c["split"] > 1][:2]
    configs += [c for c in space if c["bm"] * c["bn"] == 256 * 128][:2]
    tf32 = solver == TF32 and not exact_fp32
    bytes_of = gpu_module().shared_bytes
    run_configs(h, solver, problem, configs, options, tf32, bytes_of, shared_ok)


def test_exact_handle_never_gets_tf32_on_device() -> None:
    h = need_exact(TF32)
    problem = miocore.ConvProblem.from_sizes(
        "forward",
        n=2,
        c=32,
        k=32,
        in_spatial=(9, 9),
        filter_spatial=(3, 3),
        pads=(1, 1),
        dtype="float32",
        layout="NHWC",
    )
    sols = h.find_solutions(problem, find_mode="NORMAL")
    assert TF32 not in {s.solver for s in sols}
    assert "math mode" in h.last_report.not_applicable[TF32]
    t = handle_for(TF32, TF32)
    assert TF32 in {s.solver for s in t.find_solutions(problem, find_mode="NORMAL")}
    # the exact handle, reading the record the tf32 handle just wrote, still excludes it
    assert TF32 not in {s.solver for s in h.find_solutions(problem, find_mode="FAST")}


def test_find_tunes_gpu_mma() -> None:
    h = need_exact(MMA)
    problem = miocore.ConvProblem.from_sizes(
        "forward",
        n=4,
        c=64,
        k=64,
        in_spatial=(14, 14),
        filter_spatial=(3, 3),
        pads=(1, 1),
        dtype="float16",
        layout="NHWC",
    )
    sols = h.find_solutions(problem, find_mode="NORMAL", exhaustive=True)
    assert MMA in {s.solver for s in sols}
