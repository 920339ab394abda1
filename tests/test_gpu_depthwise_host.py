"""``direct.gpu_depthwise``'s kernels built for the host and run on the CPU.

``tests/host_kernels/miocore_gpu.h`` stands in for the portability header. ``dw_nchw_rows``
has no barrier and no shared memory, so ``run_dw_nchw_rows.cpp`` runs its grid thread after
thread (a smaller grid than the solver's, so the grid-stride loop is exercised too).
``dw_nhwc_tile`` and ``dw_nhwc`` meet at barriers over shared memory, so ``run_dw_block.cpp``
runs each block's threads as std::threads meeting at a host barrier, blocks one after another:
the staged tiles one a block and in runs through both buffers, ``dw_nhwc`` with its taps in
registers or staged in shared memory, and its scalar twin on misaligned buffers. Each runs a
launch on the options, geometry and packed parameters the solver gives; the result, on random
inputs and an output poisoned with NaN, is checked against the float64 reference with each
dtype's tolerance: the kernels' indexing (runs, rows, tiles, halos, padding, stride, dilation,
channel multiplier, short channel blocks, the chunked loads' alignment and the
element-by-element paths) is tested without a GPU. Skipped where no C++ compiler with
``_Float16`` is found.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import miocore
from miocore import reference
from miocore.backends.gpu_kernels import tensor5_bytes
from miocore.testing import cpu_context

dw = pytest.importorskip("miocore_direct.gpu_depthwise")
geo = pytest.importorskip("miocore_direct.gpu_depthwise_geometry")
configs = pytest.importorskip("miocore_direct.gpu_depthwise_configs")

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

    def make(options: tuple[str, ...], runner: str = "run_dw_nchw_rows.cpp") -> Path:
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


def _ctx() -> miocore.ExecutionContext:
    device = dataclasses.replace(cpu_context().device, backend="cuda", compute_units=132)
    return miocore.ExecutionContext(device=device)


def _run(make, tmp: Path, problem: miocore.ConvProblem, cfg, inputs, shift: int) -> np.ndarray:
    """``cfg`` run on the host; the written tensor in logical order."""
    p = problem.canonical
    (kernel,) = dw.GpuDepthwiseSolver().get_solution(_ctx(), p, cfg).kernels
    assert kernel.kernel_name == "dw_nchw_rows"
    a, b, *_ = geo.role(p)
    pads = geo.kernel_pads(p)
    runs, groups, items = configs.rows_items(p, cfg)
    fields = dict.fromkeys(geo.PARAM_FIELDS, 0)
    fields.update(pad_d=pads[0], pad_h=pads[1], pad_w=pads[2], split=1)
    fields.update(tiles_w=runs, tiles=groups, items=items)
    params = tensor5_bytes(a) + tensor5_bytes(b) + tensor5_bytes(p.w) + geo.pack_params(fields)
    read = "y" if p.direction is miocore.Direction.BACKWARD_DATA else "x"
    (tmp / "params").write_bytes(params)
    (tmp / "a").write_bytes(np.ascontiguousarray(inputs[read]).tobytes())
    (tmp / "w").write_bytes(np.ascontiguousarray(inputs["w"]).tobytes())
    b_bytes = b.element_count * b.dtype.itemsize
    grid = max(1, kernel.grid[0] // 3)  # fewer blocks than runs: the grid-stride loop
    args = [tmp / "params", tmp / "a", tmp / "w", b_bytes, tmp / "b", grid, kernel.block[0], shift]
    subprocess.run([str(make(kernel.options)), *map(str, args)], check=True)
    return np.frombuffer((tmp / "b").read_bytes(), dtype=b.dtype.numpy).reshape(b.lengths)


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
    rng = np.random.default_rng(11)
    solver = dw.GpuDepthwiseSolver()
    tol = reference.tolerance(dtype)
    checked = 0
    for direction, c, mult, spatial, f, pads, strides, dils in CASES:
        problem = miocore.ConvProblem.from_sizes(
            direction, n=2, c=c, k=c * mult, in_spatial=spatial, filter_spatial=f, pads=pads,
            strides=strides, dilations=dils, groups=c, dtype=dtype, layout="NCHW",
        )  # fmt: skip
        space = [g for g in solver.perf_config_space(_ctx(), problem.canonical) if "ox" in g]
        inputs = reference.random_inputs(problem.canonical, rng)
        out_name = problem.canonical.direction.output_tensor
        expected = reference.convolution(
            problem.canonical, **{k: v for k, v in inputs.items() if k != out_name}
        )
        # the widest and narrowest runs, one and four rows, on aligned and shifted buffers
        for cfg in (space[0], space[-1]):
            for shift in (0, 1):
                got = _run(build, tmp_path, problem, cfg, inputs, shift)
                err = reference.relative_error(got, expected)
                assert np.isfinite(err) and err <= tol, (problem.key, dict(cfg), shift, err)
                checked += 1
    assert checked == 4 * len(CASES)


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


def _run_block(make, tmp: Path, problem: miocore.ConvProblem, cfg, inputs, shift: int = 0):
    """``cfg``'s kernel of a channels-innermost layer (``dw_nhwc_tile`` or ``dw_nhwc``) run on
    the host as the invoker would pick it: the main kernel on aligned buffers, its scalar twin
    (the last kernel) where they start ``shift`` elements past alignment; the written tensor in
    logical order."""
    from miocore_direct.gpu_depthwise_nhwc_tile import is_nhwc_tile, nhwc_tile_grid

    p = problem.canonical
    kernel = _block_kernel(p, cfg, shift)
    a, b, *_ = geo.role(p)
    pads = geo.kernel_pads(p)
    fields = dict.fromkeys(geo.PARAM_FIELDS, 0)
    fields.update(pad_d=pads[0], pad_h=pads[1], pad_w=pads[2], split=1)
    twin = cfg
    if is_nhwc_tile(cfg):  # the solver's fields: the tiles', then its dw_nhwc twin's
        tiles_w, tiles, _ = nhwc_tile_grid(p, cfg)
        fields.update(tiles_w=tiles_w, tiles=tiles)
        twin = miocore.PerfConfig(vec=1, pix=1, py=1, ct=geo.ct_for(b.lengths[1], 1))
    dw.nhwc_kernels(_ctx(), p, twin, [], fields)
    params = tensor5_bytes(a) + tensor5_bytes(b) + tensor5_bytes(p.w) + geo.pack_params(fields)
    read = "y" if p.direction is miocore.Direction.BACKWARD_DATA else "x"
    (tmp / "params").write_bytes(params)
    (tmp / "a").write_bytes(_memory(a, inputs[read]).tobytes())
    (tmp / "w").write_bytes(_memory(p.w, inputs["w"]).tobytes())
    b_bytes = b.element_space * b.dtype.itemsize
    grid, block = kernel.grid, (*kernel.block, 1)[:2]
    args = [tmp / "params", tmp / "a", tmp / "w", b_bytes, tmp / "b", *grid, *block, shift]
    exe = make(_block_options(kernel), "run_dw_block.cpp")
    subprocess.run([str(exe), *map(str, args)], check=True)
    memory = np.frombuffer((tmp / "b").read_bytes(), dtype=b.dtype.numpy)
    return np.lib.stride_tricks.as_strided(memory, b.lengths, _byte_strides(b)).copy()


def _block_kernel(p: miocore.ConvProblem, cfg, shift: int):
    kernels = dw.GpuDepthwiseSolver().get_solution(_ctx(), p, cfg).kernels
    return kernels[-1] if shift else kernels[0]


def _block_options(kernel) -> tuple[str, ...]:
    """The kernel's options and the host runner's: which file and kernel it runs."""
    source = kernel.source.rsplit("/", 1)[-1]
    host = (f"-DMIO_HOST_SOURCE={source}", f"-DMIO_HOST_KERNEL={kernel.kernel_name}")
    return (*kernel.options, *host)


def _prebuild(make, plans) -> None:
    """Every runner of ``plans`` ((problem, configs, shifts) each) built first, side by side:
    the compiles are most of a test's time."""
    options = {
        _block_options(_block_kernel(problem.canonical, cfg, shift))
        for problem, configs, shifts in plans
        for cfg in configs
        for shift in shifts
    }
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(lambda o: make(o, "run_dw_block.cpp"), options))


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
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_nhwc_tile_kernel_on_the_host_matches_reference(build, tmp_path: Path, dtype: str) -> None:
    # the first and last single tiles of each case (tile shapes, 32/64-channel blocks, caps),
    # and the first in runs of 2 and 8 tiles a block (3 images' tiles: the last run short)
    from miocore_direct.gpu_depthwise_nhwc_tile import NHWC_TILE_RUNS, nhwc_tile_configs

    rng = np.random.default_rng(13)
    solver = dw.GpuDepthwiseSolver()
    tol = reference.tolerance(dtype)
    plans = []
    for direction, c, spatial, f, pads, strides, dils in TILE_CASES:
        problem = miocore.ConvProblem.from_sizes(
            direction, n=3, c=c, k=c, in_spatial=spatial, filter_spatial=f, pads=pads,
            strides=strides, dilations=dils, groups=c, dtype=dtype, layout="NHWC",
        )  # fmt: skip
        singles = nhwc_tile_configs(problem.canonical)
        configs = [singles[0], singles[-1]]
        for nt in (NHWC_TILE_RUNS[0], NHWC_TILE_RUNS[-1]):
            run = miocore.PerfConfig(**singles[0], nt=nt)
            if solver.is_valid_perf_config(_ctx(), problem.canonical, run):
                configs.append(run)
        plans.append((problem, configs, (0,)))
    _prebuild(build, plans)
    checked = runs = 0
    for problem, configs, _ in plans:
        canon = problem.canonical
        runs += sum("nt" in cfg for cfg in configs)
        inputs = reference.random_inputs(canon, rng)
        out_name = canon.direction.output_tensor
        expected = reference.convolution(
            canon, **{k: v for k, v in inputs.items() if k != out_name}
        )
        for cfg in configs:
            got = _run_block(build, tmp_path, problem, cfg, inputs)
            err = reference.relative_error(got, expected)
            assert np.isfinite(err) and err <= tol, (problem.key, dict(cfg), err)
            checked += 1
    assert runs >= len(TILE_CASES) and checked == 2 * len(TILE_CASES) + runs


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
    rng = np.random.default_rng(17)
    solver = dw.GpuDepthwiseSolver()
    tol = reference.tolerance(dtype)
    plans = []
    for direction, c, mult, spatial, f, pads, strides, dils in NHWC_CASES:
        problem = miocore.ConvProblem.from_sizes(
            direction, n=2, c=c, k=c * mult, in_spatial=spatial, filter_spatial=f, pads=pads,
            strides=strides, dilations=dils, groups=c, dtype=dtype, layout="NHWC",
        )  # fmt: skip
        canon = problem.canonical
        space = [g for g in solver.perf_config_space(_ctx(), canon) if "ct" in g]
        default = solver.default_perf_config(_ctx(), canon)
        assert "ct" in default, (problem.key, dict(default))  # dw_nhwc's, not a staged tile
        plans.append((problem, list(dict.fromkeys((default, space[0], space[-1]))), (0,)))
        plans.append((problem, [default], (1,)))
    _prebuild(build, plans)
    checked = 0
    for problem, configs, (shift,) in plans:
        canon = problem.canonical
        inputs = reference.random_inputs(canon, rng)
        out_name = canon.direction.output_tensor
        expected = reference.convolution(
            canon, **{k: v for k, v in inputs.items() if k != out_name}
        )
        for cfg in configs:
            got = _run_block(build, tmp_path, problem, cfg, inputs, shift)
            err = reference.relative_error(got, expected)
            assert np.isfinite(err) and err <= tol, (problem.key, dict(cfg), shift, err)
            checked += 1
    assert checked >= 3 * len(NHWC_CASES)
