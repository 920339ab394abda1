"""What the implicit-GEMM GPU tests share, every direction: handles, running one solution on
NaN-poisoned output, checking it against the float64 reference (per-dtype tolerance, or the
TF32 bound), precompiling, and running a spread of tuning configs.

The written tensor follows the direction: y forward, x backward data, w backward weights. The
TF32 bound is elementwise ``|out - ref| <= (2**-10 + R * 2**-23) * ref(|a|, |b|) + 1e-30``
with R the reduction length (FY*FX*Cg forward, FY*FX*Kg backward data, N*Ho*Wo backward
weights): each input rounded to 10 mantissa bits, products exact in fp32, fp32 accumulation.
Kernels that hand fp32 bits to the tensor cores as they lie (``wgmma`` reads TF32 operands
straight from shared memory and ignores the low 13 bits) truncate instead of rounding: twice
the error per input, so ``truncated`` bounds them by ``2**-9`` in place of ``2**-10``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from test_gpu_solvers import DEVICE, _handle

import miocore
from miocore import reference
from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.errors import BackendUnavailableError
from miocore.testing import TOLERANCES


@functools.cache
def tf32_handle() -> miocore.Handle | None:
    """A handle in the ``"tf32"`` math mode (None without a device)."""
    try:
        return miocore.Handle(DEVICE, math_mode="tf32")
    except BackendUnavailableError:
        return None


def need(h: miocore.Handle | None, solver: str) -> miocore.Handle:
    """``h``, or skip the test: no device, or ``solver`` not installed."""
    if h is None:
        pytest.skip("no GPU device")
    if solver not in h.registry:
        pytest.skip(f"{solver} is not installed")
    return h


def need_exact(solver: str) -> miocore.Handle:
    """The exact-math handle, or skip (see :func:`need`)."""
    return need(_handle(), solver)


def handle_for(solver: str, tf32: str) -> miocore.Handle:
    """The tf32 handle for the solver named ``tf32``, the exact one for any other."""
    return need(tf32_handle() if solver == tf32 else _handle(), solver)


def sm90_handle(solver: str, tf32: str = "") -> miocore.Handle:
    """:func:`handle_for`, skipping unless the device is sm_90 (the wgmma solvers' target)."""
    h = handle_for(solver, tf32)
    if h.context.device.arch.replace("_", "") != "sm90":
        pytest.skip(f"{solver} needs sm_90, this device is {h.context.device.arch}")
    return h


def shape_problem(
    direction: str, shape: tuple, dtype: str, unit_strides: bool = False
) -> miocore.ConvProblem:
    """A channels-last problem from an edge-shape row ``(n, c, k, hw, filter, pads, strides,
    dilations)`` (2-D or 3-D: ``hw`` of two or three sizes); ``unit_strides`` drops the row's
    strides (stride-1-only directions)."""
    n, c, k, hw, f, pads, strides, dils = shape
    return miocore.ConvProblem.from_sizes(
        direction,
        n=n,
        c=c,
        k=k,
        in_spatial=hw,
        filter_spatial=f,
        pads=pads,
        strides=(1,) * len(hw) if unit_strides else strides,
        dilations=dils,
        dtype=dtype,
        layout="NDHWC" if len(hw) == 3 else "NHWC",
    )


def assert_all_match(
    h: miocore.Handle, solver: str, problems: list, tf32: bool = False, truncated: bool = False
) -> None:
    """Build ``solver``'s kernels for every problem at once, run each (its default
    configuration) on random data and assert every result matches the reference."""
    precompile(h, solver, problems)
    failures = []
    for i, p in enumerate(problems):
        got, inputs = run(h, solver, p, seed=i)
        why = check(p, got, inputs, tf32=tf32, truncated=truncated)
        if why:
            failures.append(f"{p.key}: {why}")
    assert not failures, f"{len(failures)}/{len(problems)} failed:\n" + "\n".join(failures[:20])


@functools.cache
def _rows_2d(count: int, seed: int) -> tuple[dict, ...]:
    return tuple(r for r in sample_rows(count, seed=seed) if len(r["x"]) == 2)


def corpus_problems(
    h: miocore.Handle,
    solver: str,
    dtype: str,
    direction: str,
    count: int,
    seed: int,
    layout: str = "NHWC",
) -> list[miocore.ConvProblem]:
    """Up to ``count`` one-group 2-D corpus rows (of ``8 x count`` sampled with ``seed``) as
    ``direction`` in ``dtype`` and ``layout``, shrunk to 8, 16, 72 or 136 channels in turn (single
    64-channel slices, tails inside one, several), those ``solver`` takes; skips without the
    corpus."""
    if find_corpus() is None:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    reg = h.registry.get(solver).solver
    problems = []
    for i, row in enumerate(_rows_2d(8 * count, seed)):
        if row.get("groups", 1) != 1:
            continue
        p = shrink_row(
            {**row, "dtype": dtype, "layout": layout},
            max_channels_per_group=(8, 16, 72, 136)[i % 4],
            direction=direction,
        )
        if reg.is_applicable(h.context, p.canonical):
            problems.append(p)
        if len(problems) >= count:
            break
    return problems


def with_options(kernels: Sequence[Any], options: tuple[str, ...]) -> tuple:
    """The kernels with extra compile options (``-DMIO_MFMA_EMULATE``: the MFMA path)."""
    return tuple(dataclasses.replace(k, options=(*k.options, *options)) for k in kernels)


def written(problem: miocore.ConvProblem) -> str:
    """The tensor the direction writes: y forward, x backward data, w backward weights."""
    return {"forward": "y", "backward_data": "x", "backward_weights": "w"}[
        problem.canonical.direction.value
    ]


def run(
    h: miocore.Handle,
    solver: str,
    problem: miocore.ConvProblem,
    seed: int,
    cfg: Any = None,
    options: tuple[str, ...] = (),
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Run on device with the written tensor poisoned with NaN (kernels built with
    ``options`` added); return (what was written, the random inputs)."""
    canon = problem.canonical
    reg = h.registry.get(solver).solver
    sol = reg.get_solution(h.context, canon, cfg)
    compiled = h.backend.compile(with_options(sol.kernels, options))
    inputs = reference.random_inputs(problem, seed)
    out = written(problem)
    dev = {}
    for name in ("x", "w", "y"):
        desc = getattr(problem, name)
        host = np.full(desc.lengths, np.nan, np.float32) if name == out else inputs[name]
        dev[name] = h.backend.from_host(desc, host)
    ws = h.backend.allocate_workspace(sol.workspace_size)
    sol.invoker_factory(compiled)(
        h, miocore.InvokeParams(problem=canon, x=dev["x"], w=dev["w"], y=dev["y"], workspace=ws)
    )
    return h.backend.to_host(dev[out]), inputs


def _read(problem: miocore.ConvProblem, inputs: dict, absolute: bool = False) -> dict:
    """The two tensors the direction reads (float64 magnitudes for the TF32 bound)."""
    names = [n for n in ("x", "w", "y") if n != written(problem)]
    if absolute:
        return {n: np.abs(inputs[n].astype(np.float64)) for n in names}
    return {n: inputs[n] for n in names}


def reduction_length(problem: miocore.ConvProblem) -> int:
    """Products summed into one output element (the R of the TF32 bound)."""
    c = problem.canonical
    out = written(problem)
    if out == "w":
        return problem.n * int(np.prod(problem.y.lengths[2:]))
    per_group = c.k // c.groups if out == "x" else c.c // c.groups
    return int(np.prod(problem.w.lengths[2:])) * per_group


def check(
    problem: miocore.ConvProblem,
    got: np.ndarray,
    inputs: dict,
    tf32: bool,
    truncated: bool = False,
) -> str | None:
    """None when ``got`` matches the float64 reference, else why not (``truncated``: the
    TF32 inputs are truncated, not rounded)."""
    expected = reference.convolution(problem, **_read(problem, inputs))
    got64 = got.astype(np.float64)
    if not np.isfinite(got64).all():
        return "not all written (NaN left)"
    if tf32:
        absref = reference.convolution(problem, **_read(problem, inputs, absolute=True))
        per_input = 2.0**-9 if truncated else 2.0**-10
        bound = (per_input + reduction_length(problem) * 2.0**-23) * absref + 1e-30
        excess = float(np.max(np.abs(got64 - expected) - bound))
        return None if excess <= 0 else f"exceeds the TF32 bound by {excess:.3g}"
    err = reference.relative_error(got, expected)
    tol = TOLERANCES[problem.dtype]
    return None if err <= tol else f"relative error {err:.3g} > {tol}"


def precompile(
    h: miocore.Handle,
    solver: str,
    problems: list[miocore.ConvProblem],
    options: tuple[str, ...] = (),
) -> None:
    """Build every problem's default kernels at once; fail on the first compile error."""
    reg = h.registry.get(solver).solver
    kernels = [k for p in problems for k in reg.get_solution(h.context, p.canonical).kernels]
    failures = h.backend.precompile(with_options(kernels, options))
    assert not failures, next(iter(failures.values()))


def run_configs(
    h: miocore.Handle,
    solver: str,
    problem: miocore.ConvProblem,
    configs: list[Any],
    options: tuple[str, ...],
    tf32: bool,
    shared_bytes: Callable[[Any, Any], int],
    shared_ok: Callable[[int], bool] | None = None,
    truncated: bool = False,
) -> None:
    """Each config against the float64 reference, all built first; ``shared_ok`` (given)
    keeps only configs whose dynamic shared memory (``shared_bytes``) it accepts."""
    canon = problem.canonical
    if shared_ok is not None:
        configs = [c for c in configs if shared_ok(shared_bytes(canon, c))]
    reg = h.registry.get(solver).solver
    kernels = [kk for cfg in configs for kk in reg.get_solution(h.context, canon, cfg).kernels]
    assert not h.backend.precompile(with_options(kernels, options))
    bad = []
    for i, cfg in enumerate(configs):
        got, inputs = run(h, solver, problem, seed=i, cfg=cfg, options=options)
        why = check(problem, got, inputs, tf32=tf32, truncated=truncated)
        if why:
            bad.append(f"{dict(cfg)}: {why}")
    assert not bad, f"{len(bad)}/{len(configs)} configs failed:\n" + "\n".join(bad[:10])


def spread_configs(space: list, default: object, count: int = 48) -> list:
    """The default, every tile x schedule x split x box once, then the rest of ``space`` spread
    evenly up to ``count`` (3-D spaces hold hundreds; each run checks a 3-D reference)."""
    picks = [default]
    seen = set()
    for c in space:
        key = (c["bm"], c["bn"], c.get("pingpong", 0), c["split"], c["tw"], c["th"], c["td"])
        if key not in seen:
            seen.add(key)
            picks.append(c)
    rest = [c for c in space if c not in picks]
    step = max(1, len(rest) // max(1, count - len(picks)))
    picks += rest[::step]
    return list({tuple(sorted(dict(c).items())): c for c in picks}.values())[: max(count, 1)]
