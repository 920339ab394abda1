"""Replay a wgmma solver's cost model on a measured sweep and fit its constants.

Reads ``gpu_wgmma_bench.py --out`` files (each layer's configurations timed against cuDNN),
re-ranks every layer with the solver's cost model and scores the ranking against the times:
the default's time over the fastest measured (geometric mean and worst), and the same for
the fastest of the default and the alternatives a normal find measures (``find_configs``).
``--fit`` then searches the model's constants coordinate by coordinate (tile efficiencies,
fixed cost per unit, partial-sum rate) for the lowest geometric mean of the default, and
prints the constants found. No device is needed.

    python benchmarks/wgmma_cost_fit.py --fit \
        benchmarks/results/gpu_h200_wgmma_wrw_fp16_session26.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from gpu_wgmma_bench import SUITES, solver_name
from shapes import problem

import miocore
from miocore.testing import cpu_context

_SMS = 132
#: Keys that tell two measured configurations apart for the replay.
_MATCH = ("bm", "bn", "split", "tw", "th", "td", "tn", "pingpong", "span", "sk", "fix")
#: The cost models' scalar constants searched (those a module has), with their candidates.
_SCALARS = {
    "_UNIT_FIXED": (1.0, 2.0, 4.0, 6.0, 8.0, 12.0),
    "_COOPERATIVE_FIXED": (1.0, 2.0, 4.0, 6.0, 8.0),
    "_PINGPONG_FIXED": (0.5, 1.0, 2.0, 4.0),
    "_PARTIAL_BYTES_PER_S": (2e12, 4e12, 6e12, 9e12, 15e12),
    "_STREAMK_SLOWDOWN": (0.9, 1.0, 1.1, 1.2, 1.3, 1.5, 2.0, 3.0),
    "_STREAMK_FIXED": (2.0, 6.0, 12.0, 24.0, 48.0, 96.0),
    "_SPAN_EFFICIENCY": (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0),
}


def _key(config: Any) -> tuple:
    return tuple(int(config.get(k, 0)) for k in _MATCH)


def _context(dtype: str) -> miocore.ExecutionContext:
    import dataclasses

    device = dataclasses.replace(
        cpu_context().device, backend="cuda", compute_units=_SMS, arch="sm90"
    )
    mode = "tf32" if dtype == "float32" else "exact"
    return miocore.ExecutionContext(device=device, math_mode=mode)


def load(paths: list[Path]) -> list[tuple[Any, Any, dict, float, str]]:
    """(problem, solver, {config key: ms}, fastest ms, label) per measured layer."""
    rows = []
    for path in paths:
        for r in json.loads(path.read_text())["rows"]:
            layers, batch = SUITES[r["suite"]]
            layer = next(lay for lay in layers if lay.name == r["layer"])
            layout = r.get("layout", "NHWC")
            p = problem(layer, batch, r["direction"], dtype=r["dtype"], layout=layout).canonical
            times = {
                _key(c["config"]): c["ms"]
                for c in r["configs"]
                if "ms" in c and c["rel_err"] < 1e-2 and c["config"].get("cluster", 1) == 1
            }
            if times:
                label = f"{r['dtype']} {r['direction']} {r['suite']} {r['layer']}"
                name = solver_name(r["dtype"], r["direction"])
                rows.append((p, name, times, min(times.values()), label))
    return rows


def score(rows: list, module: Any, solvers: dict) -> dict[str, float]:
    """Geometric means (and worsts) of default / fastest and find / fastest; layers whose
    default was not measured are left out (counted)."""
    module._ranked.cache_clear()
    logs_default, logs_find, worst, missing = [], [], 1.0, 0
    for p, name, times, best, _ in rows:
        solver = solvers[name]
        ctx = _context(p.dtype.value)
        default = times.get(_key(solver.default_perf_config(ctx, p)))
        if default is None:
            missing += 1
            continue
        found = [times.get(_key(c)) for c in solver.find_configs(ctx, p)]
        fastest_found = min([default, *[t for t in found if t is not None]])
        logs_default.append(math.log(default / best))
        logs_find.append(math.log(fastest_found / best))
        worst = max(worst, default / best)
    n = max(1, len(logs_default))
    return {
        "default": math.exp(sum(logs_default) / n),
        "find": math.exp(sum(logs_find) / n),
        "worst": worst,
        "layers": len(logs_default),
        "missing": missing,
    }


def fit(rows: list, module: Any, solvers: dict, prefix: str = "") -> dict[str, Any]:
    """Coordinate search over the module's constants for the lowest default geomean: the
    tile table and scalars named with ``prefix`` (``"_TF32"``: TF32's own)."""
    grid = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
    table = getattr(module, f"{prefix}_TILE_EFFICIENCY")
    scalars = [prefix + name for name in _SCALARS if hasattr(module, prefix + name)]
    best = score(rows, module, solvers)["default"]
    for _ in range(3):
        for tile in list(table):
            for value in grid:
                old = table[tile]
                table[tile] = value
                got = score(rows, module, solvers)["default"]
                if got < best - 1e-6:
                    best = got
                else:
                    table[tile] = old
        for name in scalars:
            for value in _SCALARS[name.removeprefix(prefix)]:
                old = getattr(module, name)
                setattr(module, name, value)
                got = score(rows, module, solvers)["default"]
                if got < best - 1e-6:
                    best = got
                else:
                    setattr(module, name, old)
    return {f"{prefix}_TILE_EFFICIENCY": dict(table), **{n: getattr(module, n) for n in scalars}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path)
    parser.add_argument("--fit", action="store_true")
    args = parser.parse_args()
    rows = load(args.sweeps)
    handle = miocore.Handle("cpu")
    names = {name for _, name, *_ in rows}
    solvers = {name: handle.registry.get(name).solver for name in names}
    # the module whose constants the cost model reads (where ``ranked`` is defined)
    (module,) = {
        inspect.getmodule(sys.modules[type(s).__module__].ranked) for s in solvers.values()
    }
    print("shipped", score(rows, module, solvers))
    if args.fit:
        # fp32 sweeps fit TF32's own constants where the cost model has them
        tf32 = all(p.dtype.value == "float32" for p, *_ in rows)
        prefix = "_TF32" if tf32 and hasattr(module, "_TF32_TILE_EFFICIENCY") else ""
        constants = fit(rows, module, solvers, prefix)
        print("fitted ", score(rows, module, solvers))
        print(constants)


if __name__ == "__main__":
    main()
