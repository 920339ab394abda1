"""``direct.gpu_depthwise`` against the float64 reference (marked ``gpu``).

Corpus-derived depthwise problems (the stratified sample, shrunk to test size, those with
``is_depthwise``) run in both layouts (the corpus row's NCHW/NCDHW and the channels-last twin)
for every direction and dtype; explicit cases add stride 2, dilation 2, odd sizes, 5x5/7x7,
3-D, a channel multiplier and misaligned (scalar fallback) buffers; configs spread over the
tuning space; backward weights is bitwise deterministic. Outputs are poisoned with NaN first.
Tolerances: ``miocore.testing.TOLERANCES`` (fp32 2e-5, fp16 2e-3, bf16 1.6e-2 of the largest
reference magnitude).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from test_gpu_solvers import DTYPES, _handle, run_on_device

import miocore
from miocore import reference
from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.testing import TOLERANCES

torch = pytest.importorskip("torch")  # at collection: a lazy first import failed on the device

pytestmark = pytest.mark.gpu

SOLVER = "direct.gpu_depthwise"
_TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_CHANNELS_LAST = {"NCHW": "NHWC", "NCDHW": "NDHWC"}


@pytest.fixture
def handle() -> miocore.Handle:
    h = _handle()
    if h is None:
        pytest.skip("no GPU device")
    if SOLVER not in h.registry:
        pytest.skip(f"{SOLVER} is not installed")
    return h


@functools.cache
def _rows() -> list[dict]:
    if find_corpus() is None:
        return []
    return [r for r in sample_rows(200, seed=11) if shrink_row(r).is_depthwise]


def _corpus_problems(direction: str, dtype: str, channels_last: bool) -> list[miocore.ConvProblem]:
    out = []
    for row in _rows():
        if row["dir"] != direction:
            continue
        layout = _CHANNELS_LAST.get(row["layout"], row["layout"]) if channels_last else None
        over = {"dtype": dtype} | ({"layout": layout} if layout else {})
        out.append(shrink_row({**row, **over}))
    return out


def _precompile(h: miocore.Handle, problems: list[miocore.ConvProblem]) -> None:
    solver = h.registry.get(SOLVER).solver
    kernels = []
    for p in problems:
        kernels.extend(solver.get_solution(h.context, p.canonical).kernels)
    failures = h.backend.precompile(kernels)
    assert not failures, next(iter(failures.values()))


def _check_all(h: miocore.Handle, problems: list[miocore.ConvProblem], dtype: str) -> None:
    solver = h.registry.get(SOLVER).solver
    for p in problems:
        assert solver.is_applicable(h.context, p.canonical), p.key
    _precompile(h, problems)
    tol = TOLERANCES[miocore.DataType.parse(dtype)]
    failures = []
    for i, problem in enumerate(problems):
        err, written = run_on_device(h, SOLVER, problem, seed=i)
        if not written or not np.isfinite(err) or err > tol:
            failures.append(f"{problem.key} {problem.x.layout}: err {err:.3g}, written {written}")
    print(f"{SOLVER}: {len(problems)} problems checked")
    assert not failures, f"{len(failures)}/{len(problems)} failed:\n" + "\n".join(failures[:20])


@pytest.mark.parametrize("channels_last", (False, True), ids=("nchw", "nhwc"))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", ("F", "B", "W"))
def test_depthwise_matches_reference_on_corpus(
    handle: miocore.Handle, direction: str, dtype: str, channels_last: bool
) -> None:
    problems = _corpus_problems(direction, dtype, channels_last)
    if not problems:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    _check_all(handle, problems, dtype)
    assert len(problems) >= 10


# n, c, mult, spatial, filter, pads, strides, dilations
_CASES = (
    (2, 16, 1, (13, 17), (3, 3), (1, 1), (2, 2), (1, 1)),
    (1, 24, 1, (15, 11), (3, 3), (2, 2), (1, 1), (2, 2)),
    (2, 8, 1, (19, 23), (5, 5), (2, 2), (1, 1), (1, 1)),
    (1, 12, 1, (17, 9), (7, 7), (3, 3), (2, 2), (1, 1)),
    (2, 5, 1, (9, 10), (3, 5), (0, 2), (3, 1), (1, 2)),
    (1, 6, 3, (11, 12), (3, 3), (1, 1), (1, 1), (1, 1)),
    (2, 4, 2, (9, 9), (5, 3), (1, 0), (2, 2), (2, 1)),
    (1, 8, 1, (6, 7, 9), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    (1, 8, 1, (7, 6, 8), (3, 3, 3), (1, 1, 1), (2, 2, 2), (1, 1, 1)),
)


def _case(direction: str, case: int, dtype: str, layout: str) -> miocore.ConvProblem:
    n, c, mult, spatial, f, pads, strides, dils = _CASES[case]
    if len(spatial) == 3:
        layout = {"NCHW": "NCDHW", "NHWC": "NDHWC"}[layout]
    return miocore.ConvProblem.from_sizes(
        direction,
        n=n,
        c=c,
        k=c * mult,
        in_spatial=spatial,
        filter_spatial=f,
        pads=pads,
        strides=strides,
        dilations=dils,
        groups=c,
        dtype=dtype,
        layout=layout,
    )


@pytest.mark.parametrize("layout", ("NCHW", "NHWC"))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", ("forward", "backward_data", "backward_weights"))
def test_depthwise_explicit_cases(
    handle: miocore.Handle, direction: str, dtype: str, layout: str
) -> None:
    problems = [_case(direction, i, dtype, layout) for i in range(len(_CASES))]
    _check_all(handle, problems, dtype)


def _run(h: miocore.Handle, problem: miocore.ConvProblem, cfg, inputs, offset: int = 0):
    """Run one config on NaN-poisoned output; ``offset`` shifts every buffer by that many
    elements (misaligned vectors take the scalar twin)."""
    solver = h.registry.get(SOLVER).solver
    canon = problem.canonical
    sol = solver.get_solution(h.context, canon, cfg)
    compiled = h.backend.compile(sol.kernels)
    out_name = problem.direction.output_tensor
    dev, owners = {}, {}
    for name, values in inputs.items():
        desc = getattr(problem, name)
        fill = np.full(desc.lengths, np.nan, np.float32) if name == out_name else values
        if offset:  # a torch view one element past an aligned allocation
            tdtype = _TORCH[str(desc.dtype)]
            buf = torch.empty(desc.element_space + offset, dtype=tdtype, device="cuda")
            view = buf[offset:].as_strided(desc.lengths, desc.strides)
            view.copy_(torch.from_numpy(np.asarray(fill, np.float32)).to(tdtype))
            owners[name] = view
            dev[name] = h.backend.check_array(desc, view, name)
        else:
            dev[name] = h.backend.from_host(desc, fill)
    ws = h.backend.allocate_workspace(sol.workspace_size)
    sol.invoker_factory(compiled)(
        h, miocore.InvokeParams(problem=canon, x=dev["x"], w=dev["w"], y=dev["y"], workspace=ws)
    )
    torch.cuda.synchronize()
    if offset:
        return owners[out_name].float().cpu().numpy()
    return h.backend.to_host(dev[out_name])


def _bad_configs(
    h: miocore.Handle,
    problem: miocore.ConvProblem,
    configs: list,
    seed: int,
    tol: float,
    offsets: tuple[int, ...] = (0,),
) -> list[str]:
    """Every config of ``configs`` compiled at once, then run on the same random inputs (at
    each buffer ``offsets``, see ``_run``) against the float64 reference: the ones beyond
    ``tol`` (or not finite), described."""
    solver = h.registry.get(SOLVER).solver
    canon = problem.canonical
    kernels = [k for cfg in configs for k in solver.get_solution(h.context, canon, cfg).kernels]
    assert not h.backend.precompile(kernels)
    inputs = reference.random_inputs(problem, seed)
    out_name = problem.direction.output_tensor
    expected = reference.convolution(
        problem, **{name: v for name, v in inputs.items() if name != out_name}
    )
    bad = []
    for cfg in configs:
        for offset in offsets:
            err = reference.relative_error(_run(h, problem, cfg, inputs, offset), expected)
            if not np.isfinite(err) or err > tol:
                bad.append(f"{problem.key} {dict(cfg)} offset {offset}: {err:.3g}")
    return bad


@pytest.mark.parametrize("layout", ("NCHW", "NHWC"))
@pytest.mark.parametrize("direction", ("forward", "backward_data", "backward_weights"))
def test_depthwise_configs(handle: miocore.Handle, direction: str, layout: str) -> None:
    solver = handle.registry.get(SOLVER).solver
    for case in (0, 2, 3, 5):  # 3: 7x7, its filter staged in shared memory (dw_nhwc)
        problem = _case(direction, case, "float16", layout)
        canon = problem.canonical
        space = solver.perf_config_space(handle.context, canon)
        assert space
        configs = space[:: max(1, len(space) // 6)]
        bad = _bad_configs(handle, problem, configs, 3, TOLERANCES[miocore.DataType.FLOAT16])
        assert not bad, f"case {case}:\n" + "\n".join(bad)


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_weights_tiles_every_config(handle: miocore.Handle, dtype: str) -> None:
    # dw_wrw_tile (2-D, channels innermost, no multiplier): every tile config of the space on
    # stride 2, dilation 2, 5x5 and 7x7 cases, odd sizes and channel counts that fill no block
    # (C = 16, 24, 12, 5), plus a 48-channel layer over several splits; on sm_90 the space
    # holds each tile again staged by the tensor memory accelerator (tma), and split for more
    # blocks (bs).
    solver = handle.registry.get(SOLVER).solver
    problems = [_case("backward_weights", case, dtype, "NHWC") for case in (0, 1, 2, 3, 4)]
    problems.append(
        miocore.ConvProblem.from_sizes(
            "backward_weights",
            n=8,
            c=48,
            k=48,
            in_spatial=(30, 30),
            filter_spatial=(7, 7),
            pads=(3, 3),
            groups=48,
            dtype=dtype,
            layout="NHWC",
        )
    )
    tol = TOLERANCES[miocore.DataType.parse(dtype)]
    bad, tried = [], 0
    for problem in problems:
        canon = problem.canonical
        tiles = [c for c in solver.perf_config_space(handle.context, canon) if "cb" in c]
        assert tiles, problem.key  # the tile kernel applies to every one of these
        # a split for more blocks (bs) launches the same kernels: the first of them stands
        # for all (their larger splits and workspace)
        configs = [c for c in tiles if "bs" not in c] + [c for c in tiles if "bs" in c][:1]
        tried += len(configs)
        bad += _bad_configs(handle, problem, configs, 4, tol)
    print(f"{SOLVER}: {tried} tile configs checked")
    assert not bad, f"{len(bad)}/{tried} failed:\n" + "\n".join(bad[:20])


@pytest.mark.parametrize("dtype", DTYPES)
def test_nchw_several_planes_per_block_every_config(handle: miocore.Handle, dtype: str) -> None:
    # dw_nchw with MIO_PP planes per block: every such config of the space, forward and
    # backward data (stride 1: the flipped filter; stride 2: the gather), a channel multiplier
    # (backward data reads several dy planes per dx plane), channel counts that leave the last
    # block short (5, 7, 23 written channels), dilation, 3-D, 5x5 and 7x7 filters.
    solver = handle.registry.get(SOLVER).solver
    cases = [  # direction, c, mult, spatial, filter, pads, strides, dilations
        ("forward", 23, 1, (14, 14), (3, 3), (1, 1), (1, 1), (1, 1)),
        ("forward", 7, 1, (7, 7), (5, 5), (2, 2), (1, 1), (1, 1)),
        ("forward", 5, 2, (9, 11), (3, 3), (2, 1), (2, 1), (2, 1)),
        ("forward", 6, 1, (4, 6, 5), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
        ("backward_data", 23, 1, (14, 14), (3, 3), (1, 1), (1, 1), (1, 1)),
        ("backward_data", 7, 1, (13, 13), (3, 3), (1, 1), (2, 2), (1, 1)),
        ("backward_data", 5, 3, (8, 9), (3, 3), (1, 1), (1, 1), (1, 1)),
        ("backward_data", 9, 1, (12, 12), (7, 7), (3, 3), (1, 1), (1, 1)),
    ]
    tol = TOLERANCES[miocore.DataType.parse(dtype)]
    bad, tried = [], 0
    for direction, c, mult, spatial, f, pads, strides, dils in cases:
        layout = "NCHW" if len(spatial) == 2 else "NCDHW"
        problem = miocore.ConvProblem.from_sizes(
            direction, n=2, c=c, k=c * mult, in_spatial=spatial, filter_spatial=f, pads=pads,
            strides=strides, dilations=dils, groups=c, dtype=dtype, layout=layout,
        )  # fmt: skip
        canon = problem.canonical
        configs = [g for g in solver.perf_config_space(handle.context, canon) if "pp" in g]
        assert configs, problem.key  # every written plane here fits one tile
        tried += len(configs)
        bad += _bad_configs(handle, problem, configs, 5, tol)
    print(f"{SOLVER}: {tried} several-plane configs checked")
    assert not bad, f"{len(bad)}/{tried} failed:\n" + "\n".join(bad[:20])


@pytest.mark.parametrize("layout", ("NCHW", "NHWC"))
def test_backward_weights_is_deterministic(handle: miocore.Handle, layout: str) -> None:
    problem = miocore.ConvProblem.from_sizes(
        "backward_weights",
        n=64,  # enough dy strips for several splits in both layouts
        c=32,
        k=32,
        in_spatial=(56, 56),
        filter_spatial=(3, 3),
        pads=(1, 1),
        groups=32,
        layout=layout,
    )
    solver = handle.registry.get(SOLVER).solver
    cfg = solver.default_perf_config(handle.context, problem.canonical)
    assert solver.workspace_size(handle.context, problem.canonical, cfg) > 0  # split path
    inputs = reference.random_inputs(problem, 5)
    first = _run(handle, problem, cfg, inputs)
    second = _run(handle, problem, cfg, inputs)
    assert np.array_equal(first.view(np.uint32), second.view(np.uint32))
    expected = reference.convolution(problem, x=inputs["x"], y=inputs["y"])
    assert reference.relative_error(first, expected) < 2e-5


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", ("forward", "backward_data", "backward_weights"))
def test_misaligned_buffers_take_the_scalar_kernel(
    handle: miocore.Handle, direction: str, dtype: str
) -> None:
    problem = _case(direction, 2, dtype, "NHWC")  # C = 8: vectors of 4 (fp32) or 8 (fp16)
    solver = handle.registry.get(SOLVER).solver
    cfg = solver.default_perf_config(handle.context, problem.canonical)
    assert cfg["vec"] > 1
    inputs = reference.random_inputs(problem, 9)
    out_name = problem.direction.output_tensor
    expected = reference.convolution(
        problem, **{name: v for name, v in inputs.items() if name != out_name}
    )
    got = _run(handle, problem, cfg, inputs, offset=1)
    err = reference.relative_error(got, expected)
    assert np.isfinite(got).all() and err <= TOLERANCES[miocore.DataType.parse(dtype)], err


@pytest.mark.parametrize("dtype", DTYPES)
def test_nchw_rows_from_registers_every_config(handle: miocore.Handle, dtype: str) -> None:
    # dw_nchw_rows: every (ox, oy) config, forward and stride-1 backward data (the flipped
    # filter), widths that are whole 8-byte chunks (16, 24, 32, 40: the chunked loads and
    # stores) and widths that are not (14, 23: element by element), rows and runs the last
    # thread leaves short, asymmetric padding, stride 2, dilation, a channel multiplier (backward
    # data reads several dy planes per dx plane), 5x5 and 7x7 filters; each also on buffers one
    # element past an aligned allocation (the element-by-element path on any width).
    solver = handle.registry.get(SOLVER).solver
    cases = [  # direction, c, mult, spatial, filter, pads, strides, dilations
        ("forward", 6, 1, (14, 14), (3, 3), (1, 1), (1, 1), (1, 1)),
        ("forward", 6, 1, (9, 16), (3, 3), (1, 1), (1, 1), (1, 1)),
        ("forward", 6, 1, (12, 24), (3, 3), (1, 1), (2, 2), (1, 1)),
        ("forward", 5, 2, (8, 32), (5, 5), (2, 1), (1, 1), (1, 1)),
        ("forward", 3, 1, (10, 40), (7, 7), (3, 3), (2, 2), (1, 1)),
        ("forward", 4, 1, (11, 23), (3, 3), (2, 2), (1, 1), (2, 2)),
        ("backward_data", 6, 1, (13, 16), (3, 3), (1, 1), (1, 1), (1, 1)),
        ("backward_data", 5, 3, (8, 24), (3, 3), (1, 1), (1, 1), (1, 1)),
        ("backward_data", 4, 1, (12, 14), (7, 7), (3, 3), (1, 1), (1, 1)),
    ]
    tol = TOLERANCES[miocore.DataType.parse(dtype)]
    bad, tried = [], 0
    for direction, c, mult, spatial, f, pads, strides, dils in cases:
        problem = miocore.ConvProblem.from_sizes(
            direction, n=2, c=c, k=c * mult, in_spatial=spatial, filter_spatial=f, pads=pads,
            strides=strides, dilations=dils, groups=c, dtype=dtype, layout="NCHW",
        )  # fmt: skip
        space = solver.perf_config_space(handle.context, problem.canonical)
        configs = [g for g in space if "ox" in g]
        assert len(configs) == 6, problem.key
        tried += len(configs)
        bad += _bad_configs(handle, problem, configs, 7, tol, offsets=(0, 1))
    print(f"{SOLVER}: {tried} register-row configs checked")
    assert not bad, f"{len(bad)}/{tried} failed:\n" + "\n".join(bad[:20])


STAGED_TILE_CASES = [  # direction, c, spatial, filter, pads, strides, dilations
    ("forward", 24, (15, 13), (3, 3), (1, 1), (1, 1), (1, 1)),
    ("forward", 40, (17, 19), (3, 3), (1, 0), (2, 2), (1, 1)),
    ("forward", 16, (12, 20), (3, 3), (0, 2), (1, 1), (1, 1)),
    ("forward", 32, (14, 14), (1, 3), (0, 1), (1, 2), (1, 1)),
    ("forward", 24, (16, 18), (3, 3), (2, 2), (1, 1), (2, 2)),
    ("backward_data", 24, (15, 13), (3, 3), (1, 1), (1, 1), (1, 1)),
    ("backward_data", 40, (11, 9), (3, 3), (1, 2), (1, 1), (1, 1)),
    ("backward_data", 24, (15, 13), (3, 3), (1, 1), (2, 2), (1, 1)),  # the gather
    ("backward_data", 40, (17, 18), (3, 3), (1, 0), (2, 2), (2, 1)),  # gather, dilation
    ("forward", 96, (13, 11), (3, 3), (1, 1), (1, 1), (1, 1)),  # blocks of 48: 252 threads
    ("backward_data", 96, (13, 11), (3, 3), (1, 1), (1, 1), (1, 1)),
    ("forward", 40, (15, 13), (5, 5), (2, 2), (1, 1), (1, 1)),  # 5x5: 2 channels a thread
    ("forward", 24, (17, 19), (5, 5), (2, 1), (2, 2), (1, 1)),
    ("backward_data", 40, (17, 16), (5, 5), (2, 2), (2, 2), (1, 1)),  # 5x5 gather
    ("forward", 24, (15, 13), (7, 7), (3, 3), (1, 1), (1, 1)),  # 7x7: 1 channel a thread
    ("backward_data", 40, (17, 16), (7, 7), (3, 2), (2, 2), (1, 1)),  # 7x7 gather
]


def _staged_tile_problems(dtype: str) -> list[miocore.ConvProblem]:
    """The problems of :data:`STAGED_TILE_CASES`: 3 images, NHWC, ``dtype``."""
    out = []
    for direction, c, spatial, f, pads, strides, dils in STAGED_TILE_CASES:
        out.append(miocore.ConvProblem.from_sizes(
            direction, n=3, c=c, k=c, in_spatial=spatial, filter_spatial=f, pads=pads,
            strides=strides, dilations=dils, groups=c, dtype=dtype, layout="NHWC",
        ))  # fmt: skip
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_nhwc_staged_tiles_every_config(handle: miocore.Handle, dtype: str) -> None:
    # dw_nhwc_tile (2-D, channels innermost, plain depthwise, forward and backward data, the
    # gather too, up to 49 taps: 5x5 at 2 channels a thread, 7x7 at 1): every fourth tile
    # config (each tile shape, block width and cap), on stride 2 and dilation 2, a 1x3
    # filter with stride (1, 2), asymmetric padding, planes no tile divides (partial tiles on
    # both edges), channel counts that leave the last channel block short (24 of 32 or 64,
    # 40), a layer of 16 and one of 96 in blocks of 48 (12 x 21 threads), 5x5 and 7x7
    # filters at strides 1 and 2; each also on buffers one element past an aligned allocation
    # (the scalar twin); and the first and last of them in runs of several tiles a block;
    # strips of 2 rows (py) among them.
    from miocore_direct.gpu_depthwise_nhwc_tile import NHWC_TILE_RUNS, nhwc_tile_configs

    solver = handle.registry.get(SOLVER).solver
    tol = TOLERANCES[miocore.DataType.parse(dtype)]
    bad, tried = [], 0
    for problem in _staged_tile_problems(dtype):
        singles = [c for c in nhwc_tile_configs(problem.canonical) if "nt" not in c]
        assert singles, problem.key  # the staged kernel applies to every one of these
        configs = singles[::4]  # every tile shape, block width and cap among them
        configs += [c for c in singles if c["ch"] == 48 and c not in configs][:2]
        # runs of 2, 4 and 8 tiles a block, double-buffered (the last run partly past the
        # last tile: 3 images' tiles are no multiple of 8)
        for cfg in (singles[0], singles[-1]):
            for nt in NHWC_TILE_RUNS:
                run = miocore.PerfConfig(**cfg, nt=nt)
                if solver.is_valid_perf_config(handle.context, problem.canonical, run):
                    configs.append(run)
        for cfg in configs:
            kernels = solver.get_solution(handle.context, problem.canonical, cfg).kernels
            assert kernels[0].kernel_name == "dw_nhwc_tile"
        tried += len(configs)
        bad += _bad_configs(handle, problem, configs, 6, tol, offsets=(0, 1))
    print(f"{SOLVER}: {tried} staged-tile configs checked")
    assert not bad, f"{len(bad)}/{tried} failed:\n" + "\n".join(bad[:20])


@pytest.mark.parametrize("dtype", DTYPES)
def test_nhwc_staged_tiles_through_tma(handle: miocore.Handle, dtype: str) -> None:
    # dw_nhwc_tile with its tiles staged by the tensor memory accelerator (sm_90): the staged
    # tile cases' every sixth single tile and the first run of 2, 4 and 8 tiles (two
    # buffers, two mbarriers and their phases), each at an aligned allocation and one element
    # past it (the scalar twin, no tensor map)
    from miocore_direct.gpu_depthwise_nhwc_tile import nhwc_tile_tma_configs, tma_available

    if not tma_available(handle.context):
        pytest.skip(f"{handle.context.device.arch}: no tensor memory accelerator")
    solver = handle.registry.get(SOLVER).solver
    tol = TOLERANCES[miocore.DataType.parse(dtype)]
    bad, tried = [], 0
    for problem in _staged_tile_problems(dtype):
        twins = nhwc_tile_tma_configs(problem.canonical)
        space = solver.perf_config_space(handle.context, problem.canonical)
        assert twins and all(t in space for t in twins), problem.key
        singles = [t for t in twins if "nt" not in t]
        first_runs = {t["nt"]: t for t in reversed(twins) if "nt" in t}  # the first of each nt
        configs = singles[::6] + list(first_runs.values())
        for cfg in configs:
            kernel = solver.get_solution(handle.context, problem.canonical, cfg).kernels[0]
            assert kernel.kernel_name == "dw_nhwc_tile" and "-DMIO_TMA=1" in kernel.options
        tried += len(configs)
        bad += _bad_configs(handle, problem, configs, 7, tol, offsets=(0, 1))
    print(f"{SOLVER}: {tried} TMA-staged tile configs checked")
    assert not bad, f"{len(bad)}/{tried} failed:\n" + "\n".join(bad[:20])
