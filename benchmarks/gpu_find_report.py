"""Why a find chose what it chose: the ranked results and the left-out solvers of a few
problems, under each accuracy policy, next to PyTorch's own cuDNN call on the same tensors.

The problems are the layers a model run (``gpu_models.py``) showed miocore losing on; each is
found in NORMAL mode with an empty database, then every policy's winner and PyTorch's
``F.conv2d`` (cuDNN, benchmark mode) are timed on the GPU behind a queued sleep.

``--switches`` repeats every find under each combination of miocore-cudnn's opt-in switches
(``rc``: ``MIOCORE_CUDNN_RUNTIME_COMPILED``, ``rp``: ``MIOCORE_CUDNN_REDUCED_PRECISION``), each
with a fresh database and the plugin's plan cache emptied, and records the find's wall time
(what run-time compilation adds to a first find).

    python benchmarks/gpu_find_report.py --switches none rc rp rc+rp --out report.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import miocore

sys.path.insert(0, str(Path(__file__).parent))
from gpu_timing import queued_device_ms

#: name: (x shape, w shape, stride, padding, groups): NCHW sizes, run channels-last.
PROBLEMS = {
    "convnext_dw7x7": ((32, 96, 56, 56), (96, 1, 7, 7), 1, 3, 96),
    "resnet50_stem": ((32, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1),
    "mobilenet_dw3x3": ((32, 16, 112, 112), (16, 1, 3, 3), 1, 1, 16),
    "mobilenet_dw5x5_s2": ((32, 72, 56, 56), (72, 1, 5, 5), 2, 2, 72),
}


SWITCHES = {"rc": "MIOCORE_CUDNN_RUNTIME_COMPILED", "rp": "MIOCORE_CUDNN_REDUCED_PRECISION"}


def set_switches(combo: str) -> None:
    """Turn miocore-cudnn's switches named in ``combo`` on (``none``, ``rc``, ``rc+rp``...)
    and the others off; its cached plans go, so the next find asks cuDNN again."""
    wanted = set() if combo == "none" else set(combo.split("+"))
    for short, variable in SWITCHES.items():
        os.environ[variable] = "1" if short in wanted else "0"
    try:
        from miocore_cudnn._plans import clear_cache
    except ImportError:
        return
    clear_cache()


def report(name: str, dtype: torch.dtype, policies: list[str]) -> dict[str, Any]:
    xs, ws, stride, pad, groups = PROBLEMS[name]
    x = torch.randn(xs, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    w = torch.randn(ws, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    y = F.conv2d(x, w, None, stride, pad, 1, groups)
    torch.backends.cudnn.benchmark = True
    row: dict[str, Any] = {
        "problem": name,
        "dtype": str(dtype),
        "pytorch_us": 1e3 * queued_device_ms(lambda: F.conv2d(x, w, None, stride, pad, 1, groups)),
    }
    h = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    layout = "NHWC"
    short = str(dtype).removeprefix("torch.")
    p = miocore.ConvProblem(
        "forward",
        x=miocore.TensorDescriptor(short, tuple(x.shape), layout=layout),
        w=miocore.TensorDescriptor(short, tuple(w.shape), layout=layout),
        y=miocore.TensorDescriptor(short, tuple(y.shape), layout=layout),
        conv=miocore.ConvolutionDescriptor(
            pads=(pad, pad), strides=(stride, stride), groups=groups
        ),
    )
    for policy in policies:
        start = time.perf_counter()
        found = h.find_solutions(p, find_mode="NORMAL", accuracy=policy)
        find_s = time.perf_counter() - start
        rep = h.last_report
        run = h.prepare(found[0])
        run(x=x, w=w, y=y)
        row[policy] = {
            "find_s": round(find_s, 3),
            "ranked": [(s.solver, round(s.time_ms * 1e3, 1)) for s in found[:6]],
            "winner_in_situ_us": 1e3
            * queued_device_ms(lambda r=run: r.run_at(x.data_ptr(), w.data_ptr(), y.data_ptr())),
            "skipped": {k: v[:160] for k, v in list(rep.skipped.items())[:12]},
            "failed": {k: v[:160] for k, v in list(rep.failed.items())[:6]},
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS))
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--policies", nargs="+", default=["default", "fast"])
    parser.add_argument("--switches", nargs="+", default=["none"], help="none rc rp rc+rp")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    rows = []
    for combo in args.switches:
        set_switches(combo)
        for name in args.problems:
            with tempfile.TemporaryDirectory() as db:  # a fresh database per find
                os.environ["MIOCORE_USER_DB_PATH"] = db
                try:
                    row = report(name, dtype[args.dtype], args.policies)
                except Exception as exc:  # one problem must not stop the others
                    row = {"problem": name, "error": repr(exc)[:300]}
            row["switches"] = combo
            print(json.dumps(row), flush=True)
            rows.append(row)
            if args.out:
                args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
