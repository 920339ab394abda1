"""Where ``gemm.gpu_nhwc``'s time goes: its row kernel alone against the whole invoker, per
ResNet-50 layer and direction (NHWC, device time behind a queued sleep, median).

The row kernel is the one the invoker launches for the problem (im2col_cl, im2col_cl_tiles
for padded rows, or the flipped twin's im2col in stride-1 backward data; col2im_cl in the
other backward data); the difference to the whole is the BLAS call and the small filter
copies. Bytes over the kernel's time give its achieved bandwidth.

    python benchmarks/gpu_nhwc_pieces.py --layers conv1 l1.3x3 --dtype float16
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from gpu_vs_cudnn import DIRECTIONS, device_ms
from shapes import RESNET50, problem

import miocore


def measure(handle: miocore.Handle, p: miocore.ConvProblem, args: argparse.Namespace) -> dict:
    """The whole invoker's time and, where it builds rows, its row kernel's alone."""
    from miocore_gemm import gpu_nhwc_geometry

    solver = handle.registry.get("gemm.gpu_nhwc").solver
    tdtype = getattr(torch, args.dtype)
    sol = solver.get_solution(handle.context, p)
    inv: Any = sol.invoker_factory(handle.backend.compile(sol.kernels))
    tensors = {
        name: torch.randn(getattr(p, name).lengths, device="cuda", dtype=tdtype).contiguous(
            memory_format=torch.channels_last
        )
        for name in ("x", "w", "y")
    }
    ws = handle.backend.allocate_workspace(max(sol.workspace_size, 1))
    views = {
        name: handle.backend.check_array(getattr(p, name), t, name) for name, t in tensors.items()
    }
    params = miocore.InvokeParams(problem=p, workspace=ws, **views)
    row: dict[str, Any] = {
        "whole_ms": device_ms(lambda: inv(handle, params), args.warmup, args.runs)
    }
    geometry = inv.geometry
    builds_rows = p.direction is not miocore.Direction.BACKWARD_DATA or inv.flipped  # else col2im
    if builds_rows and gpu_nhwc_geometry.row_bytes(geometry) and len(inv.chunks) == 1:
        _, _, kargs, grids = inv.chunks[0]
        # The row kernel reads x (dY for the flipped twin) and writes the rows.
        source = params.y.ptr if inv.flipped else params.x.ptr
        row["rows_ms"] = device_ms(
            lambda: inv._rows(source, params.workspace.ptr, kargs, grids), args.warmup, args.runs
        )
        nbytes = gpu_nhwc_geometry.row_bytes(geometry) * geometry.n
        row["rows_mb"] = nbytes / 1e6
        row["rows_gbps"] = nbytes / row["rows_ms"] / 1e6
        row["kernel"] = "tiles" if inv.padded else "im2col"
    elif not builds_rows and gpu_nhwc_geometry.row_bytes(geometry) and len(inv.chunks) == 1:
        _, _, kargs, grids = inv.chunks[0]
        kargs.set_pointers(params.workspace.ptr, params.x.ptr)
        row["col2im_ms"] = device_ms(
            lambda: inv.col2im.launch(kargs, grid=grids["col2im"]), args.warmup, args.runs
        )
        # It reads the rows once and writes dx once.
        nbytes = (
            gpu_nhwc_geometry.row_bytes(geometry) * geometry.n
            + p.x.element_count * p.dtype.itemsize
        )
        row["col2im_gbps"] = nbytes / row["col2im_ms"] / 1e6
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--directions", nargs="+", default=list(DIRECTIONS))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()

    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    for layer in RESNET50:
        if args.layers and layer.name not in args.layers:
            continue
        for direction in args.directions:
            p = problem(layer, args.batch, direction, dtype=args.dtype, layout="NHWC").canonical
            row = {"layer": layer.name, "direction": direction, **measure(handle, p, args)}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
