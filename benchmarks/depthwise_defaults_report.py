"""How far ``direct.gpu_depthwise``'s defaults are from each layer's best config, offline.

Reads the JSON of ``benchmarks/gpu_depthwise_bench.py --configs 0`` runs (every config of the
space timed per layer, direction and dtype) and, with no GPU, asks the solver of this tree for
its default on each row: the default's time from the sweep against the row's best config, per
group of (dtype, layout, direction, filter, stride, gather), geometric mean and worst. A rule
change is checked here against the sweeps before it goes to the device.

    python benchmarks/depthwise_defaults_report.py \
        benchmarks/results/gpu_h100_depthwise_fb_sweep_*.json
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "kernels"))

import check_compile  # the offline sm_90 context the compile check uses
from shapes import SUITES, problem


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path, help="gpu_depthwise_bench.py JSON files")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    from miocore_direct.gpu_depthwise import GpuDepthwiseSolver

    solver = GpuDepthwiseSolver()
    ctx = check_compile._context("cuda", "sm_90")
    layers = {layer.name: layer for suite in SUITES.values() for layer in suite}
    groups: dict[tuple[Any, ...], list[tuple[dict[str, Any], float, dict[str, float]]]] = (
        collections.defaultdict(list)
    )
    for path in args.sweeps:
        for row in json.loads(path.read_text())["rows"]:
            if "timings" not in row or row["layer"] not in layers:
                continue
            layer = layers[row["layer"]]
            p = problem(layer, args.batch, row["direction"], row["dtype"], row["layout"])
            default = dict(solver.default_perf_config(ctx, p.canonical))
            times = {_key(c): ms for c, ms in row["timings"]}
            gather = row["direction"] == "backward_data" and layer.stride > 1
            group = (row["dtype"], row["layout"], row["direction"], layer.f, layer.stride, gather)
            groups[group].append((default, min(times.values()), times))
    print(
        f"{'dtype/layout/direction/filter/stride':44} {'rows':>4} {'default/best':>12} {'worst':>6}"
    )
    for group, rows in sorted(groups.items()):
        ratios = [
            times[_key(default)] / best for default, best, times in rows if _key(default) in times
        ]
        name = "/".join(str(v) for v in group[:5]) + (" gather" if group[5] else "")
        if ratios:
            print(f"{name:44} {len(rows):4d} {geomean(ratios):12.3f} {max(ratios):6.2f}")
        else:
            print(f"{name:44} {len(rows):4d} {'untimed':>12}")


if __name__ == "__main__":
    main()
