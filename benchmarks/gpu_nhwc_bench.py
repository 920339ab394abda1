"""``gemm.gpu_nhwc`` (and its TF32 twin) against cuDNN on ResNet-50's layers, NHWC, with the
solver's alternative paths timed in the same run.

Per layer and direction: cuDNN through PyTorch (``cudnn.benchmark`` on, channels_last), then
the solver as shipped, each checked against cuDNN's output (max error / max |cuDNN|). Where the
solver has a second path for the problem, it is timed too:

* ``unpadded``: half-type rows not padded to 16 bytes (conv1: 147 wide, the scalar im2col);
* ``rows`` / ``strided``: 1x1 strided forward and backward data through one dense GEMM and
  the row kernel, or through strided-batched blocks in place (whichever the rule did not pick).

``--tf32`` adds the precision mode ``tf32``: cuDNN with TF32 on against ``gemm.gpu_nhwc_tf32``
(and the exact ``gemm.gpu_nhwc`` beside it). Timing is ``gpu_vs_cudnn.device_ms`` (launches
queued behind a sleep, events, median).

    python benchmarks/gpu_nhwc_bench.py --layers conv1 l4.down --out nhwc.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from common import config_runner, geomean
from gpu_vs_cudnn import DIRECTIONS, device_ms, set_precision, torch_call
from shapes import RESNET50, problem

import miocore

OUTPUT_INDEX = {"forward": None, "backward_data": 0, "backward_weights": 1}


@contextmanager
def variant(name: str) -> Iterator[None]:
    """Switch ``gemm.gpu_nhwc`` to one of its alternative paths while an invoker is built."""
    from miocore_gemm import gpu_nhwc, gpu_nhwc_geometry

    # group_width is called by the geometry's own helpers and (imported) by the invoker in
    # gpu_nhwc: both names are swapped. STRIDED_MIN_WIDTH is read by the geometry alone.
    patched = [
        (gpu_nhwc_geometry, "group_width"),
        (gpu_nhwc, "group_width"),
        (gpu_nhwc_geometry, "STRIDED_MIN_WIDTH"),
    ]
    saved = [(module, key, getattr(module, key)) for module, key in patched]
    if name == "unpadded":
        dims = gpu_nhwc_geometry.dims
        gpu_nhwc_geometry.group_width = gpu_nhwc.group_width = lambda p: dims(p)[1] * dims(p)[3]
    elif name == "rows":
        gpu_nhwc_geometry.STRIDED_MIN_WIDTH = 1 << 30
    elif name == "strided":
        gpu_nhwc_geometry.STRIDED_MIN_WIDTH = 1
    try:
        yield
    finally:
        for module, key, value in saved:
            setattr(module, key, value)


def alternatives(p: miocore.ConvProblem) -> list[str]:
    """The second paths that exist for this problem."""
    from miocore_gemm import gpu_nhwc_geometry

    canon = p.canonical
    out = []
    if gpu_nhwc_geometry.is_padded(canon):
        out.append("unpadded")
    if gpu_nhwc_geometry.is_strided_pointwise(canon):
        out.append("rows")
    else:
        with variant("strided"):
            if gpu_nhwc_geometry.is_strided_pointwise(canon):
                out.append("strided")
    return out


def measure(
    handle: miocore.Handle, solver: str, p: miocore.ConvProblem, tensors: dict, expected: Any,
    out_name: str, args: argparse.Namespace, path: str = "shipped",
) -> dict[str, Any]:  # fmt: skip
    """Time one solver path and check its output against cuDNN's."""
    try:
        with variant(path):
            run: Callable[[], None] = config_runner(
                handle, solver, p, None, tensors["x"], tensors["w"], tensors["y"]
            )
        tensors[out_name].fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        got = tensors[out_name].float()
        err = float((got - expected).abs().max()) / float(expected.abs().max())
        return {"ms": device_ms(run, args.warmup, args.runs), "rel_err": err}
    except Exception as exc:  # a failing path is recorded, the rest goes on
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def matmul_ms(p: miocore.ConvProblem, tdtype: Any, args: argparse.Namespace) -> float:
    """torch.matmul of forward's GEMM alone (rows N*O x group width, times width x K): what
    the solver pays beyond it is its row kernel."""
    from miocore_gemm import gpu_nhwc_geometry

    width = gpu_nhwc_geometry.group_width(p.canonical)
    rows = torch.randn(p.y.element_count // p.k, width, device="cuda", dtype=tdtype)
    weights = torch.randn(width, p.k, device="cuda", dtype=tdtype)
    return device_ms(lambda: torch.matmul(rows, weights), args.warmup, args.runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--dtypes", nargs="+", default=["float16"])
    parser.add_argument("--directions", nargs="+", default=list(DIRECTIONS))
    parser.add_argument("--tf32", action="store_true", help="also the tf32 precision mode")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    torch.backends.cudnn.benchmark = True
    stream = torch.cuda.current_stream()
    handles = {
        "exact": miocore.Handle("cuda", stream=stream),
        "tf32": miocore.Handle("cuda", stream=stream, math_mode="tf32"),
    }
    modes = list(args.dtypes) + (["tf32"] if args.tf32 else [])
    layers = [lay for lay in RESNET50 if not args.layers or lay.name in args.layers]
    rows: list[dict[str, Any]] = []
    for mode in modes:
        set_precision(mode)
        dtype = "float32" if mode == "tf32" else mode
        tdtype = getattr(torch, dtype)
        for layer in layers:
            for direction in args.directions:
                p = problem(layer, args.batch, direction, dtype=dtype, layout="NHWC")
                # Fresh inputs per direction: outputs written in place are never reused as
                # inputs (a correlated x and dy overflow fp16 dW in conv1).
                tensors = {
                    name: torch.randn(getattr(p, name).lengths, device="cuda", dtype=tdtype)
                    .mul_(0.05 if name == "w" else 1.0)
                    .contiguous(memory_format=torch.channels_last)
                    for name in ("x", "w", "y")
                }
                out_name = p.direction.output_tensor
                cudnn = torch_call(direction, layer, tensors["x"], tensors["w"], tensors["y"])
                index = OUTPUT_INDEX[direction]
                result = cudnn()
                expected = (result if index is None else result[index]).float()
                row: dict[str, Any] = {
                    "layer": layer.name, "precision": mode, "direction": direction,
                    "cudnn_ms": device_ms(cudnn, args.warmup, args.runs),
                }  # fmt: skip
                solvers = ["gemm.gpu_nhwc"] + (["gemm.gpu_nhwc_tf32"] if mode == "tf32" else [])
                for solver in solvers:
                    handle = handles["tf32" if solver.endswith("tf32") else "exact"]
                    paths = ["shipped"] + (alternatives(p) if solver == "gemm.gpu_nhwc" else [])
                    for path in paths:
                        got = measure(handle, solver, p, tensors, expected, out_name, args, path)
                        if "ms" in got:
                            got["ratio"] = row["cudnn_ms"] / got["ms"]
                        row[f"{solver}:{path}"] = got
                if direction == "forward" and p.groups == 1:
                    row["matmul_ms"] = matmul_ms(p, tdtype, args)
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary: dict[str, Any] = {}
    for mode in modes:
        for key in sorted({k for r in rows for k in r if ":" in k}):
            ratios = [
                r[key]["ratio"]
                for r in rows
                if r["precision"] == mode and "ratio" in r.get(key, {})
            ]
            if ratios:
                summary[f"{mode} {key}"] = {"geomean": geomean(ratios), "cases": len(ratios)}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
