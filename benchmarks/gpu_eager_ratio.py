"""Eager whole-network time through ``miocore.torch`` against the same model on cuDNN, both
timed in one process in alternating rounds, so a noisy host moves both sides alike.

Each model (``gpu_models.build``: torchvision at batch 32, or the small UNet at 8 x 256²;
channels-last) is converted and found ahead
(``prepare(backward=True)``); then ``--rounds`` rounds each time cuDNN's and miocore's
inference and training step (forward, backward; CUDA events around one call, nothing held, so
host time counts where the host is late) and the median ratio cuDNN / miocore is printed.

    python benchmarks/gpu_eager_ratio.py --models resnet50 mobilenet_v3_large --dtype float16
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

import miocore.torch as mt

sys.path.insert(0, str(Path(__file__).parent))
from gpu_timing import device_ms, inference, training_step


def model_rows(name: str, dtype: torch.dtype, rounds: int) -> dict[str, Any]:
    """Median over rounds of each side's inference and training-step time, and the ratios."""
    from gpu_models import build

    torch.backends.cudnn.benchmark = True
    model, shape = build(name)
    ref = model.cuda().to(dtype).to(memory_format=torch.channels_last)
    mio = mt.convert(copy.deepcopy(ref))
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    x = x.to(memory_format=torch.channels_last)
    start = time.perf_counter()
    mt.prepare(mio, x, backward=True, progress=False)
    first_find_s = time.perf_counter() - start

    def infer(m: nn.Module) -> Any:
        return inference(m, x)

    def step(m: nn.Module) -> Any:
        return training_step(m, x)

    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        for side, m in (("cudnn", ref), ("miocore", mio)):
            m.eval()
            times.setdefault(f"{side}_infer_ms", []).append(device_ms(infer(m), iters=20))
            m.train()
            times.setdefault(f"{side}_train_ms", []).append(device_ms(step(m), iters=10))
    row: dict[str, Any] = {k: round(statistics.median(v), 3) for k, v in times.items()}
    row["first_find_s"] = round(first_find_s, 1)
    for kind in ("infer", "train"):
        row[f"{kind}_ratio"] = round(row[f"cudnn_{kind}_ms"] / row[f"miocore_{kind}_ms"], 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50"])
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "dtype": args.dtype}
    for name in args.models:
        result[name] = model_rows(name, getattr(torch, args.dtype), args.rounds)
        print(name, json.dumps(result[name]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
