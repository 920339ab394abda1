"""A/B of ``direct.gpu_depthwise``'s switches from ``gpu_depthwise_bench.py`` runs (the
``dwab`` stage of ``gpu_session.sh``): each file is one setting on one suite, named
``dwab_<setting>_<suite>.json``, setting 0 the baseline. Per setting and direction: the
default's time and the best TMA-staged pick's time against the baseline's (geometric mean over
the layers both timed, and the worst layer), and against cuDNN.

    python benchmarks/depthwise_switch_report.py results/dwab_*.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import geomean

NAME = re.compile(r"dwab_(\d+)_(\w+)\.json$")


def row_times(row: dict[str, Any]) -> dict[str, float]:
    """The default's time, the best TMA pick's (``tma`` in its config) and the best other
    pick's (cp.async staged or not staged) of one bench row."""
    out = {}
    if "default_ms" in row:
        out["default"] = row["default_ms"]
    timings = row.get("timings", [])
    tma = [ms for cfg, ms in timings if cfg.get("tma")]
    if tma:
        out["tma"] = min(tma)
    plain = [ms for cfg, ms in timings if not cfg.get("tma")]
    if plain:
        out["plain"] = min(plain)
    return out


def load(paths: list[Path]) -> tuple[dict, dict, dict[int, str]]:
    """Times by (setting, direction, kind) and layer; cuDNN's by layer; each setting's options."""
    times: dict[tuple[int, str, str], dict[tuple, float]] = defaultdict(dict)
    cudnn: dict[tuple, float] = {}
    settings: dict[int, str] = {}
    for path in paths:
        match = NAME.search(path.name)
        if not match:
            raise SystemExit(f"{path}: not a dwab_<setting>_<suite>.json file")
        setting, suite = int(match[1]), match[2]
        data = json.loads(path.read_text())
        settings.setdefault(setting, data.get("options", ""))
        for row in data["rows"]:
            layer = (suite, row["layer"], row["dtype"], row["direction"])
            cudnn.setdefault(layer, row["cudnn_ms"])
            for kind, ms in row_times(row).items():
                times[(setting, row["direction"], kind)][layer] = ms
    return times, cudnn, settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    times, cudnn, settings = load(args.files)
    print(f"{'setting':>7} {'direction':14} {'kind':8} {'layers':>6} {'vs base':>8} "
          f"{'worst':>6} {'vs cuDNN':>8}")  # fmt: skip
    for (setting, direction, kind), got in sorted(times.items()):
        base = times.get((0, direction, kind), {})
        both = [layer for layer in got if layer in base]
        if not both:
            continue
        ratios = [got[layer] / base[layer] for layer in both]
        worst = max(zip(ratios, both, strict=True))
        print(
            f"{setting:7d} {direction:14} {kind:8} {len(both):6d} {geomean(ratios):8.3f} "
            f"{worst[0]:6.2f} {geomean([got[la] / cudnn[la] for la in both]):8.3f}"
            f"  (worst {worst[1][1]})"
        )
    for setting, options in sorted(settings.items()):
        print(f"setting {setting}: {options or 'as shipped'}")


if __name__ == "__main__":
    main()
