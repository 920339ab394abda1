"""The default find mode against NORMAL find on a GPU: how good its choices are, how long a
first find takes.

For every layer of the chosen suites (fp16, channels-last, batch 32, forward and backward
data): a find in NORMAL mode and a find in DYNAMIC_HYBRID (the default), each with an empty
FindDb, then both chosen solutions timed on the device in the same run. Reported per layer:
the wall time of each find (``first_find_ms``: the binary cache is warm after the first suite
pass, so the second pass shows the warm-cache figure) and the ratio NORMAL's time / default's
time (1.0: the default mode chose as well; < 0.95 misses the issue's target).

    python benchmarks/gpu_default_find.py --suites resnet50 mobilenetv2 --out default_find.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from common import geomean
from gpu_call_cost import device_ms, tensor
from shapes import SUITES, problem

import miocore


def find_ms(h: miocore.Handle, p: miocore.ConvProblem, mode: str) -> tuple[float, Any]:
    """Wall time of one find (empty FindDb) and its best solution."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    best = h.find_solutions(p, find_mode=mode)[0]
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3, best


def run_suite(suite: str, passes: int, batch: int, directions: list[str]) -> list[dict[str, Any]]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for pass_no in range(passes):
        for layer in SUITES[suite]:
            for direction in directions:
                p = problem(layer, batch, direction, "float16", "NHWC")
                row: dict[str, Any] = {"suite": suite, "layer": layer.name, "pass": pass_no}
                row["direction"] = direction
                arrays = {n: tensor(getattr(p, n), gen) for n in ("x", "w", "y")}
                for mode in ("NORMAL", "DYNAMIC_HYBRID"):
                    with tempfile.TemporaryDirectory() as db:  # an empty FindDb each time
                        h = miocore.Handle("cuda", user_db_path=db)
                        ms, best = find_ms(h, p, mode)
                        ws = torch.empty(
                            max(best.workspace_size, 1), dtype=torch.uint8, device="cuda"
                        )
                        run = h.prepare(best, workspace=ws)
                        row[mode] = {
                            "find_ms": ms,
                            "solver": best.solver,
                            "device_ms": device_ms(lambda r=run, a=arrays: r(**a)),
                        }
                row["ratio"] = row["NORMAL"]["device_ms"] / row["DYNAMIC_HYBRID"]["device_ms"]
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def profile_find(suite: str, name: str, batch: int, mode: str) -> None:
    """Print where one first find's time goes (binary cache warm: a find runs first)."""
    import cProfile
    import pstats

    layer = next(layer for layer in SUITES[suite] if layer.name == name)
    p = problem(layer, batch, "forward", "float16", "NHWC")
    with tempfile.TemporaryDirectory() as db:
        miocore.Handle("cuda", user_db_path=db).find_solutions(p, find_mode="NORMAL")
    with tempfile.TemporaryDirectory() as db:
        h = miocore.Handle("cuda", user_db_path=db)
        profile = cProfile.Profile()
        profile.enable()
        ms, best = find_ms(h, p, mode)
        profile.disable()
        print(f"{suite} {name} {mode}: {ms:.1f} ms, best {best.solver}")
        print(h.last_report.benchmarked, h.last_report.skipped)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(35)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="+", default=["resnet50", "mobilenetv2"])
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--directions", nargs="+", default=["forward", "backward_data"])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--profile", nargs=2, metavar=("SUITE", "LAYER"), default=None)
    args = parser.parse_args()
    if args.profile:
        profile_find(*args.profile, args.batch, "DYNAMIC_HYBRID")
        return
    rows = []
    for suite in args.suites:
        rows += run_suite(suite, args.passes, args.batch, args.directions)
    last = [r for r in rows if r["pass"] == args.passes - 1]
    summary = {
        "device": torch.cuda.get_device_name(),
        "geomean_ratio": geomean([r["ratio"] for r in last]),
        "within_5pct": sum(r["ratio"] >= 0.95 for r in last),
        "cases": len(last),
        "median_first_find_ms": {
            mode: statistics.median(r[mode]["find_ms"] for r in last)
            for mode in ("NORMAL", "DYNAMIC_HYBRID")
        },
        "max_first_find_ms": {
            mode: max(r[mode]["find_ms"] for r in last) for mode in ("NORMAL", "DYNAMIC_HYBRID")
        },
    }
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
