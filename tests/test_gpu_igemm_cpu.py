"""CPU checks of the igemm GPU solvers: the kernel's parameter struct, configs, math mode.

No device is needed: these run in every CI job where ``miocore-igemm`` is importable.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import miocore
from miocore.testing import cpu_context

gpu = pytest.importorskip("miocore_igemm.gpu")


def _ctx(mode: str = "exact", sms: int = 132, arch: str = "sm90") -> miocore.ExecutionContext:
    device = dataclasses.replace(cpu_context().device, backend="cuda", compute_units=sms, arch=arch)
    return miocore.ExecutionContext(device=device, math_mode=mode)


def _problem(
    dtype: str = "float16",
    c: int = 64,
    k: int = 64,
    direction: str = "forward",
    layout: str = "NHWC",
    **kw,
) -> miocore.ConvProblem:
    args = dict(n=2, c=c, k=k, in_spatial=(9, 11), filter_spatial=(3, 3), pads=(1, 1))
    args.update(kw)
    return miocore.ConvProblem.from_sizes(direction, dtype=dtype, layout=layout, **args)


def test_param_struct_matches_the_kernel() -> None:
    source = (gpu.KERNEL_DIR / "igemm_mma.cu").read_text()
    body = re.search(r"struct MioIgemmParams \{(.*?)\};", source, re.S).group(1)
    fields = []
    for line in body.splitlines():
        decl = line.split("//")[0].strip()
        if decl:
            assert decl.startswith("mio_index ") and decl.endswith(";"), decl
            fields += [f.strip() for f in decl[len("mio_index ") : -1].split(",")]
    assert tuple(fields) == gpu.PARAM_FIELDS


def test_pack_params_order_and_completeness() -> None:
    values = np.frombuffer(
        gpu.pack_params({f: i for i, f in enumerate(gpu.PARAM_FIELDS)}), np.int64
    )
    assert list(values) == list(range(len(gpu.PARAM_FIELDS)))
    with pytest.raises(ValueError):
        gpu.pack_params({"n": 1})


def test_applicability() -> None:
    mma, tf32 = gpu.GpuMmaIgemmSolver(), gpu.GpuTf32IgemmSolver()
    for direction in ("forward", "backward_data"):
        for layout in ("NHWC", "NCHW"):
            for dtype in ("float16", "bfloat16"):
                p = _problem(dtype, direction=direction, layout=layout).canonical
                assert mma.is_applicable(_ctx(), p), (direction, layout, dtype)
    answer = mma.is_applicable(_ctx(), _problem("float32").canonical)
    assert not answer and "float32" in answer.reason
    wrw = mma.is_applicable(_ctx(), _problem(direction="backward_weights").canonical)
    assert not wrw and "backward_weights" in wrw.reason
    three_d = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=8, k=8, in_spatial=(4, 5, 5), filter_spatial=(3, 3, 3), dtype="float16"
    )
    answer = mma.is_applicable(_ctx(), three_d.canonical)
    assert not answer and "3-D" in answer.reason
    fp32 = _problem("float32").canonical
    answer = tf32.is_applicable(_ctx("exact"), fp32)
    assert not answer and "math mode is 'exact'" in answer.reason
    assert tf32.is_applicable(_ctx("tf32"), fp32)
    assert tf32.is_applicable(
        _ctx("tf32"), _problem("float32", direction="backward_data").canonical
    )
    assert not tf32.is_applicable(_ctx("tf32"), _problem().canonical)


def test_tap_reach_and_the_32_bit_offsets() -> None:
    """The kernel adds a tap's offset (filter extent plus the group's channels) in 32 bits: the
    reach is computed from the strides, and a problem whose reach needs more is declined."""
    mma = gpu.GpuMmaIgemmSolver()
    p = _problem().canonical  # NHWC, C = 64, 3 x 3, 9 x 11 input
    # A: 2 rows of 11 * 64 + 2 columns of 64 + 64 channels; B (KYXC): 2 * 192 + 2 * 64 + 64
    assert gpu.tap_reach(p) == max(2 * 704 + 2 * 64 + 64, 2 * 192 + 2 * 64 + 64)
    huge = _problem(c=2048, k=8, layout="NCHW", in_spatial=(1100, 1100)).canonical
    assert gpu.tap_reach(huge) >= 1 << 31  # NCHW: the channel stride is H * W
    answer = mma.is_applicable(_ctx(), huge)
    assert not answer and "32-bit offsets" in answer.reason


@pytest.mark.parametrize(
    ("kw", "div"),
    [
        (dict(), 0),
        (dict(strides=(2, 2)), 0),
        (dict(direction="backward_data"), 0),
        (dict(direction="backward_data", strides=(2, 2)), 0),  # stride phases
        (dict(direction="backward_data", dilations=(2, 2)), 0),
        (dict(direction="backward_data", strides=(2, 2), dilations=(2, 2)), 1),
    ],
    ids=str,
)
def test_stride_division_only_where_taps_skip(kw: dict, div: int) -> None:
    """Only dilated strided backward data (no stride phases) compiles the per-tap division."""
    mma = gpu.GpuMmaIgemmSolver()
    p = _problem(**kw).canonical
    kernels = mma.get_solution(_ctx(), p).kernels
    (main,) = [k for k in kernels if k.kernel_name == "igemm_mma_main"]
    assert f"-DMIO_BWD_DIV={div}" in main.options


_CONFIG_PROBLEMS = (
    dict(),
    dict(c=4, k=4),
    dict(c=256, k=512, groups=2),
    dict(c=64, k=256, in_spatial=(32, 32)),
    dict(direction="backward_data"),
    dict(direction="backward_data", c=512, k=128, in_spatial=(28, 28), strides=(2, 2)),
    dict(direction="backward_data", c=48, k=24, groups=3, layout="NCHW"),
)


@pytest.mark.parametrize("kw", _CONFIG_PROBLEMS, ids=str)
def test_configs_fit_and_default_is_in_the_space(kw: dict) -> None:
    mma = gpu.GpuMmaIgemmSolver()
    canon = _problem(**kw).canonical
    ctx = _ctx()
    space = mma.perf_config_space(ctx, canon)
    assert space
    assert all(gpu.shared_bytes(canon, c) <= gpu.shared_limit(ctx) for c in space)
    default = mma.default_perf_config(ctx, canon)
    assert default in space and mma.is_valid_perf_config(ctx, canon, default)
    bwd = canon.direction.value == "backward_data"
    wt = int(np.prod(canon.w.lengths)) * canon.dtype.itemsize if bwd else 0
    for cfg in space:
        sol = mma.get_solution(ctx, canon, cfg)
        assert sol.workspace_size == mma.workspace_size(ctx, canon, cfg)
        assert sol.workspace_size >= wt
        names = [k.kernel_name for k in sol.kernels]
        want = ["igemm_mma_wtrans"] * bwd + ["igemm_mma_main"]
        want += ["igemm_mma_reduce"] * (cfg["split"] > 1)
        assert names == want
        wm, wn = gpu.warp_grid(cfg["bm"], cfg["bn"])
        main = sol.kernels[int(bwd)]
        assert f"-DMIO_WARPS_M={wm}" in main.options and f"-DMIO_WARPS_N={wn}" in main.options
        assert main.block == (gpu.THREADS,) and main.block == (gpu.THREADS,)
        assert f"-DMIO_BWD={int(bwd)}" in main.options
    assert not mma.is_valid_perf_config(ctx, canon, miocore.PerfConfig(bm=3))


def test_big_tiles_need_the_opt_in_limits() -> None:
    """128 x 256 tiles with 4 stages exceed 48 KiB: offered on sm_90, not where the limit is
    48 KiB (pre-sm_80) and not beyond the 64 KiB LDS on AMD."""
    mma = gpu.GpuMmaIgemmSolver()
    canon = _problem(c=256, k=256, in_spatial=(56, 56)).canonical

    def big(ctx: miocore.ExecutionContext) -> list:
        return [c for c in mma.perf_config_space(ctx, canon) if c["bm"] * c["bn"] == 128 * 256]

    assert big(_ctx())
    assert not big(_ctx(arch="sm75"))
    hip = miocore.ExecutionContext(
        device=dataclasses.replace(
            cpu_context().device, backend="hip", compute_units=104, arch="gfx90a"
        )
    )
    assert all(gpu.shared_bytes(canon, c) <= 64 * 1024 for c in mma.perf_config_space(hip, canon))


def test_warp_grids() -> None:
    for bm, bn in gpu.TILES:
        wm, wn = gpu.warp_grid(bm, bn)
        assert wm * wn == 8
        assert (bm // wm) % 16 == 0 and (bn // wn) % 16 == 0
    assert gpu.warp_grid(128, 128) == (2, 4)
    assert gpu.warp_grid(256, 128) == (4, 2)
    assert gpu.warp_grid(128, 256) == (2, 4)


def test_gemm_params_backward_data() -> None:
    p = _problem(direction="backward_data", c=48, k=24, groups=3, strides=(2, 1)).canonical
    s = gpu.gemm_params(p)
    # rows over dx, columns the input channels of a group, reduction (fy, fx, k) over dy
    # stride (2, 1): one GEMM per stride phase (2 of them), rows ceil(9 / 2) x 11 each
    assert gpu.is_phased(p) and s["phases"] == 2 and (s["rh"], s["rw"]) == (5, 11)
    assert s["m"] == 2 * 5 * 11 and s["mo"] == 2 * 9 * 11 and s["ocg"] == 16 and s["icg"] == 8
    assert (s["ih"], s["iw"], s["oh"], s["ow"]) == (*p.y.lengths[2:], 9, 11)
    assert s["kred"] == 2 * 3 * 8 and s["bs_c"] == 1 and s["bs_col"] == 3 * 3 * 8
    assert s["bs_grp"] == 16 * 3 * 3 * 8
    dilated = _problem(direction="backward_data", strides=(2, 2), dilations=(2, 1)).canonical
    d = gpu.gemm_params(dilated)
    assert not gpu.is_phased(dilated) and d["phases"] == 1 and d["kred"] == 3 * 3 * 64
    f = gpu.gemm_params(_problem(c=48, k=24, groups=3).canonical)
    assert f["ocg"] == 8 and f["icg"] == 16 and f["kred"] == 3 * 3 * 16


def test_wti_ranks_the_paths() -> None:
    mma = gpu.GpuMmaIgemmSolver()
    ctx = _ctx()
    big = dict(c=256, k=256, in_spatial=(28, 28))
    fast = mma.wti(ctx, _problem(**big).canonical)
    nchw = mma.wti(ctx, _problem(layout="NCHW", **big).canonical)
    # strided and dilated backward data multiplies every tap (undilated runs per phase)
    strided = mma.wti(
        ctx,
        _problem(direction="backward_data", strides=(2, 2), dilations=(2, 2), **big).canonical,
    )
    plain = mma.wti(ctx, _problem(direction="backward_data", **big).canonical)
    assert 0 < nchw < fast <= 1
    assert 0 < strided < plain <= 1


def test_vector_width() -> None:
    assert gpu.vector_width(_problem(c=64).canonical) == 8
    assert gpu.vector_width(_problem(c=4, k=4).canonical) == 1
    assert gpu.vector_width(_problem("float32", c=4, k=4).canonical) == 4
    assert gpu.vector_width(_problem(layout="NCHW").canonical) == 1
    # backward data reduces over k: the output channels decide
    assert gpu.vector_width(_problem(c=4, k=64, direction="backward_data").canonical) == 8
    assert gpu.vector_width(_problem(c=64, k=4, direction="backward_data").canonical) == 1
