"""What splitting the reduction buys ``triton.igemm_fwd`` / ``triton.igemm_bwd``, offline.

Reads the JSON of ``benchmarks/gpu_triton_bench.py`` runs (every configuration of each layer's
space timed, the splits among them) and, with no GPU, for every layer whose space holds splits
(few output tiles: see ``miocore_triton.solvers._gemm_splits``): the default's time, the best
unsplit and the best split configuration, their ratio, and the output tiles of the split's
tile against the SMs (an H100/H200 context: 132). Then a candidate default rule, "the
largest split of the default tile that keeps at most ``--programs-per-sm`` programs per SM",
is judged against each row's best: geometric mean and worst of its time over the best, and
over the default. A split default is fitted here before it goes to the device.

    python benchmarks/triton_split_report.py benchmarks/results/gpu_h200_triton_*_unet3d*.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "plugins" / "triton" / "tests"))

import miocore


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def _ctx() -> miocore.ExecutionContext:
    from triton_helpers import gpu_ctx

    return gpu_ctx()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="gpu_triton_bench.py JSON files")
    parser.add_argument("--programs-per-sm", type=float, default=1.0)
    args = parser.parse_args()
    from miocore_triton.geometry import gemm_tiles

    sms = _ctx().device.compute_units
    rule_vs_best, rule_vs_default, rows_seen = [], [], 0
    print(f"{'layer':28s} {'dir':4s} {'dtype':8s} default  unsplit  split (config)  tiles")
    for path in args.runs:
        for row in json.loads(path.read_text())["rows"]:
            times: dict[str, float] = {
                k: v for k, v in row.get("configs", {}).items() if isinstance(v, float)
            }
            configs = {k: json.loads(k) for k in times}
            split = {k: c for k, c in configs.items() if c.get("split", 1) > 1}
            if not split or row["direction"] == "backward_weights":
                continue
            rows_seen += 1
            unsplit = min((times[k] for k in configs if k not in split), default=math.inf)
            best_split = min(split, key=times.__getitem__)
            p = miocore.ConvProblem.from_key(row["key"])
            cfg = split[best_split]
            tiles = gemm_tiles(p, cfg["bm"], cfg["bn"])
            default_key = json.dumps(
                json.loads(row["triton_default_config"]), separators=(",", ":")
            )
            default_ms = times.get(default_key, row["triton_default_ms"])
            print(
                f"{row['suite'] + '/' + row['layer']:28s} {row['direction'][:4]:4s} "
                f"{row['precision']:8s} {default_ms:.4f}  {unsplit:.4f}  {times[best_split]:.4f} "
                f"(s{cfg['split']} {cfg['bm']}x{cfg['bn']}x{cfg['bk']})  {tiles}/{sms}"
            )
            # the candidate rule: the default's tile, the largest split within the budget
            base = json.loads(row["triton_default_config"])
            same_tile = [
                k
                for k, c in configs.items()
                if all(c[key] == base[key] for key in ("bm", "bn", "bk", "warps", "stages"))
                and gemm_tiles(p, c["bm"], c["bn"]) * c.get("split", 1)
                <= args.programs_per_sm * sms
            ]
            if not same_tile:
                continue
            pick = max(same_tile, key=lambda k: configs[k].get("split", 1))
            best = min(times.values())
            rule_vs_best.append(times[pick] / best)
            rule_vs_default.append(times[pick] / default_ms)
    worst = max(rule_vs_best, default=float("nan"))
    print(
        f"{rows_seen} rows with splits; rule (<= {args.programs_per_sm} programs per SM): "
        f"{geomean(rule_vs_best):.3f} of the best in geomean (worst {worst:.2f}), "
        f"{geomean(rule_vs_default):.3f} of the default's time"
    )


if __name__ == "__main__":
    main()
