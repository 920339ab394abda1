"""Markdown tables from ``gpu_vs_cudnn.py`` results (one or more JSON files, merged).

    python benchmarks/gpu_report.py results/a.json results/b.json > tables.md

Prints the targets of the GPU issue (ResNet-50 geomeans of cuDNN time / miocore time per
precision and direction, cases where miocore is faster), a summary per suite, precision and
direction, and one table per suite with every case.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import geomean

DIRS = {"forward": "F", "backward_data": "B", "backward_weights": "W"}
#: The issue's targets on the ResNet-50 suite: geomean of cuDNN time / miocore time.
TARGETS = {"float16": 0.7, "float32": 0.8}


def load(paths: list[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows, run headers) of every file; a later file's row replaces an earlier identical case."""
    cases: dict[tuple, dict[str, Any]] = {}
    headers = []
    for path in paths:
        data = json.loads(path.read_text())
        headers.append({k: v for k, v in data.items() if k not in ("layers", "summary")})
        for row in data.get("layers", []):
            key = (row["suite"], row["layer"], row["precision"], row["direction"])
            cases[key] = row
    return list(cases.values()), headers


def _g(values: list[float]) -> str:
    return f"{geomean(values):.2f}" if values else "-"


def targets(rows: list[dict[str, Any]]) -> str:
    """The issue's ResNet-50 targets, met or not."""
    out = ["| precision | direction | geomean cuDNN/miocore | target | met | layers |"]
    out.append("|---|---|---|---|---|---|")
    for mode, target in TARGETS.items():
        for direction in DIRS:
            sel = [
                r["speedup"]
                for r in rows
                if r["suite"] == "resnet50"
                and r["precision"] == mode
                and r["direction"] == direction
                and "speedup" in r
            ]
            if not sel:
                continue
            g = geomean(sel)
            out.append(
                f"| {mode} | {direction} | {g:.3f} | {target} | {'yes' if g >= target else 'no'} "
                f"| {len(sel)} |"
            )
    faster = [r for r in rows if r.get("speedup", 0) > 1]
    out.append("")
    out.append(
        f"Cases where miocore is faster than cuDNN: {len(faster)} of {len(rows)} (all suites)."
    )
    return "\n".join(out)


def summary(rows: list[dict[str, Any]]) -> str:
    """Per suite, precision and direction."""
    out = [
        "| suite | precision | dir | geomean | faster | cases | winners |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r["suite"], r["precision"], r["direction"]) for r in rows})
    for suite, mode, direction in keys:
        sel = [
            r
            for r in rows
            if (r["suite"], r["precision"], r["direction"]) == (suite, mode, direction)
        ]
        speed = [r["speedup"] for r in sel if "speedup" in r]
        wins: dict[str, int] = {}
        for r in sel:
            if "family" in r:
                wins[r["family"]] = wins.get(r["family"], 0) + 1
        names = ", ".join(f"{k} {v}" for k, v in sorted(wins.items(), key=lambda kv: -kv[1]))
        out.append(
            f"| {suite} | {mode} | {DIRS[direction]} | {_g(speed)} | {sum(s > 1 for s in speed)} "
            f"| {len(sel)} | {names} |"
        )
    return "\n".join(out)


def per_case(rows: list[dict[str, Any]], suite: str) -> str:
    """Every case of one suite."""
    out = [
        "| layer | precision | dir | cuDNN ms | miocore ms | cuDNN/miocore | solver "
        "| miocore % matmul | cuDNN % matmul |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["suite"] != suite:
            continue
        if "speedup" not in r:
            out.append(
                f"| {r['layer']} | {r['precision']} | {DIRS[r['direction']]} | {r['cudnn_ms']:.3f} "
                f"| failed | - | {r.get('error', '')[:60]} | - | {100 * r['cudnn_of_matmul']:.1f} |"
            )
            continue
        out.append(
            f"| {r['layer']} | {r['precision']} | {DIRS[r['direction']]} | {r['cudnn_ms']:.3f} "
            f"| {r['miocore_ms']:.3f} | {r['speedup']:.2f} | {r['solver']} "
            f"| {100 * r['miocore_of_matmul']:.1f} | {100 * r['cudnn_of_matmul']:.1f} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    rows, headers = load(args.files)
    for h in headers:
        print(
            f"- {h.get('device')}, torch {h.get('torch')}, cuDNN {h.get('cudnn')}, "
            f"{h.get('date')}, layout {h.get('layout')}, matmul TFLOP/s {h.get('matmul_tflops')}"
        )
    print("\n### Targets (ResNet-50)\n")
    print(targets(rows))
    print("\n### Summary\n")
    print(summary(rows))
    for suite in dict.fromkeys(r["suite"] for r in rows):
        print(f"\n### {suite}\n")
        print(per_case(rows, suite))


if __name__ == "__main__":
    main()
