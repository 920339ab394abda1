"""CPU checks of the igemm backward-weights GPU solvers: the kernel's parameter struct, the
applicability rules, the config space and the default's split-K.

No device is needed: these run in every CI job where ``miocore-igemm`` is importable.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import miocore
from miocore.testing import cpu_context

wrw = pytest.importorskip("miocore_igemm.gpu_wrw")


def _ctx(mode: str = "exact", sms: int = 132, arch: str = "sm90") -> miocore.ExecutionContext:
    device = dataclasses.replace(cpu_context().device, backend="cuda", compute_units=sms, arch=arch)
    return miocore.ExecutionContext(device=device, math_mode=mode)


def _problem(
    dtype: str = "float16", c: int = 64, k: int = 64, layout: str = "NHWC", **kw
) -> miocore.ConvProblem:
    args = dict(n=2, c=c, k=k, in_spatial=(9, 11), filter_spatial=(3, 3), pads=(1, 1))
    args.update(kw)
    return miocore.ConvProblem.from_sizes("backward_weights", dtype=dtype, layout=layout, **args)


def test_param_struct_matches_the_kernel() -> None:
    source = (wrw.KERNEL_DIR / "igemm_wrw.cu").read_text()
    body = re.search(r"struct MioWrwParams \{(.*?)\};", source, re.S).group(1)
    fields = []
    for line in body.splitlines():
        decl = line.split("//")[0].strip()
        if decl:
            assert decl.startswith("mio_index ") and decl.endswith(";"), decl
            fields += [f.strip() for f in decl[len("mio_index ") : -1].split(",")]
    assert tuple(fields) == wrw.PARAM_FIELDS
    assert f"#define MIO_PAD {wrw.PAD}" in source
    assert f"#define MIO_THREADS {wrw.THREADS}" in source


def test_pack_params_order_and_completeness() -> None:
    values = np.frombuffer(
        wrw.pack_params({f: i for i, f in enumerate(wrw.PARAM_FIELDS)}), np.int64
    )
    assert list(values) == list(range(len(wrw.PARAM_FIELDS)))
    with pytest.raises(ValueError):
        wrw.pack_params({"n": 1})


def test_params_follow_the_problem() -> None:
    solver = wrw.GpuMmaWrwSolver()
    p = _problem(c=32, k=48, groups=2, strides=(2, 1), dilations=(1, 2), pads=(1, 2)).canonical
    cfg = solver.default_perf_config(_ctx(), p)
    v = solver.params(p, cfg)
    assert (v["cg"], v["kg"], v["groups"]) == (16, 24, 2)
    assert (v["sh"], v["sw"], v["dh"], v["dw"], v["ph"], v["pw"]) == (2, 1, 1, 2, 1, 2)
    assert v["m"] == p.n * p.out_spatial[0] * p.out_spatial[1]
    assert v["r"] == 3 * 3 * 16
    # NHWC x, dy and KYXC dw: channel strides 1
    assert v["xs_c"] == v["ys_c"] == v["ws_c"] == 1
    assert v["ws_k"] == 3 * 3 * 16
    assert v["tiles_per_split"] * v["splits"] >= -(-v["m"] // cfg["bk"])


def test_applicability() -> None:
    mma, tf32 = wrw.GpuMmaWrwSolver(), wrw.GpuTf32WrwSolver()
    assert mma.is_applicable(_ctx(), _problem().canonical)
    assert mma.is_applicable(_ctx(), _problem("bfloat16").canonical)
    assert mma.is_applicable(_ctx(), _problem(layout="NCHW").canonical)  # scalar loads
    assert not mma.is_applicable(_ctx(), _problem("float32").canonical)
    fwd = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=8, k=8, in_spatial=(5, 5), filter_spatial=(3, 3), dtype="float16"
    )
    assert "backward weights only" in mma.is_applicable(_ctx(), fwd.canonical).reason
    three_d = miocore.ConvProblem.from_sizes(
        "backward_weights",
        n=1,
        c=8,
        k=8,
        in_spatial=(5, 5, 5),
        filter_spatial=(3, 3, 3),
        dtype="float16",
    )
    assert "2-D" in mma.is_applicable(_ctx(), three_d.canonical).reason
    fp32 = _problem("float32").canonical
    answer = tf32.is_applicable(_ctx("exact"), fp32)
    assert not answer and "math mode is 'exact'" in answer.reason
    assert tf32.is_applicable(_ctx("tf32"), fp32)
    assert not tf32.is_applicable(_ctx("tf32"), _problem().canonical)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"c": 4, "k": 4},
        {"c": 256, "k": 512, "groups": 2},
        {"c": 3, "k": 64, "filter_spatial": (7, 7), "strides": (2, 2), "pads": (3, 3)},
        {"layout": "NCHW", "c": 16, "k": 24},
        {"dtype": "float32", "c": 64, "k": 128},
    ],
    ids=str,
)
def test_configs_fit_and_default_is_in_the_space(kw: dict) -> None:
    dtype = kw.pop("dtype", "float16")
    solver = wrw.GpuTf32WrwSolver() if dtype == "float32" else wrw.GpuMmaWrwSolver()
    ctx = _ctx("tf32")
    canon = _problem(dtype, **kw).canonical
    space = solver.perf_config_space(ctx, canon)
    assert space
    assert all(wrw.shared_bytes(canon, c) <= wrw.shared_limit(ctx) for c in space)
    default = solver.default_perf_config(ctx, canon)
    assert default in space and solver.is_valid_perf_config(ctx, canon, default)
    for cfg in space:
        sol = solver.get_solution(ctx, canon, cfg)
        assert sol.workspace_size == solver.workspace_size(ctx, canon, cfg)
        expected = 1 if cfg["split"] == 1 else 2 + cfg["atomic"]
        assert len(sol.kernels) == expected
        assert sol.kernels[0].grid[2] == cfg["split"]
    assert not solver.is_valid_perf_config(ctx, canon, miocore.PerfConfig(bm=3))
    bad = miocore.PerfConfig({**dict(default), "split": 3})
    assert not solver.is_valid_perf_config(ctx, canon, bad)


def test_shared_limit_follows_the_architecture() -> None:
    assert wrw.shared_limit(_ctx(arch="sm90")) == 227 * 1024
    assert wrw.shared_limit(_ctx(arch="sm80")) == 163 * 1024
    assert wrw.shared_limit(_ctx(arch="sm70")) == wrw.SHARED_LIMIT
    hip = miocore.ExecutionContext(
        device=dataclasses.replace(cpu_context().device, backend="hip", arch="gfx90a")
    )
    assert wrw.shared_limit(hip) == wrw.SHARED_LIMIT
    canon = _problem(c=256, k=256).canonical
    solver = wrw.GpuMmaWrwSolver()
    small = solver.perf_config_space(_ctx(arch="sm70"), canon)
    assert small and all(wrw.shared_bytes(canon, c) <= wrw.SHARED_LIMIT for c in small)
    assert len(solver.perf_config_space(_ctx(), canon)) > len(small)


def test_vector_widths() -> None:
    assert wrw.vector_widths(_problem(c=64).canonical) == (8, 8)
    assert wrw.vector_widths(_problem(c=4, k=4).canonical) == (1, 1)
    assert wrw.vector_widths(_problem(c=3, k=64).canonical) == (8, 1)
    assert wrw.vector_widths(_problem("float32", c=4, k=4).canonical) == (4, 4)
    assert wrw.vector_widths(_problem(layout="NCHW").canonical) == (1, 1)


def test_default_split_fills_the_device() -> None:
    """ResNet-50-like layers: split-K brings the default grid to more than half of, and at most,
    1.5 waves of two resident blocks per SM (split 2 dropped to 1, at most 128 splits, at least
    4 reduction tiles per split)."""
    solver = wrw.GpuMmaWrwSolver()
    shapes = ((64, 64, 56, 1), (128, 128, 28, 3), (512, 2048, 7, 1), (256, 256, 14, 3))
    for c, k, hw, f in (*shapes, (1024, 256, 14, 1), (256, 512, 56, 1)):
        canon = miocore.ConvProblem.from_sizes(
            "backward_weights",
            n=32,
            c=c,
            k=k,
            in_spatial=(hw, hw),
            filter_spatial=(f, f),
            pads=(f // 2,) * 2,
            dtype="float16",
            layout="NHWC",
        ).canonical
        cfg = solver.default_perf_config(_ctx(), canon)
        assert (cfg["bm"], cfg["bn"]) == wrw.default_tile(canon)
        assert cfg["atomic"] == 0 and cfg["split"] != 2
        grid = solver.get_solution(_ctx(), canon, cfg).kernels[0].grid
        blocks, tiles = grid[0] * grid[1] * grid[2], grid[0] * grid[1]
        wave = 3 * 132
        rtiles = -(-32 * hw * hw // cfg["bk"])
        if cfg["split"] > 1:
            assert blocks <= wave, (c, k, cfg)
        full = 2 * blocks > wave or cfg["split"] == 128 or rtiles < 8 * cfg["split"]
        assert full or (cfg["split"] == 1 and 4 * tiles > wave), (c, k, cfg)
