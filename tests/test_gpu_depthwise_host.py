"""``direct.gpu_depthwise``'s ``dw_nchw_rows`` kernel built for the host and run on the CPU.

The kernel has no barrier and no shared memory, so its grid can run thread after thread in
plain C++: ``tests/host_kernels/miocore_gpu.h`` stands in for the portability header and
``run_dw_nchw_rows.cpp`` runs a launch (a smaller grid than the solver's, so the grid-stride
loop is exercised too) on the options, geometry and packed parameters the solver gives. The
result, on random inputs and an output poisoned with NaN, is checked against the float64
reference with each dtype's tolerance: the kernel's indexing (runs, rows, padding, stride,
dilation, channel multiplier, the chunked loads' alignment and the element-by-element path)
is tested without a GPU. Skipped where no C++ compiler with ``_Float16`` is found.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import subprocess
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

    def make(options: tuple[str, ...]) -> Path:
        if options not in built:
            exe = out / hashlib.sha1(" ".join(options).encode()).hexdigest()[:16]
            cmd = [CXX, "-O1", "-std=c++17", "-w", f"-I{HOST}", f"-I{geo.KERNEL_DIR}"]
            done = subprocess.run(
                [*cmd, *options, "-o", str(exe), str(HOST / "run_dw_nchw_rows.cpp")],
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            built[options] = exe
        return built[options]

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
