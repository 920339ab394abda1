"""CPU checks of ``fft.gpu_rfft`` (no GPU, no CuPy needed): FFT lengths, the reduction struct
against the kernel source, applicability reasons, workspace layout, the cost model's ranking,
and a numpy emulation of the exact GPU pipeline (the plan's pack layout, reduction strides and
conjugations, inverse-transform read offsets) against the float64 reference on
corpus-derived problems in every direction.

Tolerance of the emulation: 1e-9 relative (it runs in float64 numpy FFTs, so any geometry or
sign mistake shows as an error of order 1 while rounding stays near 1e-14).
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

import miocore
from miocore import reference
from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.testing import cpu_context

gpu = pytest.importorskip("miocore_fft.gpu")
gpu_bindings = pytest.importorskip("miocore_fft.gpu_bindings")

SOLVER = gpu.GpuRfftSolver()
EMULATION_TOL = 1e-9


def _ctx(backend: str = "cuda") -> miocore.ExecutionContext:
    device = dataclasses.replace(cpu_context().device, backend=backend, compute_units=132)
    return miocore.ExecutionContext(device=device)


def _problem(direction: str = "forward", **kw) -> miocore.ConvProblem:
    args = dict(
        n=2,
        c=3,
        k=5,
        in_spatial=(9, 11),
        filter_spatial=(3, 3),
        pads=(1, 1),
        dtype="float32",
        layout="NCHW",
    )
    args.update(kw)
    return miocore.ConvProblem.from_sizes(direction, **args)


def _smooth_brute(n: int) -> int:
    m = n
    while True:
        r = m
        for q in (2, 3, 5, 7):
            while r % q == 0:
                r //= q
        if r == 1:
            return m
        m += 1


def test_smooth_length_is_the_next_7_smooth_number() -> None:
    for n in range(1, 600):
        assert gpu.smooth_length(n) == _smooth_brute(n), n
    assert gpu.smooth_length(226) == 240  # VGG-16 conv1: 224 + 2 pads
    with pytest.raises(ValueError):
        gpu.smooth_length(0)


def test_mac_struct_matches_the_kernel() -> None:
    source = (gpu.KERNEL_DIR / "fft_conv.cu").read_text()
    body = re.search(r"struct MioFftMac \{(.*?)\};", source, re.S).group(1)
    fields = []
    for line in body.splitlines():
        decl = line.split("//")[0].strip()
        if decl:
            assert decl.startswith("mio_index ") and decl.endswith(";"), decl
            fields += [f.strip() for f in decl[len("mio_index ") : -1].split(",")]
    assert tuple(fields) == tuple(f.name for f in dataclasses.fields(gpu.MacGeometry))
    geom = re.search(r"struct MioFftGeom \{(.*?)\};", source, re.S).group(1)
    assert "mio_index len[3];" in geom and "mio_index off[3];" in geom
    plan = gpu.FftGpuPlan(_problem().canonical)
    assert len(plan.mac.to_bytes()) == 12 * 8 and len(plan.geom_bytes()) == 6 * 8


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        (dict(strides=(2, 2)), "stride 1"),
        (dict(dilations=(2, 1)), "dilations"),
        (dict(groups=3, c=3, k=6), "groups 3"),
    ],
)
def test_declines_with_a_reason(kw: dict, reason: str) -> None:
    result = SOLVER.is_applicable(_ctx(), _problem(**kw).canonical)
    assert not result and reason in result.reason


def test_declines_cpu_and_huge_problems() -> None:
    assert not SOLVER.is_applicable(cpu_context(), _problem().canonical)
    huge = _problem(n=64, c=512, k=512, in_spatial=(224, 224))
    result = SOLVER.is_applicable(_ctx(), huge.canonical)
    assert not result and "exceed" in result.reason
    for backend in ("cuda", "hip"):
        assert SOLVER.is_applicable(_ctx(backend), _problem().canonical)


@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_workspace_is_the_aligned_regions(direction: str) -> None:
    p = _problem(direction, n=3, c=4, k=6, in_spatial=(10, 13), pads=(2, 1)).canonical
    plan = gpu.FftGpuPlan(p)
    assert plan.lengths == (14, 15)  # 10 + 4 -> 14, 13 + 2 -> 15
    bins = 14 * 8
    assert plan.bins == bins
    ba, bb, bo = plan.batches
    assert ({ba, bb, bo} <= {3 * 4, 6 * 4, 3 * 6} and bb == 6 * 4) or direction.endswith("ts")
    expected = 0
    for size in (4 * max(ba, bb, bo) * 14 * 15, 8 * ba * bins, 8 * bb * bins, 8 * bo * bins):
        expected += -(-size // 256) * 256
    assert SOLVER.workspace_size(_ctx(), p) == plan.workspace_bytes == expected
    offsets = [off for off, _ in plan.regions.values()]
    assert all(off % 256 == 0 for off in offsets) and offsets == sorted(offsets)


def test_reduction_tiles_stay_within_32_accumulators() -> None:
    for n, k in ((1, 1), (2, 64), (16, 64), (64, 64), (3, 5)):
        plan = gpu.FftGpuPlan(_problem(n=n, k=k).canonical)
        ti, tj = plan.tiles
        assert ti * tj <= 32 and ti <= max(1, plan.mac.ni) * 2 and tj <= max(1, plan.mac.nj) * 2
        sol = SOLVER.get_solution(_ctx(), _problem(n=n, k=k).canonical)
        opts = sol.kernels[1].options
        assert f"-DMIO_FFT_TI={ti}" in opts and f"-DMIO_FFT_TJ={tj}" in opts


def test_wti_ranks_large_filters_above_pointwise() -> None:
    ctx = _ctx()
    base = dict(n=16, c=64, k=64, in_spatial=(56, 56))
    one = SOLVER.wti(ctx, _problem(filter_spatial=(1, 1), pads=(0, 0), **base).canonical)
    three = SOLVER.wti(ctx, _problem(filter_spatial=(3, 3), pads=(1, 1), **base).canonical)
    seven = SOLVER.wti(ctx, _problem(filter_spatial=(7, 7), pads=(3, 3), **base).canonical)
    assert 0 < one < three < seven <= 1.0
    assert one < 0.2  # well below gemm.gpu_im2col's 0.5 for pointwise: never picked for 1x1


def test_expected_error_grows_with_the_reduction() -> None:
    ctx = _ctx()
    small = SOLVER.expected_error(ctx, _problem(c=4).canonical)
    large = SOLVER.expected_error(ctx, _problem(c=4096).canonical)
    assert 2e-5 <= small <= large < 1e-3
    assert SOLVER.expected_error(ctx, _problem(dtype="float16").canonical) is None


def test_binding_hint_without_cupy() -> None:
    pytest.importorskip("numpy")
    import importlib.util

    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here")
    assert "miocore-fft[cuda]" in gpu_bindings.binding_missing("cuda")


# -- numpy emulation of the GPU pipeline ---------------------------------------------------


def _emulate(problem: miocore.ConvProblem, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """What the invoker computes, step by step, with numpy's float64 FFTs."""
    p = problem.canonical
    plan = gpu.FftGpuPlan(p)
    nd, lengths = plan.nd, plan.lengths
    axes = tuple(range(1, nd + 1))

    def spectra(name: str) -> np.ndarray:  # fft_pack + R2C, flattened (rows * bins)
        t = np.asarray(arrays[name], np.float64)
        rows = t.reshape(t.shape[0] * t.shape[1], *t.shape[2:])
        buf = np.zeros((rows.shape[0], *lengths))
        buf[(slice(None), *(slice(0, s) for s in rows.shape[1:]))] = rows
        return np.fft.rfftn(buf, axes=axes).ravel()

    a_name, b_name, o_name = plan.roles
    a, b = spectra(a_name), spectra(b_name)
    m = plan.mac
    i = np.arange(m.ni)[:, None, None, None]
    j = np.arange(m.nj)[None, :, None, None]
    r = np.arange(m.nr)[None, None, :, None]
    f = np.arange(m.bins)[None, None, None, :]
    av = a[i * m.a_i + r * m.a_r + f]
    bv = b[j * m.b_j + r * m.b_r + f]
    av = np.conj(av) if m.conj_a else av
    bv = np.conj(bv) if m.conj_b else bv
    out = np.zeros(m.ni * m.nj * m.bins, complex)
    idx = (
        np.arange(m.ni)[:, None, None] * m.o_i
        + np.arange(m.nj)[None, :, None] * m.o_j
        + np.arange(m.bins)[None, None, :]
    )
    out[idx] = (av * bv).sum(axis=2)
    half = (*lengths[:-1], lengths[-1] // 2 + 1)
    real = np.fft.irfftn(out.reshape(-1, *half), s=lengths, axes=axes)  # 1/prod(L) included
    desc = getattr(p, o_name)
    target = desc.lengths
    pick = np.ix_(
        *(
            ((np.arange(s) + off) % length)
            for s, off, length in zip(target[2:], plan.offsets, lengths, strict=True)
        )
    )
    return real[(slice(None), *pick)].reshape(target)


def _check_emulation(problem: miocore.ConvProblem, seed: int) -> float:
    inputs = reference.random_inputs(problem, seed)
    arrays = {k: np.asarray(v, np.float64) for k, v in inputs.items() if v is not None}
    expected = reference.convolution(problem, **inputs)
    got = _emulate(problem, arrays)
    return reference.relative_error(got, expected)


@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(in_spatial=(7, 12), filter_spatial=(5, 3), pads=(2, 0)),
        dict(in_spatial=(6, 6), filter_spatial=(7, 7), pads=(3, 3), n=1, c=2, k=1),
        dict(filter_spatial=(1, 1), pads=(0, 0)),
        dict(in_spatial=(5, 6, 4), filter_spatial=(3, 2, 3), pads=(1, 0, 2), layout="NCDHW"),
        dict(in_spatial=(8, 8), filter_spatial=(8, 8), pads=(0, 0)),
    ],
    ids=["3x3", "rect", "pad_gt_image", "1x1", "3d", "full"],
)
def test_emulated_pipeline_matches_reference(direction: str, kw: dict) -> None:
    p = _problem(direction, **kw)
    assert SOLVER.is_applicable(_ctx(), p.canonical)
    assert _check_emulation(p, seed=3) < EMULATION_TOL


def test_emulated_pipeline_on_corpus() -> None:
    if find_corpus() is None:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    ctx = _ctx()
    checked = {"F": 0, "B": 0, "W": 0}
    for i, row in enumerate(sample_rows(120, seed=5)):
        p = shrink_row(row, max_spatial=12)
        if p.is_transposed or not SOLVER.is_applicable(ctx, p.canonical):
            continue
        err = _check_emulation(p, seed=i)
        assert err < EMULATION_TOL, f"{p.key}: {err}"
        checked[row["dir"]] += 1
    assert min(checked.values()) >= 10, checked
    assert math.isfinite(sum(checked.values()))
