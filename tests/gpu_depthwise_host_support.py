"""Shared pieces of the host tests of ``direct.gpu_depthwise``'s kernels
(``test_gpu_depthwise_host.py``, ``test_gpu_depthwise_wrw_host.py``): the runner builder, the
solver's launch plan on a stand-in CUDA context, buffers laid out as the tensors' strides say,
one launch run on the host, and a check of many runs against the float64 reference.

``tests/host_kernels/miocore_gpu.h`` stands in for the portability header; ``run_dw_block.cpp``
runs a launch of one forward or backward-data kernel, ``run_dw_wrw.cpp`` backward weights as
the invoker runs it; each block's threads as std::threads that meet at a host barrier, the
blocks one after another. ``miocore_tma.h`` beside the runners copies a TMA box as the solver's
tensor map describes it and counts the mbarriers' phases. Tests skip where no C++ compiler with
``_Float16`` is found.
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
