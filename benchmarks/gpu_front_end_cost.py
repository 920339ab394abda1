"""Where a real network's host time goes through ``miocore.torch`` on a GPU.

A torchvision model (default ResNet-50, batch 32, channels-last) is converted and found ahead
(``prepare(backward=True)``); then, with the GPU held busy by a queued ``torch.cuda._sleep``
(so the host never waits for the device), the host wall time of one inference and of one
training step (forward, backward, no optimizer) is taken for the converted model and for the
same model on cuDNN, with each one's device time (CUDA events, GPU not held). A network whose
host time exceeds its device time is host-bound: the GPU waits for Python.

Then the per-call host cost of one convolution layer, peeled layer by layer: the module call,
``miocore.torch``'s op body (``ops.forward``), the shared runtime's ``run``, the prepared run
alone, and the solution's invoker alone; and a cProfile of the converted model's inference
and training step (top functions by own time) to name the costs.

    python benchmarks/gpu_front_end_cost.py --model resnet50 --dtype float16 --out cost.json
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import miocore.torch as mt

sys.path.insert(0, str(Path(__file__).parent))
from gpu_timing import LONG_SLEEP_CYCLES, device_ms, host_ms, inference, training_step

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def profile_text(fn: Any, calls: int, top: int = 35) -> str:
    """cProfile of ``calls`` calls of ``fn``: the top functions by own time."""
    torch.cuda._sleep(LONG_SLEEP_CYCLES)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def ablations(ref: nn.Module, mio: nn.Module, step: Any, infer: Any) -> dict[str, float]:
    """Wall time per call (events, nothing held) of the training step and the inference with
    parts of miocore's convolution call taken out: what each part costs in a real network.

    ``full``: as shipped (repeated address triples replay recorded graphs); ``no_graphs``: no
    graph kept or recorded, every call runs its invoker; ``no_launch``: no graphs and the
    invokers do nothing; ``no_run``: the front end runs, the prepared runs do nothing.
    Results are garbage in the last two; only the time is read."""
    from miocore.find import prepared as prepared_module
    from miocore.find.prepared import PreparedRun
    from miocore.torch import runtime

    runs = [run for state in runtime._handles.values() for run in state.runs.values()]
    out: dict[str, float] = {}

    def timed(label: str) -> None:
        mio.train()
        out[f"train_{label}_ms"] = device_ms(step(mio))
        mio.eval()
        out[f"infer_{label}_ms"] = device_ms(infer(mio))

    timed("full")
    limit = prepared_module.MAX_GRAPH_FAILURES
    prepared_module.MAX_GRAPH_FAILURES = 0  # nothing recorded from here on
    kept = [dict(run._graphs) for run in runs]
    for run in runs:
        run._graphs.clear()
    invoke, ats = PreparedRun._invoke, [run._at for run in runs]
    run_at = PreparedRun.run_at
    try:
        timed("no_graphs")
        PreparedRun._invoke = lambda *a, **k: None  # type: ignore[method-assign]
        for run in runs:
            if run._at is not None:
                run._at = lambda *a: None
        timed("no_launch")
        PreparedRun.run_at = lambda *a, **k: None  # type: ignore[method-assign]
        timed("no_run")
    finally:
        PreparedRun._invoke = invoke  # type: ignore[method-assign]
        PreparedRun.run_at = run_at  # type: ignore[method-assign]
        prepared_module.MAX_GRAPH_FAILURES = limit
        for run, at, graphs in zip(runs, ats, kept, strict=True):
            run._at = at
            run._graphs.update(graphs)
    ref.train()
    out["cudnn_train_ms"] = device_ms(step(ref))
    ref.eval()
    out["cudnn_infer_ms"] = device_ms(infer(ref))
    timed("full_again")  # the machine's drift over the ablations
    return out


def unplanned_calls(fn: Any) -> dict[str, int]:
    """Calls of one ``fn`` that missed the front end's plans (packed a tensor, or a new
    signature), per direction: each costs the slow path."""
    from miocore.torch import ops

    counts: dict[str, int] = {}
    slow = ops._run

    def counting(direction: str, *args: Any, **kwargs: Any) -> Any:
        counts[direction] = counts.get(direction, 0) + 1
        return slow(direction, *args, **kwargs)

    ops._run = counting
    try:
        fn()
        torch.cuda.synchronize()
    finally:
        ops._run = slow
    return counts


def kernel_table(fn: Any, top: int = 30) -> str:
    """The device kernels of one call of ``fn`` (after warm-up), by total device time."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return prof.key_averages().table(
        sort_by="cuda_time_total", row_limit=top, max_name_column_width=90
    )


def layer_costs(model: nn.Module, x: torch.Tensor, limit: int) -> list[dict[str, Any]]:
    """Per-call host cost (µs) of the first ``limit`` distinct forward layers."""
    seen: list[tuple[nn.Module, torch.Tensor]] = []
    hooks = [
        m.register_forward_hook(lambda mod, args, out: seen.append((mod, args[0])))
        for m in model.modules()
        if isinstance(m, nn.modules.conv._ConvNd)
    ]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    rows, done = [], set()
    for mod, inp in seen:
        if len(rows) >= limit:
            break
        key = (tuple(inp.shape), tuple(mod.weight.shape), mod.stride, mod.groups)
        if key not in done:
            done.add(key)
            try:
                rows.append(peel(mod, inp))
            except Exception as exc:  # one layer's failure leaves the others measured
                rows.append({"x": list(inp.shape), "error": f"{type(exc).__name__}: {exc}"})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def peel(mod: nn.Module, inp: torch.Tensor) -> dict[str, Any]:
    """One forward layer's per-call host cost (µs) at each level of the call."""
    from miocore.torch import ops, runtime

    params = ops.make_params(mod.stride, mod.padding, mod.dilation, mod.groups, False, (0, 0))
    w = mod.weight.detach()
    y = ops.forward(inp, w, params)
    plan = next(
        p
        for sig, p in ops._plans.items()
        if sig[:3] == ("forward", params, inp.shape) and sig[4] == w.shape
    )
    state = runtime.handle_state(inp.device, runtime.math_mode(inp.device))
    prepared = state.runs[plan.key]
    invoker, owner, ip = prepared._invoker, prepared._owner, prepared._params

    def conv2d() -> Any:
        return F.conv2d(inp, w, None, mod.stride, mod.padding, mod.dilation, mod.groups)

    with torch.no_grad():
        return {
            "x": list(inp.shape),
            "w": list(w.shape),
            "solver": prepared.solver,
            "device_us": device_ms(lambda: mod(inp)) * 1e3,
            "module_us": host_ms(lambda: mod(inp), 200) * 1e3,
            "op_body_us": host_ms(lambda: ops.forward(inp, w, params), 200) * 1e3,
            "runtime_run_us": host_ms(
                lambda: runtime.run(inp.device, plan.key, plan.problem, x=inp, w=w, y=y), 200
            )
            * 1e3,
            "prepared_us": host_ms(lambda: prepared(x=inp, w=w, y=y), 200) * 1e3,
            "invoker_us": None if ip is None else host_ms(lambda: invoker(owner, ip), 200) * 1e3,
            "torch_empty_us": host_ms(lambda: torch.empty_like(y), 200) * 1e3,
            "cudnn_F_conv2d_us": host_ms(conv2d, 200) * 1e3,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--layers", type=int, default=6, help="distinct layers peeled")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--kernels-only", action="store_true", help="skip profiles and peeling")
    args = parser.parse_args()
    import torchvision

    torch.backends.cudnn.benchmark = True
    dtype = DTYPES[args.dtype]
    ref = getattr(torchvision.models, args.model)()
    ref = ref.to("cuda", dtype=dtype, memory_format=torch.channels_last)
    mio = mt.convert(copy.deepcopy(ref))
    x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=dtype)
    x = x.to(memory_format=torch.channels_last)
    start = time.perf_counter()
    mt.prepare(mio, x, backward=True, progress=False)
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "model": args.model,
        "dtype": args.dtype,
        "first_find_s": time.perf_counter() - start,
    }

    def infer(m: nn.Module) -> Any:
        return inference(m, x)

    def step(m: nn.Module) -> Any:
        return training_step(m, x)

    for side, m in (("cudnn", ref), ("miocore", mio)):
        m.eval()
        result[f"{side}_infer_host_ms"] = host_ms(infer(m), 3)
        result[f"{side}_infer_device_ms"] = device_ms(infer(m))
        m.train()
        result[f"{side}_train_host_ms"] = host_ms(step(m), 1)
        result[f"{side}_train_device_ms"] = device_ms(step(m))
    result["unplanned_calls_per_step"] = unplanned_calls(step(mio))
    result["ablations"] = ablations(ref, mio, step, infer)
    print(json.dumps(result), flush=True)
    for side, m in (("cudnn", ref), ("miocore", mio)):
        m.train()
        result[f"kernels_train_{side}"] = kernel_table(step(m))
        print(result[f"kernels_train_{side}"], flush=True)
    if args.kernels_only:
        if args.out:
            args.out.write_text(json.dumps(result, indent=1))
        return
    mio.eval()
    result["profile_infer"] = profile_text(infer(mio), 3)
    mio.train()
    with torch.autograd.set_multithreading_enabled(False):  # backward on this thread: profiled
        result["profile_train"] = profile_text(step(mio), 1)
    print(result["profile_infer"][:6000])
    print(result["profile_train"][:6000])
    mio.eval()
    result["layers"] = layer_costs(mio, x, args.layers)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
