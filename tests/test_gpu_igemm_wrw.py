"""``igemm.gpu_mma_wrw`` (fp16/bf16 tensor cores) and ``igemm.gpu_tf32_wrw`` (backward weights)
against the float64 reference (marked ``gpu``).

Problems are corpus-derived: 2-D rows of the corpus (filters, pads, strides, dilations, groups
kept) as backward-weights problems, shrunk to at most 3 images of 16 x 16 with 4, 8, 16 or 24
channels per group so that both the scalar-load path and the 16-byte cp.async path run, and
the reduction (N*Ho*Wo) is long enough for the default split-K; three in four in NHWC, one in
four in NCHW (the scalar path); at least ``MIOCORE_GPU_TEST_PROBLEMS`` (200) per dtype. The
output dw is poisoned with NaN first. Tolerances: fp16/bf16, ``miocore.testing.TOLERANCES``
(output rounding plus fp32 accumulation); TF32, elementwise
``|dw - ref| <= (2**-10 + R * 2**-23) * sum(|x| * |dy|) + 1e-30`` with R = N*Ho*Wo the
reduction length (each input rounded to 10 mantissa bits, products exact in fp32, fp32
accumulation). Also: configs spread over the tuning space (tiles, depth, bk, split-K atomic and
slabs) on a few shapes, and the math mode: an exact handle never gets ``igemm.gpu_tf32_wrw``.
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

MMA = "igemm.gpu_mma_wrw"
TF32 = "igemm.gpu_tf32_wrw"
PER_DTYPE = int(os.environ.get("MIOCORE_GPU_TEST_PROBLEMS", "200"))
__all__ = ["MMA", "TF32", "configs_case", "corpus_case", "with_options"]


@functools.cache
def _rows() -> list[dict]:
    if find_corpus() is None:
        return []
    rows = [r for r in sample_rows(2 * PER_DTYPE, seed=13) if len(r["x"]) == 2]
    return sorted(rows, key=lambda r: r["dir"] != "W")  # backward-weights rows first


def _problems(
    h: miocore.Handle, solver: str, dtype: str, count: int | None = None
) -> list[miocore.ConvProblem]:
    sol = h.registry.get(solver).solver
    want = PER_DTYPE if count is None else count
    out = []
    for i, row in enumerate(_rows()):
        layout = "NCHW" if i % 4 == 3 else "NHWC"
        p = shrink_row(
            {**row, "dtype": dtype, "layout": layout},
            direction="backward_weights",
            max_batch=3,
            max_spatial=16,
            max_channels_per_group=(4, 8, 16, 24)[i % 4],
        )
        if sol.is_applicable(h.context, p.canonical):
            out.append(p)
        if len(out) >= want + 20:
            break
    return out


@pytest.mark.parametrize(
    ("solver", "dtype"), [(MMA, "FP16"), (MMA, "BF16"), (TF32, "FP32")], ids=str
)
def test_igemm_wrw_gpu_matches_reference_on_corpus(solver: str, dtype: str) -> None:
    corpus_case(solver, dtype)


def corpus_case(
    solver: str,
    dtype: str,
    options: tuple[str, ...] = (),
    exact_fp32: bool = False,
    count: int | None = None,
) -> None:
    """Corpus-derived backward-weights problems against the float64 reference, the kernels
    built with ``options`` added; ``exact_fp32``: fp32 held to the exact fp32 tolerance instead
    of the TF32 bound (the MFMA path multiplies in full fp32); ``count``: problems wanted
    (``MIOCORE_GPU_TEST_PROBLEMS`` when None)."""
    h = handle_for(solver, TF32)
    problems = _problems(h, solver, dtype, count)
    if not problems:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    precompile(h, solver, problems, options)
    reg = h.registry.get(solver).solver
    failures = []
    split = 0
    for i, p in enumerate(problems):
        got, inputs = run(h, solver, p, seed=i, options=options)
        why = check(p, got, inputs, tf32=solver == TF32 and not exact_fp32)
        if why:
            failures.append(f"{p.key}: {why}")
        split += reg.default_perf_config(h.context, p.canonical)["split"] > 1
    print(
        f"{solver} {' '.join(options)} {dtype}: {len(problems)} problems checked "
        f"({split} with split-K)"
    )
    assert not failures, f"{len(failures)}/{len(problems)} failed:\n" + "\n".join(failures[:20])
    assert len(problems) >= min(200, PER_DTYPE if count is None else count)
    assert split > 0


_SHAPES = (
    # n, c, k, hw, filter, pads, strides, dilations, groups, layout
    (4, 64, 96, (13, 19), (3, 3), (1, 1), (1, 1), (1, 1), 1, "NHWC"),
    (3, 32, 48, (17, 11), (5, 3), (2, 0), (2, 3), (1, 2), 2, "NHWC"),
    (8, 128, 256, (7, 7), (1, 1), (0, 0), (1, 1), (1, 1), 1, "NHWC"),
    (2, 24, 20, (10, 10), (1, 7), (0, 3), (3, 1), (2, 1), 1, "NHWC"),
    (3, 16, 24, (12, 9), (3, 3), (1, 1), (1, 1), (1, 1), 1, "NCHW"),
    (2, 256, 160, (6, 7), (3, 3), (1, 1), (1, 1), (1, 1), 1, "NHWC"),  # 256-wide tiles
)


@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
@pytest.mark.parametrize("shape", range(len(_SHAPES)))
def test_igemm_wrw_gpu_configs(dtype: str, shape: int) -> None:
    configs_case(dtype, shape)


def configs_case(
    dtype: str,
    shape: int,
    options: tuple[str, ...] = (),
    shared_ok: Callable[[int], bool] | None = None,
    exact_fp32: bool = False,
    sample: int = 8,
) -> None:
    """About ``sample`` configs spread over the tuning space of one of ``_SHAPES`` plus every
    tile shape and split-K atomic and slabs, each against the float64 reference, the kernels
    built with ``options`` added; ``shared_ok`` (given) keeps only configs whose dynamic shared
    memory (bytes) it accepts; ``exact_fp32`` as in :func:`corpus_case`."""
    solver = TF32 if dtype == "float32" else MMA
    h = handle_for(solver, TF32)
    n, c, k, hw, f, pads, strides, dils, groups, layout = _SHAPES[shape]
    problem = miocore.ConvProblem.from_sizes(
        "backward_weights",
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
        layout=layout,
    )
    reg = h.registry.get(solver).solver
    space = reg.perf_config_space(h.context, problem.canonical)
    assert space
    configs = space[:: max(1, len(space) // sample)]
    configs += list({(c["bm"], c["bn"]): c for c in space}.values())  # every tile shape
    configs += [c for c in space if c["split"] > 1 and c["atomic"]][-1:]
    configs += [c for c in space if c["split"] > 1 and not c["atomic"]][-1:]
    configs = list(dict.fromkeys(configs))
    from miocore_igemm.gpu_wrw import shared_bytes

    tf32 = solver == TF32 and not exact_fp32
    run_configs(h, solver, problem, configs, options, tf32, shared_bytes, shared_ok)


def test_exact_handle_never_gets_tf32_wrw_on_device() -> None:
    h = need_exact(TF32)
    problem = miocore.ConvProblem.from_sizes(
        "backward_weights",
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
