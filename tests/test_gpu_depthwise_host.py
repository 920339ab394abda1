"""``direct.gpu_depthwise``'s kernels built for the host and run on the CPU.

``tests/host_kernels/miocore_gpu.h`` stands in for the portability header. ``run_dw_block.cpp``
runs a launch of one forward or backward-data kernel (``dw_nchw_rows``, ``dw_nchw``,
``dw_nhwc_tile``, ``dw_nhwc``), ``run_dw_wrw.cpp`` backward weights as the invoker runs it
(``dw_wrw_tile`` or ``dw_wrw`` into split partials, then ``dw_wrw_reduce``), on the options,
geometry and packed parameters the solver gives: each block's threads as std::threads that
meet at a host barrier, the blocks one after another. The result, on random inputs and an
output (and partials) poisoned with NaN, is checked against the float64 reference with each
dtype's tolerance, so the kernels' indexing (runs, rows, tiles, halos, padding, stride,
dilation, channel multiplier, planes per block, short channel blocks, the staged tiles' runs
through both buffers, taps in registers or shared memory, splits and their reduce, the
chunked loads' alignment and the scalar twins) is tested without a GPU. The tiles staged by the
tensor memory accelerator run too: ``miocore_tma.h`` beside the runner copies a box as the
solver's tensor map describes it and counts the mbarriers' phases. Skipped where no C++
compiler with ``_Float16`` is found.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from gpu_depthwise_fixtures import cuda_context

import miocore
from miocore import reference

dw = pytest.importorskip("miocore_direct.gpu_depthwise")
geo = pytest.importorskip("miocore_direct.gpu_depthwise_geometry")
configs = pytest.importorskip("miocore_direct.gpu_depthwise_configs")
tile_module = pytest.importorskip("miocore_direct.gpu_depthwise_nhwc_tile")
nhwc_tile_tma_box = tile_module.nhwc_tile_tma_box

HOST = Path(__file__).parent / "host_kernels"
CXX = shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory):
    """Builds the runner for a kernel's options (once per distinct options)."""
    if CXX is None:
        pytest.skip("no C++ compiler")
    out = tmp_path_factory.mktemp("host_kernels")
    probe = out / "probe.cpp"
    probe.write_text("int main() { _Float16 h = (_Float16)1.5f; return (float)h == 1.5f ? 0 : 1; }")
    if subprocess.run([CXX, str(probe), "-o", str(out / "probe")], capture_output=True).returncode:
        pytest.skip(f"{CXX} has no _Float16")
    built: dict[tuple[str, ...], Path] = {}

    def make(options: tuple[str, ...], runner: str = "run_dw_block.cpp") -> Path:
        key = (runner, *options)
        if key not in built:
            exe = out / hashlib.sha1(" ".join(key).encode()).hexdigest()[:16]
            cmd = [CXX, "-O1", "-std=c++17", "-w", "-pthread", f"-I{HOST}", f"-I{geo.KERNEL_DIR}"]
            done = subprocess.run(
                [*cmd, *options, "-o", str(exe), str(HOST / runner)],
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            built[key] = exe
        return built[key]

    return make


_ctx = cuda_context


def _problem(case: tuple, dtype: str, layout: str, n: int = 2) -> miocore.ConvProblem:
    direction, c, mult, spatial, f, pads, strides, dils = case
    return miocore.ConvProblem.from_sizes(
        direction, n=n, c=c, k=c * mult, in_spatial=spatial, filter_spatial=f, pads=pads,
        strides=strides, dilations=dils, groups=c, dtype=dtype, layout=layout,
    )  # fmt: skip


def _space(problem: miocore.ConvProblem) -> list[miocore.PerfConfig]:
    return dw.GpuDepthwiseSolver().perf_config_space(_ctx(), problem.canonical)


def _check(make, tmp: Path, plans, seed: int, fewer_blocks: int = 1) -> int:
    """Runs every (problem, configs, shifts) of ``plans`` on the host against the float64
    reference on random inputs; the number of runs checked."""
    _prebuild(make, plans)
    rng = np.random.default_rng(seed)
    checked = 0
    for problem, picks, shifts in plans:
        canon = problem.canonical
        tol = reference.tolerance(canon.dtype)
        inputs = reference.random_inputs(canon, rng)
        out_name = canon.direction.output_tensor
        expected = reference.convolution(
            canon, **{k: v for k, v in inputs.items() if k != out_name}
        )
        for cfg in picks:
            for shift in shifts:
                got = _run_block(make, tmp, problem, cfg, inputs, shift, fewer_blocks)
                err = reference.relative_error(got, expected)
                assert np.isfinite(err) and err <= tol, (problem.key, dict(cfg), shift, err)
                checked += 1
    return checked


CASES = [  # direction, c, mult, spatial, filter, pads, strides, dilations
    ("forward", 3, 1, (9, 16), (3, 3), (1, 1), (1, 1), (1, 1)),  # whole chunks (16-bit, fp32)
    ("forward", 3, 1, (7, 14), (3, 3), (1, 1), (1, 1), (1, 1)),  # 16-bit: 4-byte chunks
    ("forward", 2, 1, (5, 10), (5, 5), (2, 1), (1, 1), (1, 1)),  # 4-byte, odd padding
    ("forward", 2, 1, (5, 7), (3, 3), (1, 1), (1, 1), (1, 1)),  # no whole chunks at all
    ("forward", 2, 2, (8, 24), (5, 5), (2, 3), (2, 2), (1, 1)),  # multiplier, odd padding
    ("forward", 2, 1, (11, 20), (3, 3), (2, 2), (1, 1), (2, 2)),  # dilation
    ("backward_data", 2, 3, (8, 12), (3, 3), (1, 1), (1, 1), (1, 1)),  # several dy planes
    ("backward_data", 2, 1, (12, 16), (7, 7), (3, 3), (1, 1), (1, 1)),  # 7x7 flipped
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_rows_kernel_on_the_host_matches_reference(build, tmp_path: Path, dtype: str) -> None:
    # dw_nchw_rows: the widest and narrowest runs, one and four rows, on aligned and shifted
    # buffers, in a grid of a third of the solver's blocks (its grid-stride loop)
    plans = []
    for case in CASES:
        problem = _problem(case, dtype, "NCHW")
        space = [g for g in _space(problem) if "ox" in g]
        plans.append((problem, [space[0], space[-1]], (0, 1)))
    assert _check(build, tmp_path, plans, seed=11, fewer_blocks=3) == 4 * len(CASES)


@pytest.mark.parametrize(
    ("dtype", "width", "chunk"),
    [("float16", 16, 4), ("float16", 14, 2), ("bfloat16", 10, 2), ("float16", 7, 4),
     ("float32", 14, 2), ("float32", 7, 2)],
)  # fmt: skip
def test_rows_chunks_are_as_wide_as_the_rows_allow(dtype: str, width: int, chunk: int) -> None:
    problem = miocore.ConvProblem.from_sizes(
        "forward", n=2, c=4, k=4, in_spatial=(6, width), filter_spatial=(3, 3), pads=(1, 1),
        groups=4, dtype=dtype, layout="NCHW",
    ).canonical  # fmt: skip
    assert geo.rows_chunk(problem) == chunk
    (kernel,) = (
        dw.GpuDepthwiseSolver()
        .get_solution(_ctx(), problem, miocore.PerfConfig(ox=4, oy=2))
        .kernels
    )
    assert f"-DMIO_NV={chunk}" in kernel.options and f"-DMIO_PWM={1 % chunk}" in kernel.options


def _run_block(
    make, tmp: Path, problem: miocore.ConvProblem, cfg, inputs, shift: int = 0,
    fewer_blocks: int = 1,
) -> np.ndarray:  # fmt: skip
    """``cfg``'s kernel run on the host as the invoker would pick it: the main kernel on
    aligned buffers, the last one (a scalar twin, where there is one) where they start
    ``shift`` elements past alignment, with the solver's parameter block; ``fewer_blocks``
    divides the grid's x (a grid-stride kernel then loops). The written tensor in logical
    order."""
    p = problem.canonical
    kernels, params, _ = _plan(problem, cfg)
    kernel = _picked(kernels, shift)
    a, b, *_ = geo.role(p)
    read = "y" if p.direction is miocore.Direction.BACKWARD_DATA else "x"
    (tmp / "params").write_bytes(params)
    (tmp / "a").write_bytes(_memory(a, inputs[read]).tobytes())
    (tmp / "w").write_bytes(_memory(p.w, inputs["w"]).tobytes())
    b_bytes = b.element_space * b.dtype.itemsize
    grid = (max(1, kernel.grid[0] // fewer_blocks), *kernel.grid[1:], 1)[:2]
    block = (*kernel.block, 1)[:2]
    args = [tmp / "params", tmp / "a", tmp / "w", b_bytes, tmp / "b", *grid, *block, shift]
    if "-DMIO_TMA=1" in kernel.options:  # the read tensor's map, as the invoker encodes it
        dims, strides, box = nhwc_tile_tma_box(p, cfg)
        (tmp / "map").write_bytes(np.array([*dims, *strides, *box], dtype=np.int64).tobytes())
        args.append(tmp / "map")
    exe = make(_block_options(kernel), "run_dw_block.cpp")
    subprocess.run([str(exe), *map(str, args)], check=True)
    memory = np.frombuffer((tmp / "b").read_bytes(), dtype=b.dtype.numpy)
    return np.lib.stride_tricks.as_strided(memory, b.lengths, _byte_strides(b)).copy()


def _picked(kernels: tuple, shift: int):
    """The kernel the invoker runs: the main one, its scalar twin (the last) when misaligned."""
    return kernels[-1] if shift else kernels[0]


def _sm90_ctx(sms: int = 132) -> miocore.ExecutionContext:
    """A CUDA sm_90 context of ``sms`` compute units: the one where TMA tiles are valid (no
    device is opened)."""
    import dataclasses

    device = dataclasses.replace(_ctx().device, arch="sm_90", compute_units=sms)
    return miocore.ExecutionContext(device=device)


def _plan(problem: miocore.ConvProblem, cfg, sms: int = 132) -> tuple:
    """The solver's launch plan of ``cfg`` on a GPU of ``sms`` compute units (a TMA tile's on
    an sm_90 one)."""
    ctx = _sm90_ctx(sms) if "tma" in cfg else cuda_context(sms)
    return dw.GpuDepthwiseSolver().launch_plan(ctx, problem.canonical, cfg)


def _block_options(kernel) -> tuple[str, ...]:
    """The kernel's options and the host runner's: which file and kernel it runs."""
    source = kernel.source.rsplit("/", 1)[-1]
    host = (f"-DMIO_HOST_SOURCE={source}", f"-DMIO_HOST_KERNEL={kernel.kernel_name}")
    return (*kernel.options, *host)


def _prebuild(make, plans) -> None:
    """Every runner of ``plans`` ((problem, configs, shifts) each) built first."""
    options = {
        _block_options(_picked(_plan(problem, cfg)[0], shift))
        for problem, configs, shifts in plans
        for cfg in configs
        for shift in shifts
    }
    _build_all(make, options, "run_dw_block.cpp")


def _build_all(make, options: set[tuple[str, ...]], runner: str) -> None:
    """``runner`` built for every set of ``options``, side by side: the compiles are most of a
    test's time."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(lambda o: make(o, runner), options))


def _byte_strides(t: miocore.TensorDescriptor) -> tuple[int, ...]:
    return tuple(s * t.dtype.itemsize for s in t.strides)


def _memory(t: miocore.TensorDescriptor, logical: np.ndarray) -> np.ndarray:
    """``logical`` laid out in memory as ``t``'s strides say (channels innermost: NHWC)."""
    memory = np.zeros(t.element_space, dtype=t.dtype.numpy)
    np.lib.stride_tricks.as_strided(memory, t.lengths, _byte_strides(t))[...] = logical
    return memory


TILE_CASES = [  # direction, c, spatial, filter, pads, strides, dilations
    ("forward", 24, (15, 13), (3, 3), (1, 1), (1, 1), (1, 1)),  # partial tiles, 24 of 32
    ("forward", 40, (17, 19), (3, 3), (1, 0), (2, 2), (1, 1)),  # stride 2, 40: 32 + 8
    ("forward", 16, (12, 20), (3, 3), (0, 2), (1, 1), (1, 1)),  # asymmetric padding
    ("forward", 32, (14, 14), (1, 3), (0, 1), (1, 2), (1, 1)),  # 1x3, stride (1, 2)
    ("forward", 24, (16, 18), (3, 3), (2, 2), (1, 1), (2, 2)),  # dilation 2
    ("backward_data", 40, (11, 9), (3, 3), (1, 2), (1, 1), (1, 1)),  # flipped filter
    ("backward_data", 24, (15, 13), (3, 3), (1, 1), (2, 2), (1, 1)),  # the gather
    ("backward_data", 40, (17, 18), (3, 3), (1, 0), (2, 2), (2, 1)),  # gather, dilation, pads
    ("backward_data", 32, (12, 14), (1, 3), (0, 2), (1, 2), (1, 1)),  # gather along w only
    ("forward", 24, (15, 13), (5, 5), (2, 2), (1, 1), (1, 1)),  # 5x5: 2 channels a thread
    ("forward", 40, (17, 19), (5, 5), (2, 1), (2, 2), (1, 1)),  # 5x5 stride 2
    ("backward_data", 24, (13, 15), (5, 5), (2, 2), (1, 1), (1, 1)),  # 5x5 flipped
    ("backward_data", 40, (17, 16), (5, 5), (2, 2), (2, 2), (1, 1)),  # 5x5 gather
    ("forward", 24, (15, 13), (7, 7), (3, 3), (1, 1), (1, 1)),  # 7x7: 1 channel a thread
    ("backward_data", 40, (17, 16), (7, 7), (3, 2), (2, 2), (1, 1)),  # 7x7 gather
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_nhwc_tile_kernel_on_the_host_matches_reference(build, tmp_path: Path, dtype: str) -> None:
    # dw_nhwc_tile: the first and last single tiles of each case (tile shapes, 32/64-channel
    # blocks, caps), and the first in runs of 2 and 8 tiles a block (3 images' tiles: the last
    # run short)
    from miocore_direct.gpu_depthwise_nhwc_tile import NHWC_TILE_RUNS, nhwc_tile_configs

    plans, runs = [], 0
    for direction, c, spatial, f, pads, strides, dils in TILE_CASES:
        problem = _problem((direction, c, 1, spatial, f, pads, strides, dils), dtype, "NHWC", n=3)
        singles = [c for c in nhwc_tile_configs(problem.canonical) if "nt" not in c]
        picks = [singles[0], singles[-1]]
        for nt in (NHWC_TILE_RUNS[0], NHWC_TILE_RUNS[-1]):
            run = miocore.PerfConfig(**singles[0], nt=nt)
            if dw.GpuDepthwiseSolver().is_valid_perf_config(_ctx(), problem.canonical, run):
                picks.append(run)
                runs += 1
        plans.append((problem, picks, (0,)))
    assert runs >= len(TILE_CASES)
    assert _check(build, tmp_path, plans, seed=13) == 2 * len(TILE_CASES) + runs


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_nhwc_tile_kernel_through_tma_on_the_host(build, tmp_path: Path, dtype: str) -> None:
    # dw_nhwc_tile staged by the tensor memory accelerator (MIO_TMA), with the TMA copy and the
    # mbarriers' phases in their host forms (tests/host_kernels/miocore_tma.h) and the map the
    # solver describes: each case's first and last TMA tiles and its first in runs of 2 and 8
    # tiles a block (two buffers, two barriers); one element off alignment, the scalar twin
    plans, runs = [], 0
    for direction, c, spatial, f, pads, strides, dils in TILE_CASES:
        problem = _problem((direction, c, 1, spatial, f, pads, strides, dils), dtype, "NHWC", n=3)
        twins = tile_module.nhwc_tile_tma_configs(problem.canonical)
        singles = [t for t in twins if "nt" not in t]
        picks = [singles[0], singles[-1]]
        for nt in (tile_module.NHWC_TILE_RUNS[0], tile_module.NHWC_TILE_RUNS[-1]):
            run = miocore.PerfConfig(**singles[0], nt=nt)
            if tile_module.nhwc_tile_valid(problem.canonical, run):
                picks.append(run)
                runs += 1
        for cfg in picks:  # the staged kernel itself, not the default in its place
            assert "-DMIO_TMA=1" in _plan(problem, cfg)[0][0].options, dict(cfg)
        plans.append((problem, picks, (0,)))
    plans[0] = (plans[0][0], plans[0][1], (0, 1))
    assert runs >= len(TILE_CASES)
    expected = sum(len(picks) * len(shifts) for _, picks, shifts in plans)
    assert _check(build, tmp_path, plans, seed=17) == expected


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))  # fp32's 48-channel tiles: stride 1
def test_nhwc_tile_kernel_in_blocks_of_48_channels_on_the_host(
    build, tmp_path: Path, dtype: str
) -> None:
    # 96 channels in two blocks of 48: 12 channel lanes x 21 pixel lanes, 252 threads (lanes
    # that do not divide 256), single tiles and runs (stride 1: at stride 2 no run's two
    # buffers fit), forward (stride 1 and 2) and backward data
    from miocore_direct.gpu_depthwise_nhwc_tile import nhwc_tile_configs

    plans, count = [], 0
    for direction, strides in (("forward", (1, 1)), ("forward", (2, 2)), ("backward_data", (1, 1))):
        case = (direction, 96, 1, (13, 11), (3, 3), (1, 1), strides, (1, 1))
        problem = _problem(case, dtype, "NHWC", n=3)
        exact = [c for c in nhwc_tile_configs(problem.canonical) if c["ch"] == 48]
        singles = [c for c in exact if "nt" not in c]
        runs = [c for c in exact if "nt" in c]
        assert singles and (runs or strides == (2, 2)), problem.key
        picks = [singles[0], singles[-1], *runs[:1], *runs[-1:]]
        for cfg in picks:
            kernel = dw.GpuDepthwiseSolver().launch_plan(_ctx(), problem.canonical, cfg)[0][0]
            runs = tile_module.nhwc_tile_blocks_x(problem.canonical, cfg)
            assert kernel.block == (12, 21) and kernel.grid == (2 * runs, 1)  # blocks first
        plans.append((problem, picks, (0,)))
        count += len(picks)
    assert _check(build, tmp_path, plans, seed=17) == count == 10


@pytest.mark.parametrize(
    ("dtype", "first"), [("float16", True), ("float32", True), ("float16", False)]
)
def test_nhwc_tile_kernel_launch_orders_on_the_host(
    build, tmp_path: Path, dtype: str, first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NHWC_TILE_CHANNELS_FIRST: one grid dimension, a run of tiles' channel blocks next to each
    # other (MIO_CFAST), or off: runs along x, channel blocks along y; on the 40- and
    # 96-channel cases (2-3 channel blocks), single tiles and runs, staged by hand and by TMA,
    # forward, strided forward and the gather
    monkeypatch.setattr(tile_module, "NHWC_TILE_CHANNELS_FIRST", first)
    plans, count = [], 0
    cases = [case for case in TILE_CASES if case[1] == 40][:3]
    cases.append(("forward", 96, (13, 11), (3, 3), (1, 1), (1, 1), (1, 1)))
    for direction, c, spatial, f, pads, strides, dils in cases:
        problem = _problem((direction, c, 1, spatial, f, pads, strides, dils), dtype, "NHWC", n=3)
        canon = problem.canonical
        plain = [t for t in tile_module.nhwc_tile_configs(canon) if t["ch"] < c]
        twins = [t for t in tile_module.nhwc_tile_tma_configs(canon) if t["ch"] < c]
        picks = [plain[0], *[t for t in plain if "nt" in t][:1], twins[0], twins[-1]]
        for cfg in picks:
            kernel = _plan(problem, cfg)[0][0]
            blocks = tile_module.nhwc_tile_grid(canon, cfg)[2]
            runs = tile_module.nhwc_tile_blocks_x(canon, cfg)
            assert blocks > 1 and ("-DMIO_CFAST=1" in kernel.options) == first, dict(cfg)
            assert kernel.grid == ((runs * blocks, 1) if first else (runs, blocks)), dict(cfg)
        plans.append((problem, picks, (0,)))
        count += len(picks)
    assert _check(build, tmp_path, plans, seed=19) == count


NHWC_CASES = [  # direction, c, mult, spatial, filter, pads, strides, dilations
    ("forward", 24, 1, (13, 11), (3, 3), (1, 1), (1, 1), (1, 1)),  # strips, partial groups
    ("forward", 40, 1, (17, 15), (5, 5), (2, 1), (2, 2), (1, 1)),  # 5x5 stride 2
    ("forward", 24, 1, (12, 14), (7, 7), (3, 3), (1, 1), (1, 1)),  # 7x7: taps in shared memory
    ("forward", 8, 2, (9, 10), (3, 3), (1, 1), (1, 1), (2, 2)),  # multiplier, dilation
    ("backward_data", 24, 1, (14, 13), (3, 3), (1, 1), (2, 2), (1, 1)),  # the gather
    ("backward_data", 40, 1, (11, 9), (3, 3), (1, 2), (1, 1), (1, 1)),  # flipped filter
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_nhwc_kernel_on_the_host_matches_reference(build, tmp_path: Path, dtype: str) -> None:
    # dw_nhwc: the default and the space's first and last configs on aligned buffers, the
    # default again on buffers one element past alignment (its scalar twin)
    plans = []
    for case in NHWC_CASES:
        problem = _problem(case, dtype, "NHWC")
        default = dw.GpuDepthwiseSolver().default_perf_config(_ctx(), problem.canonical)
        assert "ct" in default, (problem.key, dict(default))  # dw_nhwc's, not a staged tile
        space = [g for g in _space(problem) if "ct" in g]
        plans.append((problem, list(dict.fromkeys((default, space[0], space[-1]))), (0,)))
        plans.append((problem, [default], (1,)))
    assert _check(build, tmp_path, plans, seed=17) >= 3 * len(NHWC_CASES)


NCHW_CASES = [  # direction, c, mult, spatial, filter, pads, strides, dilations
    ("forward", 3, 1, (13, 11), (3, 3), (1, 1), (1, 1), (1, 1)),  # partial tiles
    ("forward", 2, 1, (17, 15), (5, 5), (2, 1), (2, 2), (1, 1)),  # 5x5 stride 2
    ("forward", 2, 2, (9, 10), (3, 3), (1, 1), (1, 1), (2, 2)),  # multiplier, dilation
    ("forward", 4, 1, (6, 7), (3, 3), (1, 1), (1, 1), (1, 1)),  # small planes: several a block
    ("backward_data", 3, 1, (14, 13), (3, 3), (1, 1), (2, 2), (1, 1)),  # the gather
    ("backward_data", 2, 1, (12, 16), (7, 7), (3, 3), (1, 1), (1, 1)),  # 7x7 flipped
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_nchw_kernel_on_the_host_matches_reference(build, tmp_path: Path, dtype: str) -> None:
    # dw_nchw: the space's first and last tiles, and its first with several planes a block
    plans, several = [], 0
    for case in NCHW_CASES:
        problem = _problem(case, dtype, "NCHW")
        space = [g for g in _space(problem) if "tw" in g]
        picks = [space[0], space[-1], *[g for g in space if "pp" in g][:1]]
        several += any("pp" in g for g in picks)
        plans.append((problem, list(dict.fromkeys(picks)), (0,)))
    assert several  # the small planes' case has several planes a block
    assert _check(build, tmp_path, plans, seed=19) >= 2 * len(NCHW_CASES)


def _run_wrw(
    make, tmp: Path, problem: miocore.ConvProblem, cfg, inputs, shift: int, sms: int = 132
) -> np.ndarray:
    """Backward weights of ``cfg`` on the host as the invoker runs it on a GPU of ``sms``
    compute units: the main kernel (its scalar twin where x and dy start ``shift`` elements
    past alignment), then the reduce over the splits' partials; dw in logical order."""
    p = problem.canonical
    kernels, params, split = _plan(problem, cfg, sms)
    main = _wrw_main(kernels, cfg, shift)
    reduce = kernels[-1] if split > 1 else None
    (tmp / "params").write_bytes(params)
    (tmp / "x").write_bytes(_memory(p.x, inputs["x"]).tobytes())
    (tmp / "dy").write_bytes(_memory(p.y, inputs["y"]).tobytes())
    w_bytes = p.w.element_space * p.w.dtype.itemsize
    rgrid, rblock = (reduce.grid[0], (*reduce.block, 1)[:2]) if reduce else (1, (1, 1))
    grid, block = (*main.grid, 1)[:2], (*main.block, 1)[:2]
    args = [tmp / "params", tmp / "x", tmp / "dy", w_bytes, tmp / "w", *grid, *block, shift,
            split, rgrid, *rblock]  # fmt: skip
    if "-DMIO_TMA=1" in main.options:  # the maps of x and dy, as the invoker encodes them
        maps = zip(("x_map", "dy_map"), geo.wrw_tile_tma_boxes(p, cfg), strict=True)
        for name, (dims, strides, box) in maps:
            (tmp / name).write_bytes(np.array([*dims, *strides, *box], dtype=np.int64).tobytes())
            args.append(tmp / name)
    exe = make(_block_options(main), "run_dw_wrw.cpp")
    subprocess.run([str(exe), *map(str, args)], check=True)
    memory = np.frombuffer((tmp / "w").read_bytes(), dtype=p.w.dtype.numpy)
    return np.lib.stride_tricks.as_strided(memory, p.w.lengths, _byte_strides(p.w)).copy()


WRW_CASES = [  # c, mult, spatial, filter, pads, strides, dilations, layout
    (24, 1, (13, 11), (3, 3), (1, 1), (1, 1), (1, 1), "NHWC"),  # staged tiles, row groups
    (40, 1, (17, 15), (5, 5), (2, 1), (2, 2), (1, 1), "NHWC"),  # 5x5 stride 2
    (16, 1, (12, 14), (7, 7), (3, 3), (1, 1), (1, 1), "NHWC"),  # 7x7
    (8, 2, (9, 10), (3, 3), (1, 1), (1, 1), (2, 2), "NHWC"),  # multiplier: dw_wrw
    (3, 1, (10, 9), (3, 3), (1, 1), (2, 1), (1, 1), "NCHW"),  # channels outer: dw_wrw
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_backward_weights_on_the_host_matches_reference(build, tmp_path: Path, dtype: str) -> None:
    # the default and the space's last config (a staged tile where they apply, dw_wrw's strips
    # elsewhere), split over partials as on a 132-SM GPU, on aligned buffers; the default again
    # on x and dy one element past alignment (the scalar twin)
    rng = np.random.default_rng(23)
    solver = dw.GpuDepthwiseSolver()
    tol = reference.tolerance(dtype)
    plans = []
    for c, mult, spatial, f, pads, strides, dils, layout in WRW_CASES:
        case = ("backward_weights", c, mult, spatial, f, pads, strides, dils)
        problem = _problem(case, dtype, layout)
        default = solver.default_perf_config(_ctx(), problem.canonical)
        picks = list(dict.fromkeys((default, _space(problem)[-1])))
        plans.append((problem, [(cfg, 0) for cfg in picks] + [(default, 1)]))
    done = _check_wrw(build, tmp_path, plans, rng, tol)
    tiles = sum(geo.is_tile(cfg) for _, cfg, _ in done)
    splits = sum(_plan(problem, cfg)[2] > 1 for problem, cfg, _ in done)
    assert len(done) >= 2 * len(WRW_CASES) and tiles and splits


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_backward_weights_tiles_through_tma_on_the_host(build, tmp_path: Path, dtype: str) -> None:
    # dw_wrw_tile staged by the tensor memory accelerator (MIO_TMA: x's and dy's tiles as they
    # lie in memory, two items in flight), with the TMA copy and the mbarriers' phases in
    # their host forms: the TMA twins of the default (3x3: row groups; also with 2 channels
    # a thread) and of the space's first and last tiles (the last: 4 channels a thread), split
    # over partials as on a one-SM GPU (4 splits: 3 or 4 items a block on the 3x3 case, both
    # buffers twice, both phases); the default one element off alignment (the twin, no map)
    rng = np.random.default_rng(31)
    tol = reference.tolerance(dtype)
    solver = dw.GpuDepthwiseSolver()
    plans = []
    for c, mult, spatial, f, pads, strides, dils, layout in WRW_CASES:
        problem = _problem(("backward_weights", c, mult, spatial, f, pads, strides, dils),
                           dtype, layout)  # fmt: skip
        twins = configs.wrw_tile_tma_configs(problem.canonical)
        if not twins:
            continue
        default = miocore.PerfConfig(
            **solver.default_perf_config(_ctx(), problem.canonical), tma=1
        )  # its two fp32 buffers exceed the static shared memory at 5x5 stride 2
        picks = [default, twins[0], twins[-1]] if default in twins else [twins[0], twins[-1]]
        pair = miocore.PerfConfig(**default, wv=2)  # row groups on 3x3, 2 channels a thread
        picks = list(dict.fromkeys([*picks, *([pair] if pair in twins else [])]))
        plans.append((problem, [(cfg, 0) for cfg in picks] + [(picks[0], 1)]))
    done = _check_wrw(build, tmp_path, plans, rng, tol, sms=1)
    checked, staged, items = len(done), 0, 0
    for problem, cfg, shift in done:
        kernels, _, split = _plan(problem, cfg, 1)
        staged += "-DMIO_TMA=1" in _wrw_main(kernels, cfg, shift).options
        items = max(items, -(-geo.wrw_tile_items(problem.canonical, cfg) // split))
    assert len(plans) == 3 and staged == checked - len(plans) and items >= 3
    wide = {cfg.get("wv", 1) for _, runs in plans for cfg, _ in runs}
    assert wide == {1, 2, 4}


def _check_wrw(make, tmp: Path, plans, rng, tol: float, sms: int = 132) -> list[tuple]:
    """Runs every (problem, [(config, shift), ...]) of ``plans`` on the host as the invoker
    would on a GPU of ``sms`` compute units (the runners built first, side by side) against
    the float64 reference on random inputs; the (problem, config, shift) runs checked."""
    options = {
        _block_options(_wrw_main(_plan(problem, cfg, sms)[0], cfg, shift))
        for problem, runs in plans
        for cfg, shift in runs
    }
    _build_all(make, options, "run_dw_wrw.cpp")
    done = []
    for problem, runs in plans:
        canon = problem.canonical
        inputs = reference.random_inputs(canon, rng)
        expected = reference.convolution(canon, x=inputs["x"], y=inputs["y"])
        for cfg, shift in runs:
            got = _run_wrw(make, tmp, problem, cfg, inputs, shift, sms)
            err = reference.relative_error(got, expected)
            assert np.isfinite(err) and err <= tol, (problem.key, dict(cfg), shift, err)
            done.append((problem, cfg, shift))
    return done


def _wrw_main(kernels: tuple, cfg, shift: int):
    """The main kernel the invoker picks: its scalar twin on misaligned x and dy."""
    mains = kernels[:2] if cfg.get("vec", 1) > 1 else kernels[:1]
    return mains[-1] if shift else mains[0]
