"""direct.grouped's shifted-diagonal path (groups as wide in as out, 4 and 8 channels) and the
group-innermost path it leaves multipliers to, against an independent float64 reference
written here (explicit padding and one einsum per tap), on random non-zero data.
"""

from __future__ import annotations

import numpy as np
import pytest
from miocore_direct import GroupedDirectSolver
from miocore_direct.grouped import shift_applies

from miocore import ConvProblem
from miocore.testing import run_solver

# float32 accumulation everywhere; float16/bfloat16 results are rounded once at the end.
TOL = {"float32": 3e-6, "float16": 1.5e-3, "bfloat16": 1.2e-2}


def _problem(direction: str, layout: str, dtype: str, cg: int, kg: int, geo: tuple) -> ConvProblem:
    (h, w), filt, pads, strides, dils = geo
    return ConvProblem.from_sizes(
        direction,
        n=2,
        c=3 * cg,
        k=3 * kg,
        in_spatial=(h, w),
        filter_spatial=filt,
        pads=pads,
        strides=strides,
        dilations=dils,
        groups=3,
        dtype=dtype,
        layout=layout,
    )


def _taps(p: ConvProblem):
    """(fy, fx, input rows, input columns) of each tap in the padded input, as slices."""
    (sh, sw), (dh, dw) = p.conv.strides, p.conv.dilations
    oh, ow = p.out_spatial
    for fy in range(p.filter_spatial[0]):
        for fx in range(p.filter_spatial[1]):
            rows = slice(fy * dh, fy * dh + (oh - 1) * sh + 1, sh)
            cols = slice(fx * dw, fx * dw + (ow - 1) * sw + 1, sw)
            yield fy, fx, rows, cols


def _reference(p: ConvProblem, x: np.ndarray, w: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The written tensor in float64, from logical (N, C, H, W) arrays."""
    g = p.groups
    (ph, pw), (h, wd) = p.conv.pads, p.in_spatial
    n, oh, ow = p.n, *p.out_spatial
    xg = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    xg = xg.reshape(n, g, p.c // g, *xg.shape[2:])
    wg = w.astype(np.float64).reshape(g, p.k // g, p.c // g, *p.filter_spatial)
    dy = y.astype(np.float64).reshape(n, g, p.k // g, oh, ow)
    if p.direction.value == "forward":
        out = np.zeros((n, g, p.k // g, oh, ow))
        for fy, fx, rows, cols in _taps(p):
            out += np.einsum("ngihw,gji->ngjhw", xg[:, :, :, rows, cols], wg[..., fy, fx])
        return out.reshape(n, p.k, oh, ow)
    if p.direction.value == "backward_data":
        dx = np.zeros_like(xg)
        for fy, fx, rows, cols in _taps(p):
            dx[:, :, :, rows, cols] += np.einsum("ngjhw,gji->ngihw", dy, wg[..., fy, fx])
        return dx.reshape(n, p.c, *dx.shape[3:])[:, :, ph : ph + h, pw : pw + wd]
    dw = np.zeros_like(wg)
    for fy, fx, rows, cols in _taps(p):
        dw[..., fy, fx] = np.einsum("ngihw,ngjhw->gji", xg[:, :, :, rows, cols], dy)
    return dw.reshape(p.k, p.c // g, *p.filter_spatial)


GEOMETRIES = {
    "3x3": ((7, 9), (3, 3), (1, 1), (1, 1), (1, 1)),
    "3x3s2": ((9, 8), (3, 3), (1, 1), (2, 2), (1, 1)),
    "odd": ((8, 10), (2, 3), (0, 2), (1, 2), (2, 1)),
    "1x5": ((6, 11), (1, 5), (0, 1), (2, 1), (1, 2)),
}


def _check(direction: str, layout: str, dtype: str, cg: int, kg: int, geo: str, seed: int) -> None:
    p = _problem(direction, layout, dtype, cg, kg, GEOMETRIES[geo])
    rng = np.random.default_rng(seed)
    shapes = {"x": (p.n, p.c, *p.in_spatial), "w": (p.k, cg, *p.filter_spatial)}
    shapes["y"] = (p.n, p.k, *p.out_spatial)
    data = {name: rng.uniform(0.5, 1.5, s) * rng.choice([-1, 1], s) for name, s in shapes.items()}
    out_name = p.direction.output_tensor
    inputs = {name: a.astype(np.float32) for name, a in data.items() if name != out_name}
    got = run_solver(GroupedDirectSolver(), p, inputs).astype(np.float64)
    # the reference sees the inputs as rounded to the problem's dtype
    import ml_dtypes

    kind = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    rounded = {k: v.astype(kind).astype(np.float64) for k, v in inputs.items()}
    rounded[out_name] = np.zeros(shapes[out_name])
    expected = _reference(p, rounded["x"], rounded["w"], rounded["y"])
    err = np.max(np.abs(got - expected)) / np.max(np.abs(expected))
    assert err <= TOL[dtype], f"{p.key}: relative error {err:.3g}"


@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("width", [4, 8])
@pytest.mark.parametrize("geo", sorted(GEOMETRIES))
def test_shift_path_float32(direction: str, layout: str, width: int, geo: str) -> None:
    p = _problem(direction, layout, "float32", width, width, GEOMETRIES[geo])
    assert shift_applies(p)
    _check(direction, layout, "float32", width, width, geo, seed=width)


@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_shift_path_width_three(direction: str, layout: str) -> None:
    """Widths 4 and 8 above now take the vector kernels (test_direct_grouped_simd.py); width 3
    keeps this path (the kernels test_compiles_for_follows_the_shift_kernels_cache loads)."""
    from miocore_direct.grouped_vector import vector_applies

    p = _problem(direction, layout, "float32", 3, 3, GEOMETRIES["3x3s2"])
    assert shift_applies(p) and not vector_applies(p)
    _check(direction, layout, "float32", 3, 3, "3x3s2", seed=5)


@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_shift_path_half_dtypes(direction: str, layout: str, dtype: str) -> None:
    _check(direction, layout, dtype, 4, 4, "3x3s2", seed=3)
    _check(direction, layout, dtype, 8, 8, "odd", seed=4)


@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize(("cg", "kg"), [(4, 8), (8, 4), (12, 12)])
def test_multipliers_and_wide_groups_keep_the_group_loop(
    direction: str, layout: str, cg: int, kg: int
) -> None:
    from miocore_direct.grouped_vector import vector_applies

    p = _problem(direction, layout, "float32", cg, kg, GEOMETRIES["3x3"])
    assert not shift_applies(p) and not vector_applies(p)
    _check(direction, layout, "float32", cg, kg, "3x3", seed=cg + kg)


@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_compiles_for_follows_the_shift_kernels_cache(
    direction: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compiles_for is True while the shifted path's generated kernel is neither loaded nor in
    numba's disk cache (an empty cache folder), False once its cache index is there, and
    False for the group-innermost path (compiled once per machine); after a run in this
    process the kernel it loaded is the one compiles_for names."""
    import sys

    from miocore_direct.grouped import _ShiftPlan

    from miocore.backends.cpu_generated import generated_folder as _folder
    from miocore.backends.cpu_generated import module_name as _module_name
    from miocore.testing import cpu_context

    ctx, solver = cpu_context(), GroupedDirectSolver()
    # width 3: widths 2, 4, 8 and 16 take the vector kernels (test_direct_grouped_simd.py)
    p = _problem(direction, "NHWC", "float32", 3, 3, GEOMETRIES["3x3s2"])
    (name,) = [_module_name(*spec) for spec in _ShiftPlan(p).generated()]
    _check(direction, "NHWC", "float32", 3, 3, "3x3s2", seed=1)  # loads it in this process
    assert name in sys.modules and not solver.compiles_for(ctx, p)
    monkeypatch.setenv("MIOCORE_KERNEL_CACHE_PATH", str(tmp_path / "kernels"))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.delitem(sys.modules, name)
    assert solver.compiles_for(ctx, p)
    cache = _folder() / "__pycache__"
    cache.mkdir(parents=True)
    (cache / f"{name}.kernel-9.py311.nbi").touch()
    assert not solver.compiles_for(ctx, p)
    wide = _problem(direction, "NHWC", "float32", 4, 8, GEOMETRIES["3x3"])
    assert not shift_applies(wide) and not solver.compiles_for(ctx, wide)
