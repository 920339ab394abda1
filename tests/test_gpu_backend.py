"""The GPU backend through the handle (marked ``gpu``; skipped where there is no device).

Covers device identity, PyTorch / CuPy / DLPack / own-buffer arrays, find and immediate mode on
torch tensors, Find 1.0 with alpha/beta, streams, bad inputs, compile errors, the binary cache
(warm start in a second process, MIOCORE_DISABLE_CACHE) and ``miocore conv --device``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import miocore
from miocore import reference
from miocore.errors import BackendUnavailableError, CompileError, InvalidArgumentError
from miocore.solver.registry import Registry
from miocore.testing import TOLERANCES

pytestmark = pytest.mark.gpu

DEVICE = os.environ.get("MIOCORE_TEST_GPU", "cuda")


def _available() -> bool:
    try:
        miocore.Handle(DEVICE)
    except BackendUnavailableError:
        return False
    return True


_HAS_GPU = _available()

# Import PyTorch when the module is collected, not lazily in the middle of a long GPU session:
# on the device, torch 2.11's first import failed inside its own schema parser when it happened
# after other GPU test modules had run (the same tests pass with torch imported first).
_TORCH_MODULE: Any = None
if _HAS_GPU:
    try:
        import torch as _TORCH_MODULE
    except ImportError:
        _TORCH_MODULE = None


@pytest.fixture
def handle() -> miocore.Handle:
    if not _HAS_GPU:
        pytest.skip(f"no {DEVICE} device")
    return miocore.Handle(DEVICE)


@pytest.fixture
def torch() -> Any:
    if not _HAS_GPU:
        pytest.skip(f"no {DEVICE} device")
    if _TORCH_MODULE is None:
        pytest.skip("PyTorch is not installed")
    return _TORCH_MODULE


def _problem(direction: str = "forward", dtype: str = "float32", layout: str = "NCHW"):
    return miocore.ConvProblem.from_sizes(
        direction,
        n=2,
        c=8,
        k=16,
        in_spatial=(9, 9),
        filter_spatial=(3, 3),
        pads=(1, 1),
        strides=(2, 2),
        dtype=dtype,
        layout=layout,
    )


_TORCH = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def _torch_tensors(torch: Any, p: miocore.ConvProblem, seed: int = 0) -> tuple[dict, dict]:
    """Host inputs (numpy, logical order) and matching torch tensors with the descriptors'
    strides (channels_last where the layout says so)."""
    host = reference.random_inputs(p, seed)
    dev = {}
    for name, values in host.items():
        desc = getattr(p, name)
        t = torch.from_numpy(np.ascontiguousarray(values.astype(np.float32)))
        t = t.to(device="cuda", dtype=getattr(torch, _TORCH[desc.dtype.value]))
        if desc.layout in ("NHWC", "NDHWC"):
            fmt = torch.channels_last if desc.spatial_dims == 2 else torch.channels_last_3d
            t = t.contiguous(memory_format=fmt)
        dev[name] = t
    return host, dev


# -- identity --


def test_device_identity(handle: miocore.Handle) -> None:
    info = handle.device
    assert info.backend == DEVICE
    if DEVICE == "cuda":
        assert re.fullmatch(r"sm\d+_\d+", info.identity), info.identity
        assert info.identity == f"{info.arch}_{info.compute_units}"
    else:
        assert re.fullmatch(r"gfx[0-9a-f]+\d+", info.identity), info.identity
    assert info.peak_gbps > 0 and all(v > 0 for v in info.peak_gflops.values())
    assert handle.find_db.user_path.name.startswith(info.identity)


# -- torch round trip through find and immediate mode --


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_round_trip_find_and_immediate(
    handle: miocore.Handle, torch: Any, dtype: str, layout: str
) -> None:
    tol = TOLERANCES[miocore.DataType.parse(dtype)]
    for direction in ("forward", "backward_data", "backward_weights"):
        p = _problem(direction, dtype, layout)
        host, dev = _torch_tensors(torch, p)
        out_name = p.direction.output_tensor
        expected = reference.convolution(p, **{k: v for k, v in host.items() if k != out_name})
        sols = handle.find_solutions(p, find_mode="NORMAL")
        assert sols and not sols[0].is_estimate and sols[0].source == "measured"
        for s in sols:
            dev[out_name].fill_(float("nan"))
            ws = handle.backend.allocate_workspace(s.workspace_size)
            handle.run_solution(s, workspace=ws, **dev)
            torch.cuda.synchronize()
            got = dev[out_name].float().cpu().numpy()
            assert reference.relative_error(got, expected) <= tol, (s.solver, direction)
        # immediate mode, cached invoker, on a fresh output
        name = handle.get_solutions(p)[0].solver
        handle.compile_solution(p, name)
        dev[out_name].fill_(float("nan"))
        ws = handle.backend.allocate_workspace(handle.get_solution_workspace_size(p, name))
        handle.immediate(p, name, workspace=ws, **dev)
        torch.cuda.synchronize()
        got = dev[out_name].float().cpu().numpy()
        assert reference.relative_error(got, expected) <= tol, (name, direction)


def test_find_record_is_reused_in_a_new_handle(handle: miocore.Handle, torch: Any) -> None:
    p = _problem()
    first = handle.find_solutions(p)
    again = miocore.Handle(DEVICE).find_solutions(p)
    assert again[0].source == "find-db" and again[0].solver == first[0].solver


def test_find_1_0_and_alpha_beta(handle: miocore.Handle, torch: Any) -> None:
    p = _problem()
    host, dev = _torch_tensors(torch, p)
    perf = handle.find_convolution_algorithm(p, **dev)
    assert perf and perf[0].time_ms > 0
    expected = reference.convolution(p, x=host["x"], w=host["w"])
    before = dev["y"].clone()
    handle.convolution(p, perf[0].algorithm, alpha=2.0, beta=0.5, **dev)
    torch.cuda.synchronize()
    want = 2.0 * expected + 0.5 * before.cpu().numpy().astype(np.float64)
    assert reference.relative_error(dev["y"].cpu().numpy(), want) < 1e-5


def test_own_buffers_cupy_and_dlpack(handle: miocore.Handle, torch: Any) -> None:
    p = _problem()
    host, dev = _torch_tensors(torch, p)
    expected = reference.convolution(p, x=host["x"], w=host["w"])
    # miocore's own buffers
    own = {n: handle.backend.from_host(getattr(p, n), host[n]) for n in ("x", "w", "y")}
    handle.immediate(p, "direct.gpu_naive", **own)
    assert reference.relative_error(own["y"].to_host(), expected) < 2e-5
    # torch sees the own buffer through __cuda_array_interface__, without a copy
    if DEVICE == "cuda":
        view = torch.as_tensor(own["y"], device="cuda")
        assert view.data_ptr() == own["y"].ptr

    class DLPackOnly:
        def __init__(self, t: Any) -> None:
            self.t = t

        def __dlpack__(self, **kwargs: Any) -> Any:
            return self.t.__dlpack__(**kwargs)

        def __dlpack_device__(self) -> Any:
            return self.t.__dlpack_device__()

    wrapped = {n: DLPackOnly(t) for n, t in dev.items()}
    dev["y"].fill_(float("nan"))
    handle.immediate(p, "direct.gpu_naive", **wrapped)
    torch.cuda.synchronize()
    assert reference.relative_error(dev["y"].cpu().numpy(), expected) < 2e-5
    cupy = pytest.importorskip("cupy")
    cp = {n: cupy.asarray(t) for n, t in dev.items()}
    cp["y"].fill(float("nan"))
    handle.immediate(p, "direct.gpu_naive", **cp)
    cupy.cuda.runtime.deviceSynchronize()
    assert reference.relative_error(cupy.asnumpy(cp["y"]), expected) < 2e-5


def test_runs_on_the_given_stream(torch: Any) -> None:
    stream = torch.cuda.Stream()
    h = miocore.Handle(DEVICE, stream=stream)
    assert h.backend.stream_handle == stream.cuda_stream
    p = _problem()
    host, dev = _torch_tensors(torch, p)
    expected = reference.convolution(p, x=host["x"], w=host["w"])
    with torch.cuda.stream(stream):
        h.immediate(p, "direct.gpu_naive", **dev)
    stream.synchronize()
    assert reference.relative_error(dev["y"].cpu().numpy(), expected) < 2e-5
    h2 = miocore.Handle(DEVICE, stream=torch.cuda.current_stream())
    assert h2.backend.stream_handle == torch.cuda.current_stream().cuda_stream
    with pytest.raises(InvalidArgumentError) as info:
        miocore.Handle(DEVICE, stream="fast")
    assert info.value.field == "stream"


# -- bad inputs --


def test_bad_inputs_name_the_field(handle: miocore.Handle, torch: Any) -> None:
    p = _problem()
    _, dev = _torch_tensors(torch, p)
    name = "direct.gpu_naive"

    def fails(field: str, **override: Any) -> str:
        with pytest.raises(InvalidArgumentError) as info:
            handle.immediate(p, name, **{**dev, **override})
        assert info.value.field == field, str(info.value)
        return str(info.value)

    assert "cuda" in fails("x.device", x=dev["x"].cpu())
    assert "numpy" in fails("x.device", x=dev["x"].cpu().numpy())
    assert "float32" in fails("w.dtype", w=dev["w"].half())
    fails("y.shape", y=dev["y"][:1])
    transposed = dev["x"].transpose(2, 3)  # a non-contiguous view with the right shape
    fails("x.strides", x=transposed)
    fails("x.strides", x=dev["x"].contiguous(memory_format=torch.channels_last))
    with pytest.raises(InvalidArgumentError):
        handle.immediate(p, name, x=object(), w=dev["w"], y=dev["y"])


def test_too_small_workspace(handle: miocore.Handle, torch: Any) -> None:
    if "gemm.gpu_im2col" not in handle.registry:
        pytest.skip("the GEMM plugin is not installed")
    p = _problem()
    _, dev = _torch_tensors(torch, p)
    need = handle.get_solution_workspace_size(p, "gemm.gpu_im2col")
    assert need > 0
    handle.immediate(p, "gemm.gpu_im2col", **dev)  # none given: the handle allocates one
    small = torch.empty(need - 1, dtype=torch.uint8, device="cuda")
    with pytest.raises(miocore.WorkspaceError) as info:
        handle.immediate(p, "gemm.gpu_im2col", workspace=small, **dev)
    assert info.value.field == "workspace.nbytes"
    with pytest.raises(miocore.WorkspaceError):
        handle.immediate(p, "gemm.gpu_im2col", workspace=small.cpu(), **dev)
    ok = torch.empty(need, dtype=torch.uint8, device="cuda")
    handle.immediate(p, "gemm.gpu_im2col", workspace=ok, **dev)


# -- compile errors skip only the broken solver --


class _BrokenSolver(miocore.Solver):
    name = "test.broken_gpu"
    algorithm = miocore.Algorithm.DIRECT
    backends = frozenset({"cuda", "hip"})
    is_dynamic = True

    def is_applicable(self, ctx: Any, problem: Any) -> bool:
        return True

    def wti(self, ctx: Any, problem: Any) -> float:
        return 0.9  # tried first

    def get_solution(self, ctx: Any, problem: Any, perf_config: Any = None) -> Any:
        kernel = miocore.KernelInfo(source="broken/broken.cu", kernel_name="k", options=("-DX=1",))
        return miocore.ConvSolution(
            solver=self.name, workspace_size=0, invoker_factory=lambda c: None, kernels=(kernel,)
        )


def test_compile_error_shows_numbered_source_and_log(
    handle: miocore.Handle, tmp_path: Path
) -> None:
    from miocore.solver.hookspecs import KernelSourceRecord, hookimpl

    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "broken.cu").write_text(
        '#include "miocore_gpu.h"\nMIO_KERNEL void k(float* p) {\n  p[0] = undefined_name;\n}\n'
    )

    class Plugin:
        @hookimpl
        def miocore_solvers(self) -> Any:
            from miocore_direct.gpu import GpuNaiveDirectSolver

            yield miocore.SolverRecord(solver=_BrokenSolver())
            yield miocore.SolverRecord(solver=GpuNaiveDirectSolver())

        @hookimpl
        def miocore_kernel_sources(self) -> Any:
            from miocore_direct.gpu import KERNEL_DIR

            yield KernelSourceRecord(name="broken", path=folder)
            yield KernelSourceRecord(name="direct", path=KERNEL_DIR)

    pytest.importorskip("miocore_direct")
    registry = Registry.from_plugins([("broken", Plugin(), "test-broken", "0")])
    h = miocore.Handle(DEVICE, registry=registry)
    p = _problem()
    with pytest.raises(CompileError) as info:
        h.compile_solution(p, "test.broken_gpu")
    text = str(info.value)
    assert "3 |   p[0] = undefined_name;" in text
    assert "undefined_name" in text.split("--- compiler log ---", 1)[1]
    sols = h.find_solutions(p, find_mode="NORMAL")
    assert [s.solver for s in sols] == ["direct.gpu_naive"]
    assert "test.broken_gpu" in h.last_report.failed
    assert "CompileError" in h.last_report.failed["test.broken_gpu"]


# -- the binary cache across processes --

_CHILD = textwrap.dedent(
    """
    import json, sys, time
    import miocore
    h = miocore.Handle(sys.argv[1])
    p = miocore.ConvProblem.from_sizes("forward", n=1, c=4, k=4, in_spatial=(8, 8),
                                       filter_spatial=(3, 3), pads=(1, 1))
    start = time.perf_counter()
    sols = h.find_solutions(p, find_mode="NORMAL")
    elapsed = time.perf_counter() - start
    cache = h.backend.kernel_cache
    print(json.dumps({"compiled": h.backend.stats["compiled"],
                      "disk_hits": h.backend.stats["disk_hits"],
                      "entries": len(cache.entries()) if cache else 0,
                      "find_s": elapsed, "best": sols[0].solver}))
    """
)


def _child(tmp_path: Path, **env: str) -> dict:
    environment = {**os.environ, "MIOCORE_KERNEL_CACHE_PATH": str(tmp_path / "kcache"), **env}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, DEVICE],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_starts_warm(handle: miocore.Handle, tmp_path: Path) -> None:
    cold = _child(tmp_path, MIOCORE_USER_DB_PATH=str(tmp_path / "db1"))
    warm = _child(tmp_path, MIOCORE_USER_DB_PATH=str(tmp_path / "db2"))
    assert cold["compiled"] >= 1 and cold["entries"] >= 1
    assert warm["compiled"] == 0 and warm["disk_hits"] >= 1, warm
    # a damaged entry is set aside and rebuilt, never a crash
    for path in (tmp_path / "kcache").glob("*.bin"):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    healed = _child(tmp_path, MIOCORE_USER_DB_PATH=str(tmp_path / "db3"))
    assert healed["compiled"] >= 1
    off = _child(
        tmp_path,
        MIOCORE_USER_DB_PATH=str(tmp_path / "db4"),
        MIOCORE_DISABLE_CACHE="1",
        MIOCORE_KERNEL_CACHE_PATH=str(tmp_path / "never"),
    )
    assert off["compiled"] >= 1 and not (tmp_path / "never").exists()


def test_parallel_compile_level_is_checked(
    handle: miocore.Handle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIOCORE_COMPILE_PARALLEL_LEVEL", "0")
    with pytest.raises(miocore.InvalidEnvironmentError):
        handle.backend.precompile(
            [
                miocore.KernelInfo(
                    source="miocore/miocore_utility.cu",
                    kernel_name="miocore_fill",
                    options=("-DMIO_DTYPE_FP32", "-DPARALLEL_CHECK=1"),
                )
            ]
            * 2
            + [
                miocore.KernelInfo(
                    source="miocore/miocore_utility.cu",
                    kernel_name="miocore_fill",
                    options=("-DMIO_DTYPE_FP16", "-DPARALLEL_CHECK=1"),
                )
            ]
        )


def test_cli_conv_on_the_device(handle: miocore.Handle, tmp_path: Path) -> None:
    from miocore.cli import main

    code = main(
        [
            "conv",
            "--device",
            DEVICE,
            "-n",
            "2",
            "-c",
            "8",
            "-H",
            "9",
            "-W",
            "9",
            "-k",
            "8",
            "-y",
            "3",
            "-x",
            "3",
            "-p",
            "1",
            "-q",
            "1",
            "-F",
            "0",
            "-t",
            "1",
            "-V",
            "1",
            "--user-db-path",
            str(tmp_path),
        ]
    )
    assert code == 0
