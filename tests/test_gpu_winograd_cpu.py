"""CPU checks of the GPU Winograd solvers (``winograd.gpu_f2x3``, ``winograd.gpu_f4x3``).

No device is needed: these run in every CI job where ``miocore-winograd`` is importable.
Besides the parameter struct, applicability, workspace sizes and kernel option sets, the
pipeline the kernels run is emulated in numpy from the compile options themselves (the
``-DWINO_*`` matrices parsed back), with the same tile origins, padding, filter flip, channel
and group indexing and the same roundings (V, U, X, DY in the element type, M in the element type
where the plan stores it so (the half types) else float32, S in float32), and compared with the
float64 reference under ``max(TOLERANCES[dtype], expected_error)``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import miocore
from miocore import reference
from miocore.testing import TOLERANCES, cpu_context

gpu = pytest.importorskip("miocore_winograd.gpu")

F2, F4 = gpu.WinogradGpuF2x3(), gpu.WinogradGpuF4x3()
_NP = {
    miocore.DataType.FLOAT32: np.float32,
    miocore.DataType.FLOAT16: np.float16,
    miocore.DataType.BFLOAT16: ml_dtypes.bfloat16,
}


def _ctx() -> miocore.ExecutionContext:
    device = dataclasses.replace(cpu_context().device, backend="cuda", compute_units=132)
    return miocore.ExecutionContext(device=device)


def _problem(direction: str = "forward", dtype: str = "float32", **kw) -> miocore.ConvProblem:
    args = dict(n=2, c=8, k=12, in_spatial=(9, 11), filter_spatial=(3, 3), pads=(1, 1))
    args.update(kw)
    layout = args.pop("layout", "NHWC")
    return miocore.ConvProblem.from_sizes(direction, dtype=dtype, layout=layout, **args)


def test_param_struct_matches_the_kernel() -> None:
    source = (gpu.KERNEL_DIR / "winograd_gpu.cu").read_text()
    body = re.search(r"struct WinoParams \{(.*?)\};", source, re.S).group(1)
    decls = [line.split("//")[0].strip() for line in body.splitlines()]
    decls = [d for d in decls if d]
    assert decls[:2] == ["MioTensor5 src;", "MioTensor5 dst;"]
    fields = [d[len("mio_index ") : -1] for d in decls[2:]]
    assert all(d.startswith("mio_index ") for d in decls[2:])
    assert tuple(fields) == gpu.PARAM_FIELDS
    plan = gpu._Plan(_problem().canonical, 2)
    packed = plan.params(0, 1, plan.p.x, plan.p.y, 0, 8, 12)
    assert len(packed) == 8 * (20 + len(gpu.PARAM_FIELDS))


def test_kernel_names_exist_in_the_source() -> None:
    source = (gpu.KERNEL_DIR / "winograd_gpu.cu").read_text()
    for direction in ("forward", "backward_data", "backward_weights"):
        for solver in (F2, F4):
            for info in solver.kernel_infos(_problem(direction).canonical):
                assert f"MIO_KERNEL void {info.kernel_name}(" in source
                assert info.source == gpu.SOURCE


def test_applicability_reasons() -> None:
    ctx = _ctx()
    for solver in (F2, F4):
        for dtype in ("float32", "float16", "bfloat16"):
            for layout in ("NCHW", "NHWC"):
                for direction in ("forward", "backward_data", "backward_weights"):
                    p = _problem(direction, dtype, layout=layout)
                    assert solver.is_applicable(ctx, p.canonical), p.key
        cases = {
            "needs 3x3": _problem(filter_spatial=(5, 5), pads=(2, 2)),
            "strides": _problem(strides=(2, 2)),
            "dilations": _problem(dilations=(2, 2)),
            "2-D only": _problem(
                in_spatial=(5, 6, 7), filter_spatial=(3, 3, 3), pads=(1, 1, 1), layout="NDHWC"
            ),
            "groups": _problem(c=64, k=64, groups=64),
        }
        for needle, p in cases.items():
            answer = solver.is_applicable(ctx, p.canonical)
            assert not answer and needle in answer.reason, (needle, answer)
    assert F2.is_applicable(ctx, _problem(c=8, k=8, groups=4).canonical)


def test_workspace_sizes() -> None:
    ctx = _ctx()
    # forward F(2,3): tiles = 2 * 5 * 6 = 60, alpha^2 = 16
    p = _problem(dtype="float16").canonical
    u, v, m = 16 * 8 * 12 * 2, 16 * 60 * 8 * 2, 16 * 60 * 12 * 2  # float16 M
    r = gpu._round
    assert F2.workspace_size(ctx, p) == r(u) + r(v) + r(m)
    # backward data on F(4,3): the pipeline runs over dx (9 x 11): tiles = 2 * 3 * 3
    p = _problem("backward_data", "float32").canonical
    u, v, m = 36 * 12 * 8 * 4, 36 * 18 * 12 * 4, 36 * 18 * 8 * 4
    assert F4.workspace_size(ctx, p) == r(u) + r(v) + r(m)
    # backward weights F(3,2): S (float32) + X + DY over dy's 2x2 tiles (9 x 11 -> 5 x 6)
    p = _problem("backward_weights", "bfloat16").canonical
    s, x, dy = 16 * 12 * 8 * 4, 16 * 60 * 8 * 2, 16 * 60 * 12 * 2
    assert F2.workspace_size(ctx, p) == r(s) + r(x) + r(dy)
    # chunking keeps a large problem inside the budget, one image at least
    big = _problem(n=64, c=256, k=256, in_spatial=(112, 112)).canonical
    plan = gpu._Plan(big, 4)
    assert plan.nb < 64 and plan.workspace <= gpu.WORKSPACE_BUDGET + 3 * 256
    assert sum(nb for _, nb in plan.chunks) == 64


def _matrices(options: tuple[str, ...]) -> dict[str, np.ndarray]:
    out: dict[str, Any] = {}
    for opt in options:
        name, _, value = opt[2:].partition("=")
        if value.startswith("{"):
            out[name] = np.array([float(v.rstrip("f")) for v in value[1:-1].split(",")])
        elif name.startswith("WINO_"):
            out[name] = int(value)
    m, r = out["WINO_M"], out["WINO_R"]
    a = m + r - 1
    return {
        "m": m,
        "r": r,
        "BT": out["WINO_BT"].reshape(a, a).astype(np.float32),
        "G": out["WINO_G"].reshape(a, r).astype(np.float32),
        "AT": out["WINO_AT"].reshape(m, a).astype(np.float32),
    }


def test_kernel_options_per_dtype_and_tile() -> None:
    for solver, (m, r) in ((F2, (2, 3)), (F4, (4, 3))):
        for dtype in ("float32", "float16", "bfloat16"):
            p = _problem(dtype=dtype).canonical
            infos = solver.kernel_infos(p)
            assert len(infos) == 2 and len({i.options for i in infos}) == 1
            assert infos[0].options[0] == gpu.DTYPE_OPTIONS[p.dtype]
            mats = _matrices(infos[0].options)
            assert (mats["m"], mats["r"]) == (m, r)
        wrw = _matrices(solver.kernel_infos(_problem("backward_weights").canonical)[0].options)
        assert (wrw["m"], wrw["r"]) == (3, m)
    assert F2.kernel_infos(_problem(dtype="bfloat16").canonical)[0].options[0] == (
        "-DMIO_DTYPE_BF16"
    )
    # 1-D F(m, r) check of the parsed matrices: A^T [(G g) * (B^T d)] is the correlation
    rng = np.random.default_rng(0)
    for m, r in ((2, 3), (4, 3), (3, 2), (3, 4)):
        mats = _matrices(gpu.kernel_options(miocore.DataType.FLOAT32, m, r))
        d, g = rng.standard_normal(m + r - 1), rng.standard_normal(r)
        got = mats["AT"] @ ((mats["G"] @ g) * (mats["BT"] @ d))
        want = np.array([d[i : i + r] @ g for i in range(m)])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _tiles(src: np.ndarray, th: int, tw: int, step: int, size: int, pads) -> np.ndarray:
    """(N, C, th, tw, size, size) tiles of src (zero outside) at origin tile*step - pad."""
    n, c, h, w = src.shape
    lo_h, lo_w = max(0, pads[0]), max(0, pads[1])
    hh = max(h + lo_h, (th - 1) * step + size) + abs(pads[0]) + step
    ww = max(w + lo_w, (tw - 1) * step + size) + abs(pads[1]) + step
    big = np.zeros((n, c, hh + 8, ww + 8), np.float32)
    # shift so that index (tile*step - pad + 8) into big hits src
    big[:, :, 8 : 8 + h, 8 : 8 + w] = src
    out = np.zeros((n, c, th, tw, size, size), np.float32)
    for i in range(th):
        for j in range(tw):
            h0, w0 = i * step - pads[0] + 8, j * step - pads[1] + 8
            out[:, :, i, j] = big[:, :, h0 : h0 + size, w0 : w0 + size]
    return out


def _emulate(solver: gpu.WinogradGpuSolver, problem: miocore.ConvProblem, inputs: dict):
    """The GPU pipeline in numpy (same plan, matrices, layouts and roundings)."""
    plan = gpu._Plan(problem, solver.m)
    mats = _matrices(solver.kernel_infos(problem)[0].options)
    bt, g_m, at = mats["BT"], mats["G"], mats["AT"]
    store = _NP[problem.dtype]
    x, w, y = (inputs[k].astype(np.float32) for k in ("x", "w", "y"))
    grp, a = problem.groups, plan.alpha
    if plan.wrw:
        xt = _tiles(x, plan.tiles_h, plan.tiles_w, plan.m, a, plan.pads)
        dyt = _tiles(y, plan.tiles_h, plan.tiles_w, plan.m, plan.m, (0, 0))
        xv = np.einsum("ai,ncstij,bj->ncstab", bt, xt, bt).astype(store).astype(np.float32)
        dv = np.einsum("ai,nkstij,bj->nkstab", g_m, dyt, g_m).astype(store).astype(np.float32)
        cg, kg = plan.cing, plan.coutg
        xv = xv.reshape(xv.shape[0], grp, cg, *xv.shape[2:])
        dv = dv.reshape(dv.shape[0], grp, kg, *dv.shape[2:])
        s = np.einsum("ngcstab,ngkstab->gkcab", xv, dv, dtype=np.float32)
        dw = np.einsum("ia,gkcab,jb->gkcij", at, s, at).reshape(problem.w.lengths)
        return dw.astype(store)
    if problem.direction is miocore.Direction.FORWARD:
        src, filt, out_shape = x, w, problem.y.lengths
    else:
        # the filter kernel's flip: pipeline channels (cin = K, cout = C), rotated taps
        src, out_shape = y, problem.x.lengths
        k, cg = w.shape[:2]
        filt = (
            w[:, :, ::-1, ::-1]
            .reshape(grp, k // grp, cg, 3, 3)
            .transpose(0, 2, 1, 3, 4)
            .reshape(cg * grp, k // grp, 3, 3)
        )
    th, tw = plan.tiles_h, plan.tiles_w
    d = _tiles(src, th, tw, plan.m, a, plan.pads)
    v = np.einsum("ai,ncstij,bj->ncstab", bt, d, bt).astype(store).astype(np.float32)
    u = np.einsum("ai,kcij,bj->kcab", g_m, filt, g_m).astype(store).astype(np.float32)
    cing, coutg = plan.cing, plan.coutg
    v = v.reshape(v.shape[0], grp, cing, *v.shape[2:])
    u = u.reshape(grp, coutg, cing, a, a)
    mm = np.einsum("ngcstab,gkcab->ngkstab", v, u, dtype=np.float32)
    if plan.half_m:
        mm = mm.astype(store).astype(np.float32)
    o = np.einsum("ia,ngkstab,jb->ngksitj", at, mm, at)
    n = o.shape[0]
    o = o.reshape(n, grp * coutg, th * plan.m, tw * plan.m)
    return o[:, :, : out_shape[2], : out_shape[3]].astype(store)


_CASES = (
    # direction, dtype, n, c, k, hw, pads, groups
    ("forward", "float32", 2, 16, 24, (9, 11), (1, 1), 1),
    ("forward", "float16", 1, 32, 8, (7, 13), (0, 0), 1),
    ("forward", "bfloat16", 2, 8, 16, (10, 10), (2, 1), 2),
    ("backward_data", "float32", 2, 16, 24, (9, 11), (1, 1), 1),
    ("backward_data", "float16", 1, 8, 32, (12, 7), (0, 2), 4),
    ("backward_data", "bfloat16", 2, 24, 16, (6, 9), (3, 1), 1),
    ("backward_weights", "float32", 2, 16, 24, (9, 11), (1, 1), 1),
    ("backward_weights", "float16", 3, 8, 16, (13, 10), (0, 0), 2),
    ("backward_weights", "bfloat16", 2, 12, 8, (8, 9), (2, 1), 1),
)


@pytest.mark.parametrize("solver", (F2, F4), ids=lambda s: s.name)
@pytest.mark.parametrize("case", _CASES, ids=lambda c: f"{c[0]}-{c[1]}-g{c[7]}")
def test_emulated_pipeline_matches_reference(solver, case) -> None:
    """The kernels' arithmetic, emulated, stays inside the solver's own error bound."""
    direction, dtype, n, c, k, hw, pads, groups = case
    for layout in ("NCHW", "NHWC"):
        p = _problem(
            direction, dtype, n=n, c=c, k=k, in_spatial=hw, pads=pads, groups=groups, layout=layout
        )
        canon = p.canonical
        assert solver.is_applicable(_ctx(), canon)
        inputs = reference.random_inputs(p, seed=sum(hw) + c)
        got = _emulate(solver, canon, inputs)
        out = p.direction.output_tensor
        expected = reference.convolution(p, **{kk: v for kk, v in inputs.items() if kk != out})
        err = reference.relative_error(got, expected)
        bound = max(TOLERANCES[p.dtype], solver.expected_error(_ctx(), canon))
        assert np.isfinite(err) and err <= bound, (solver.name, p.key, err, bound)


def test_expected_error_grows_with_reduction_and_tile() -> None:
    ctx = _ctx()
    small, large = _problem(c=8).canonical, _problem(c=512).canonical
    assert F2.expected_error(ctx, small) < F4.expected_error(ctx, small)
    assert F4.expected_error(ctx, small) < F4.expected_error(ctx, large)
    half = _problem(c=8, dtype="float16").canonical
    assert F4.expected_error(ctx, half) > F4.expected_error(ctx, small)


def test_wti_ranks_tiles_and_stays_in_range() -> None:
    ctx = _ctx()
    p = _problem(n=32, c=256, k=256, in_spatial=(28, 28)).canonical
    w2, w4 = F2.wti(ctx, p), F4.wti(ctx, p)
    assert 0 < w2 <= 1 and 0 < w4 <= 1
    assert F2.wti(ctx, _problem(strides=(2, 2)).canonical) == -1.0


def test_perf_config_is_rejected() -> None:
    with pytest.raises(miocore.InvalidArgumentError, match="perf_config"):
        F2.get_solution(_ctx(), _problem().canonical, miocore.PerfConfig(tile=2))


def test_channels_per_thread() -> None:
    """Vector widths divide the channels and respect both caps; small F(4,3) grids take one
    channel per thread in the input transform; the kernel options carry the widths."""
    assert gpu.vector_width(12, (8, 16), 2) == 4
    assert gpu.vector_width(3, (8, 16), 2) == 1
    assert gpu.vector_width(64, (8, 16), 4) == 4  # 16 bytes of float32
    assert gpu.vector_width(64, (8, 4), 2) == 2
    big = _problem(n=16, c=256, k=256, in_spatial=(56, 56), dtype="float16").canonical
    small = _problem(n=16, c=512, k=512, in_spatial=(14, 14), dtype="float16").canonical
    plan_big, plan_small = gpu._Plan(big, 4), gpu._Plan(small, 4)
    assert plan_big.max_tiles >= gpu.SMALL_TILES > plan_small.max_tiles
    assert (plan_big.vec_in, plan_small.vec_in) == (2, 1)
    for plan in (plan_big, plan_small):
        assert plan.cin % plan.vec_in == 0 and plan.cout % plan.vec_out == 0
    opts = F4.kernel_infos(big)[0].options
    assert "-DWINO_VEC_IN=2" in opts and "-DWINO_VEC_OUT=4" in opts and "-DWINO_M_HALF=1" in opts
    wrw = gpu._Plan(_problem("backward_weights", "float32", c=64, k=64).canonical, 4)
    assert not wrw.half_m and wrw.msize == 4
