"""The error of find's winner against the vendor library's on the same data, and what the
accuracy check costs find.

For each layer of a suite, each dtype and direction: random inputs (seeded) are made once;
miocore's NORMAL find in the ``default`` accuracy policy picks a solution, which runs on those
inputs; PyTorch runs the same convolution (cuDNN on a GPU, oneDNN on the CPU, TF32 off); both
are compared with PyTorch's float64 result on the same inputs. The error is
max|out - ref| / max|ref| (the measure find's own check uses). The ratio is miocore's error over
the vendor's (issue target: at most 2 in ``default``).

With ``--overhead``, each problem is also found twice more, each time with an empty user
database and the kernels already built: once with ``accuracy="fast"`` and once with
``"default"``; the ratio of their times is the cost of the check.

    python benchmarks/accuracy_vs_vendor.py --device cuda --suite resnet50 --out acc.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from common import geomean, machine
from shapes import SUITES, problem

import miocore
from miocore.torch.tensors import host_view

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _vendor(p: miocore.ConvProblem, t: dict[str, torch.Tensor], dtype: torch.dtype) -> Any:
    """The direction's result through PyTorch in ``dtype`` (float64 gives the reference)."""
    d = len(p.filter_spatial)
    conv = {2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[d]
    grad = torch.nn.grad
    kw = {
        "stride": p.conv.strides,
        "padding": p.conv.pads,
        "dilation": p.conv.dilations,
        "groups": p.conv.groups,
    }
    x, w, y = (t[n].to(dtype) for n in ("x", "w", "y"))
    name = p.direction.value
    if name == "forward":
        return conv(x, w, **kw)
    if name == "backward_data":
        fn = grad.conv2d_input if d == 2 else grad.conv3d_input
        return fn(x.shape, w, y, **kw)
    fn = grad.conv2d_weight if d == 2 else grad.conv3d_weight
    return fn(x, w.shape, y, **kw)


def _error(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return float((out.double() - ref).abs().max() / ref.abs().max())


def _tensors(p: miocore.ConvProblem, device: str, seed: int) -> dict[str, torch.Tensor]:
    """x, w, y in logical NC... order, values uniform in [-1, 1] rounded to the dtype."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    dtype = TORCH_DTYPES[p.dtype.value]
    out: dict[str, torch.Tensor] = {}
    for name, desc in (("x", p.x), ("w", p.w), ("y", p.y)):
        values = torch.rand(desc.lengths, generator=g, dtype=torch.float64) * 2 - 1
        t = values.to(dtype).to(device)
        if desc.layout.startswith("N") and desc.layout.endswith("C"):  # channels last
            fmt = torch.channels_last if len(desc.lengths) == 4 else torch.channels_last_3d
            t = t.contiguous(memory_format=fmt)
        out[name] = t
    return out


def _find_ms(device: str, p: miocore.ConvProblem, policy: str, stream: Any) -> float:
    with tempfile.TemporaryDirectory() as db:
        os.environ["MIOCORE_USER_DB_PATH"] = db
        h = miocore.Handle(device, stream=stream) if stream is not None else miocore.Handle(device)
        start = time.perf_counter()
        h.find_solutions(p, find_mode="NORMAL", accuracy=policy)
        if stream is not None:
            torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--suite", default="resnet50", choices=sorted(SUITES))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    parser.add_argument("--directions", default="forward,backward_data,backward_weights")
    parser.add_argument("--layers", type=int, default=0, help="first N layers only (0: all)")
    parser.add_argument("--names", default="", help="only these layers (comma-separated)")
    parser.add_argument("--overhead", action="store_true")
    parser.add_argument(
        "--overhead-every", type=int, default=1, help="time the check on every Nth layer only"
    )
    parser.add_argument("--rows", type=Path, default=None, help="append each row here (JSONL)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = args.device != "cpu"
    torch_device = "cuda" if gpu else "cpu"
    stream = torch.cuda.current_stream() if gpu else None
    layout = "NHWC" if gpu else "NCHW"
    user_db = tempfile.mkdtemp()
    os.environ["MIOCORE_USER_DB_PATH"] = user_db
    handle = miocore.Handle(args.device, stream=stream) if gpu else miocore.Handle("cpu")
    layers = SUITES[args.suite][: args.layers or None]
    if args.names:
        wanted = set(args.names.split(","))
        layers = [layer for layer in layers if layer.name in wanted]
    rows: list[dict[str, Any]] = []
    for index, layer in enumerate(layers):
        for dtype in args.dtypes.split(","):
            for direction in args.directions.split(","):
                p = problem(layer, args.batch, direction, dtype, layout)
                row: dict[str, Any] = {"layer": layer.name, "dtype": dtype, "dir": direction}
                try:
                    os.environ["MIOCORE_USER_DB_PATH"] = user_db
                    start = time.perf_counter()
                    found = handle.find_solutions(p, find_mode="NORMAL", accuracy="default")
                    row["first_find_ms"] = (time.perf_counter() - start) * 1e3
                    best = found[0]
                    t = _tensors(p, torch_device, seed=len(rows))
                    out_name = p.direction.output_tensor
                    mine = {n: v.clone() for n, v in t.items()}
                    mine[out_name].zero_()
                    arrays = mine if gpu else {n: host_view(v) for n, v in mine.items()}
                    handle.run_solution(best, **arrays)
                    ref = _vendor(p, t, torch.float64)
                    vendor = _vendor(p, t, TORCH_DTYPES[dtype])
                    if gpu:
                        torch.cuda.synchronize()
                    row.update(
                        solver=best.solver,
                        error=_error(mine[out_name], ref),
                        vendor_error=_error(vendor, ref),
                    )
                    row["ratio"] = row["error"] / max(row["vendor_error"], 1e-12)
                    if args.overhead and index % args.overhead_every == 0:
                        fast = _find_ms(args.device, p, "fast", stream)
                        checked = _find_ms(args.device, p, "default", stream)
                        row.update(find_fast_ms=fast, find_default_ms=checked)
                except Exception as exc:  # one failing problem must not end the run
                    row["failed"] = f"{type(exc).__name__}: {exc}"[:300]
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.rows is not None:
                    with args.rows.open("a") as f:
                        f.write(json.dumps(row) + "\n")
    summary: dict[str, Any] = {"machine": machine(), "device": args.device, "suite": args.suite}
    for dtype in args.dtypes.split(","):
        ok = [r for r in rows if r["dtype"] == dtype and "ratio" in r]
        if not ok:
            continue
        ratios = [r["ratio"] for r in ok]
        summary[dtype] = {
            "problems": len(ok),
            "ratio_geomean": geomean([max(x, 1e-3) for x in ratios]),
            "ratio_median": statistics.median(ratios),
            "ratio_max": max(ratios),
            "within_2x": sum(x <= 2 for x in ratios),
            "worst": max(ok, key=lambda r: r["ratio"]),
        }
        timed = [r for r in ok if "find_fast_ms" in r]
        if timed:
            fast = sum(r["find_fast_ms"] for r in timed)
            checked = sum(r["find_default_ms"] for r in timed)
            summary[dtype]["find_default_over_fast"] = checked / fast
    summary["failed"] = [r for r in rows if "failed" in r]
    print(json.dumps(summary, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
