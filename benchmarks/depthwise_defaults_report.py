"""How far ``direct.gpu_depthwise``'s defaults are from each layer's best config, offline.

Reads the JSON of ``benchmarks/gpu_depthwise_bench.py --configs 0`` runs (every config of the
space timed per layer, direction and dtype) and, with no GPU, asks the solver of this tree for
its default on each row: the default's time from the sweep against the row's best config, per
group of (dtype, layout, direction, filter, stride, gather), geometric mean and worst. A rule
change is checked here against the sweeps before it goes to the device.

    python benchmarks/depthwise_defaults_report.py \
        benchmarks/results/gpu_h100_depthwise_fb_sweep_*.json

``--fit FIELD,...`` asks the other question, for fitting a new default: per group of the named
fields (dtype, layout, direction, filter, stride, plane: the written plane's width), the one
config timed on every row of the group whose time over the row's default at the time of the
run (the sweep's ``default_ms``) has the best geometric mean, with its worst; e.g. whether a
staged tile or a run of tiles beats ``dw_nhwc`` everywhere on some planes:

    python benchmarks/depthwise_defaults_report.py --batch 64 --fit stride,plane \
        benchmarks/results/gpu_h200_dw_nhwc_tiles_*_session34.json
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


#: What ``--fit`` may group rows by.
FIT_FIELDS = ("dtype", "layout", "direction", "filter", "stride", "plane")


def _fields(row: dict[str, Any], layer: Any) -> dict[str, Any]:
    """A row's values of :data:`FIT_FIELDS` (plane: the written tensor's width)."""
    out_w = (layer.hw + 2 * layer.pad - layer.f) // layer.stride + 1
    written = layer.hw if row["direction"] == "backward_data" else out_w
    return {"dtype": row["dtype"], "layout": row["layout"], "direction": row["direction"],
            "filter": layer.f, "stride": layer.stride, "plane": written}  # fmt: skip


def fit(paths: list[Path], fields: list[str]) -> None:
    """Per group: the config timed on every row whose time over the row's default time has
    the best geometric mean, that geomean and the worst ratio (< 1: faster than the default)."""
    layers = {layer.name: layer for suite in SUITES.values() for layer in suite}
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = collections.defaultdict(list)
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            if "timings" in row and row.get("default_ms") and row["layer"] in layers:
                values = _fields(row, layers[row["layer"]])
                groups[tuple(values[f] for f in fields)].append(row)
    print(f"{'/'.join(fields):28} {'rows':>4} {'best/default':>12} {'worst':>6}  config")
    for group, rows in sorted(groups.items()):
        ratios: dict[str, list[float]] = collections.defaultdict(list)
        for row in rows:
            for config, ms in row["timings"]:
                ratios[_key(config)].append(ms / row["default_ms"])
        common = {k: v for k, v in ratios.items() if len(v) == len(rows)}
        name = "/".join(str(v) for v in group)
        if not common:
            print(f"{name:28} {len(rows):4d} {'no common config':>12}")
            continue
        best = min(common, key=lambda k: geomean(common[k]))
        print(
            f"{name:28} {len(rows):4d} {geomean(common[best]):12.3f} "
            f"{max(common[best]):6.2f}  {best}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path, help="gpu_depthwise_bench.py JSON files")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument(
        "--fit",
        default=None,
        help="comma-separated fields of " + ", ".join(FIT_FIELDS) + ": per group of them, the "
        "single config that best beats the run's default",
    )
    args = parser.parse_args()
    if args.fit:
        fields = args.fit.split(",")
        if any(f not in FIT_FIELDS for f in fields):
            parser.error(f"--fit {args.fit}: fields are {', '.join(FIT_FIELDS)}")
        fit(args.sweeps, fields)
        return
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
            best = min(times.values())
            times["cudnn"] = row.get("cudnn_ms") or math.nan
            groups[group].append((default, best, times))
    print(
        f"{'dtype/layout/direction/filter/stride':44} {'rows':>4} {'default/best':>12} "
        f"{'worst':>6} {'default/cuDNN':>13} {'faster':>6}"
    )
    for group, rows in sorted(groups.items()):
        timed = [
            (times[_key(d)], best, times["cudnn"]) for d, best, times in rows if _key(d) in times
        ]
        name = "/".join(str(v) for v in group[:5]) + (" gather" if group[5] else "")
        if not timed:
            print(f"{name:44} {len(rows):4d} {'untimed':>12}")
            continue
        ratios = [ms / best for ms, best, _ in timed]
        vs = [ms / cudnn for ms, _, cudnn in timed if cudnn == cudnn]  # cuDNN timed (not NaN)
        print(
            f"{name:44} {len(rows):4d} {geomean(ratios):12.3f} {max(ratios):6.2f} "
            f"{geomean(vs):13.3f} {sum(v < 1 for v in vs):3d}/{len(vs)}"
            + (f"  ({len(rows) - len(timed)} defaults untimed)" if len(timed) < len(rows) else "")
        )


if __name__ == "__main__":
    main()
