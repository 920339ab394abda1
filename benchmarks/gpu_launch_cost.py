"""The host cost of each step of one convolution call through ``miocore.torch`` on a GPU, and
of the driver primitives under it, through cuda-bindings and through ctypes.

Every figure is host µs per call with the GPU held busy (no call waits for the device), all
in one process on one machine, so they compare with each other:

- the layer: ``F.conv2d`` (cuDNN, benchmark mode), the converted module, ``ops.forward``,
  ``runtime.run``, ``PreparedRun.run_at``, the kept graph's ``replay``;
- the pieces of ``runtime.run``: the determinism, TF32 and current-stream reads, the handle
  lookup, ``torch.empty`` of the output, three ``data_ptr`` reads;
- the driver: ``cuStreamIsCapturing`` and ``cuGraphLaunch`` (a one-kernel graph) and
  ``cuLaunchKernel`` (one small kernel) through cuda-bindings as the backend calls them, and
  the same entry points through ``ctypes`` on ``libcuda``.

    python benchmarks/gpu_launch_cost.py --out launch_cost.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import miocore.torch as mt

sys.path.insert(0, str(Path(__file__).parent))
from gpu_timing import host_ms

CALLS = 400


def us(fn: Any) -> float:
    """Host µs per call of ``fn``."""
    return round(host_ms(fn, CALLS) * 1e3, 2)


def driver_rows(backend: Any) -> dict[str, float]:
    """The driver primitives through cuda-bindings (as the backend calls them) and ctypes."""
    from miocore.backends._gpu.launch import KernelArgs

    driver = backend.driver
    stream = backend.stream_object
    spin = backend._spin()
    args = KernelArgs([("i64", 0)])
    graph = backend.capture(lambda: spin.launch(args, grid=(1,), block=(1,)), min_nodes=1)
    lib = ctypes.CDLL("libcuda.so.1")
    c_launch_graph = lib.cuGraphLaunch
    c_launch_graph.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    c_launch_graph.restype = ctypes.c_int
    c_capturing = lib.cuStreamIsCapturing
    c_capturing.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    c_capturing.restype = ctypes.c_int
    c_launch = lib.cuLaunchKernel
    c_launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    c_launch.restype = ctypes.c_int
    status = ctypes.c_int(0)
    status_at = ctypes.addressof(status)
    raw_stream = int(stream)
    function = int(spin.function)
    table = args.address

    def c_capture_check() -> bool:
        c_capturing(raw_stream, status_at)
        return status.value != 0

    rows = {
        "bindings_is_capturing": us(lambda: driver.is_capturing(stream)),
        "ctypes_is_capturing": us(c_capture_check),
        "torch_is_current_stream_capturing": us(torch.cuda.is_current_stream_capturing),
        "bindings_launch_kernel": us(lambda: spin.launch(args, grid=(1,), block=(1,))),
        "ctypes_launch_kernel": us(
            lambda: c_launch(function, 1, 1, 1, 1, 1, 1, 0, raw_stream, table, None)
        ),
    }
    executable = getattr(graph, "executable", None)
    if executable is not None:
        raw_exec = int(executable)
        rows.update(
            bindings_graph_launch=us(lambda: driver.graph_launch(executable, stream)),
            ctypes_graph_launch=us(lambda: c_launch_graph(raw_exec, raw_stream)),
            graph_replay=us(graph.replay),
        )
    torch.cuda.synchronize()
    return rows


def layer_rows(dtype: torch.dtype) -> dict[str, Any]:
    """One ResNet-50 3x3 layer (64 channels, 56x56, batch 32, channels-last) at each level."""
    from miocore.torch import ops, runtime

    torch.backends.cudnn.benchmark = True
    conv = mt.Conv2d(64, 64, 3, padding=1, bias=False).cuda().to(dtype)
    conv = conv.to(memory_format=torch.channels_last)
    x = torch.randn(32, 64, 56, 56, device="cuda", dtype=dtype)
    x = x.to(memory_format=torch.channels_last)
    w = conv.weight.detach()
    params = ops.make_params((1, 1), (1, 1), (1, 1), 1, False, (0, 0))
    with torch.no_grad():
        y = conv(x)
        conv(x)
    plan = next(p for p in ops._plans.values() if p.key[0] == "forward")
    device = x.device
    mode = runtime.math_mode(device)
    state = runtime.handle_state(device, mode)
    prepared = state.runs[plan.key]
    pointers = (x.data_ptr(), w.data_ptr(), y.data_ptr())
    for _ in range(3):
        prepared.run_at(*pointers)
    torch.cuda.synchronize()
    graph = prepared._graphs.get(pointers)
    rows: dict[str, Any] = {"solver": prepared.solver, "graph_kept": graph is not None}
    with torch.no_grad():
        rows.update(
            F_conv2d=us(lambda: F.conv2d(x, w, None, 1, 1)),
            module=us(lambda: conv(x)),
            ops_forward=us(lambda: ops.forward(x, w, params)),
            runtime_run=us(lambda: runtime.run(device, plan.key, plan.problem, x=x, w=w, y=y)),
            run_at=us(lambda: prepared.run_at(*pointers)),
            torch_empty=us(
                lambda: torch.empty(
                    plan.shape, dtype=dtype, device=device, memory_format=plan.format
                )
            ),
            new_empty_strided=us(
                lambda: x.new_empty_strided(plan.shape, getattr(plan, "strides", y.stride()))
            ),
            data_ptr_x3=us(lambda: (x.data_ptr(), w.data_ptr(), y.data_ptr())),
            deterministic_read=us(torch.are_deterministic_algorithms_enabled),
            math_mode=us(lambda: runtime.math_mode(device)),
            handle_state=us(lambda: runtime.handle_state(device, mode)),
            x_shape_stride=us(lambda: (x.shape, x.stride(), x.dtype, x.device)),
        )
    if graph is not None:
        rows["graph_replay"] = us(graph.replay)
    rows["driver"] = driver_rows(state.handle.backend)
    return rows


def graph_cache_rows(dtype: torch.dtype, passes: int = 5) -> dict[str, Any]:
    """How the prepared runs' graph caches behave in a network: ResNet-50 inference and
    training steps repeated, then ``passes`` more of each counted: calls, graph records,
    replays, and the distinct address triples each prepared run saw."""
    import torchvision

    from miocore.find import prepared as prepared_module

    model = torchvision.models.resnet50().cuda().to(dtype).to(memory_format=torch.channels_last)
    model = mt.convert(model)
    x = torch.randn(32, 3, 224, 224, device="cuda", dtype=dtype)
    x = x.to(memory_format=torch.channels_last)
    mt.prepare(model, x, backward=True, progress=False)
    cls = prepared_module.PreparedRun
    real_run_at, real_record = cls.run_at, cls._record_at
    seen: dict[int, list[tuple[int, int, int]]] = {}
    counts = {"records": 0}

    def run_at(self: Any, x: int, w: int, y: int) -> None:
        seen.setdefault(id(self), []).append((x, w, y))
        real_run_at(self, x, w, y)

    def record(self: Any, pointers: Any) -> bool:
        counts["records"] += 1
        return real_record(self, pointers)

    def infer() -> None:
        with torch.no_grad():
            model(x)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(x).float().sum().backward()

    out: dict[str, Any] = {}
    for label, fn, mode in (("infer", infer, model.eval), ("train", step, model.train)):
        mode()
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        seen.clear()
        counts["records"] = 0
        cls.run_at, cls._record_at = run_at, record
        try:
            for _ in range(passes):
                fn()
            torch.cuda.synchronize()
        finally:
            cls.run_at, cls._record_at = real_run_at, real_record
        calls = sum(len(v) for v in seen.values())
        out[label] = {
            "calls_per_pass": calls / passes,
            "records_per_pass": counts["records"] / passes,
            "prepared_runs": len(seen),
            "most_triples_in_one_run": max(len(set(v)) for v in seen.values()),
            "distinct_triples_per_pass": sum(len(set(v)) for v in seen.values()),
        }
        out[f"{label}_ms"] = round(host_ms(fn, 1) if label == "train" else host_ms(fn, 3), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--network", action="store_true", help="also ResNet-50's graph caches")
    parser.add_argument(
        "--bigger-caches", action="store_true", help="and again with 256 graphs per run"
    )
    args = parser.parse_args()
    result = {
        "device": torch.cuda.get_device_name(),
        "dtype": args.dtype,
        **layer_rows(getattr(torch, args.dtype)),
    }
    if args.network:
        result["graph_cache"] = graph_cache_rows(getattr(torch, args.dtype))
        if args.bigger_caches:
            from miocore.find import prepared as prepared_module

            prepared_module.MAX_GRAPHS, prepared_module.MAX_SEEN = 256, 1024
            result["graph_cache_bigger"] = graph_cache_rows(getattr(torch, args.dtype))
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
