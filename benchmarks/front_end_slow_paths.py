"""Which convolution calls of a converted network miss the front end's per-call plan.

``miocore.torch`` plans each call signature on first sight (``miocore.torch.ops``); a call
whose inputs needed a copy, or whose signature keeps changing, goes through the full path
(packing, checks, allocation) every time: 15-25 µs of host time more per call. This converts
torchvision models (and the benchmarks' small UNet), runs a few inference passes and
training steps, and counts, after the first of each, the calls that still took the full
path, with their direction and the strides of the tensors that led them there.

    python benchmarks/front_end_slow_paths.py --models efficientnet_b0 mobilenet_v3_large \
        --device cuda --dtype float16
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

import miocore.torch as mt
from miocore.torch import ops


def slow_calls(model: torch.nn.Module, x: torch.Tensor, passes: int) -> dict[str, Any]:
    """Full-path calls per pass after the first: inference, then training steps."""
    seen: collections.Counter[str] = collections.Counter()
    original = ops._run

    def counting(direction: str, lead: torch.Tensor, tensors: dict, *args: Any) -> Any:
        shapes = {n: (tuple(t.shape), t.stride()) for n, t in tensors.items()}
        seen[json.dumps([direction, shapes])] += 1
        return original(direction, lead, tensors, *args)

    ops._run = counting
    try:
        out: dict[str, Any] = {}
        for mode in ("infer", "train"):
            model.train(mode == "train")
            for step in range(passes + 1):
                if step == 1:
                    seen.clear()
                if mode == "infer":
                    with torch.no_grad():
                        model(x)
                else:
                    model(x).float().square().mean().backward()
            out[mode] = {
                "slow_calls_per_pass": sum(seen.values()) / passes,
                "examples": [(k, n / passes) for k, n in seen.most_common(8)],
            }
        return out
    finally:
        ops._run = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["efficientnet_b0"])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("MIOCORE_FIND_MODE", "FAST")  # the plan, not the find, is measured
    from gpu_models import build

    for name in args.models:
        model, shape = build(name)
        model = mt.convert(model).to(args.device, getattr(torch, args.dtype))
        model = model.to(memory_format=torch.channels_last)
        x = torch.randn((args.batch, *shape[1:]), device=args.device, dtype=model_dtype(model))
        x = x.contiguous(memory_format=torch.channels_last)
        result = slow_calls(model, x, args.passes)
        print(json.dumps({"model": name, **result}), flush=True)


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


if __name__ == "__main__":
    main()
