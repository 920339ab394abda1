"""Does a manual CUDA-graph capture of a model work after ``torch.compile(mode="reduce-overhead")``
ran the same model in the same process?

In one run of ``gpu_models.py`` (twelfth session) the manual capture failed with
``cudaErrorStreamCaptureInvalidated`` after the reduce-overhead rows, on one of the two sides.
This script takes each side alone (the model on cuDNN, then the miocore-converted copy): the
compiled model's calls (cudagraph trees record and replay), then ``torch.cuda.graph`` of the
eager model, inference first, then a training step; each step's outcome and, on failure, the
exception's last lines are printed as JSON.

    python benchmarks/gpu_capture_after_compile.py --model resnet50 --batch 8
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

import miocore.torch as mt

sys.path.insert(0, str(Path(__file__).parent))


def attempt(label: str, fn: Any) -> dict[str, Any]:
    """Run ``fn``; its outcome (and the error's last lines) as a row."""
    try:
        fn()
        torch.cuda.synchronize()
        row: dict[str, Any] = {"step": label, "ok": True}
    except Exception as exc:  # the point is to see which step fails and how
        lines = traceback.format_exception(exc)
        row = {"step": label, "ok": False, "error": "".join(lines[-6:])[-1500:]}
        try:
            torch.cuda.synchronize()
        except Exception as sync_exc:
            row["sync_after"] = f"{type(sync_exc).__name__}: {sync_exc}"[:300]
    print(json.dumps(row), flush=True)
    return row


def manual_capture(model: torch.nn.Module, x: torch.Tensor, train: bool) -> None:
    """Warm up on a side stream, then capture one call of ``model`` in a CUDA graph and
    replay it twice."""
    from gpu_models import graphed

    def call() -> None:
        if train:
            model.zero_grad(set_to_none=False)
            model(x).float().sum().backward()
        else:
            with torch.no_grad():
                model(x)

    replay = graphed(call)
    replay()
    replay()


def side_rows(side: str, model: torch.nn.Module, x: torch.Tensor) -> list[dict[str, Any]]:
    rows = []
    compiled = torch.compile(model, mode="reduce-overhead")
    model.eval()

    def compiled_infer() -> None:
        with torch.no_grad():
            for _ in range(4):
                compiled(x)

    rows.append(attempt(f"{side}: reduce-overhead inference", compiled_infer))
    for train in (False, True):
        model.train(train)
        label = f"{side}: manual capture, {'training' if train else 'inference'}"
        rows.append(attempt(label, lambda train=train: manual_capture(model, x, train)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--sides", nargs="+", default=["cudnn", "miocore"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from gpu_models import build

    torch.backends.cudnn.benchmark = True
    model, shape = build(args.model)
    shape = (args.batch, *shape[1:])
    ref = model.cuda().half().to(memory_format=torch.channels_last)
    x = torch.randn(*shape, device="cuda", dtype=torch.float16)
    x = x.to(memory_format=torch.channels_last)
    rows = []
    for side in args.sides:
        m = copy.deepcopy(ref)
        if side == "miocore":
            m = mt.convert(m)
            mt.prepare(m, x, backward=True, progress=False)
        rows += side_rows(side, m, x)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
