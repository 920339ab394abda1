"""Do the per-call graphs of ``PreparedRun.run_at`` help or hurt an eager network?

``run_at`` records an address triple seen twice as a CUDA graph and replays it: one driver
call instead of the invoker's host work. In isolation a replay costs less host time than a
kernel launch; in a network the replays sit between PyTorch's plain launches on one stream.
This script times whole networks (``gpu_models.build``, batch 32, channels-last, converted and
found ahead) with the graph policy switched per round, in one process, alternating:

- ``cudnn``: the same model on cuDNN (benchmark mode);
- ``full``: as shipped (every repeated triple replayed as a graph);
- ``wide``: as ``full`` with room for 256 graphs per run;
- ``libs``: graphs only for invokers that say a replay pays (``replay_pays``: libraries and
  multi-kernel invokers), single launches of miocore's own kernels launched directly;
- ``none``: no graphs, every call runs its invoker.

For each: the inference's and the training step's wall time between events (the GPU idle at
the start, as a user sees it), and the inference's device time alone (calls queued behind a
sleep) and host time alone (the GPU held busy), to tell host-bound from device-bound. Also
which solvers the network runs, and whether each replays.

    python benchmarks/gpu_eager_graphs.py --models resnet50 efficientnet_b0 --dtype float16
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

import miocore.torch as mt

sys.path.insert(0, str(Path(__file__).parent))
from gpu_timing import device_ms, host_ms, inference, queued_device_ms, training_step

VARIANTS = ("cudnn", "full", "wide", "libs", "none")
#: The shipped per-run graph limit, restored after ``wide``.
SHIPPED_MAX_GRAPHS = 0
#: ~10 ms at H100 clocks: longer than queueing one inference's launches.
QUEUE_SLEEP_CYCLES = 20_000_000


def prepared_runs() -> list[Any]:
    """Every prepared run of miocore.torch's shared handles."""
    from miocore.torch import runtime

    return [run for state in runtime._handles.values() for run in state.runs.values()]


def graph_policy(variant: str) -> None:
    """Forget every run's graphs and set what is recorded from now on."""
    from miocore.find import prepared
    from miocore.torch import runtime

    for state in runtime._handles.values():
        driver = getattr(state.handle.state.backend, "driver", None)
        if driver is not None:
            # An instance attribute over the class's: "libs" keeps graphs of one launch only
            # where the invoker says a replay pays.
            driver.graph_replay_beats_launch = variant in ("full", "wide")
    global SHIPPED_MAX_GRAPHS
    SHIPPED_MAX_GRAPHS = SHIPPED_MAX_GRAPHS or prepared.MAX_GRAPHS
    prepared.MAX_GRAPHS = 256 if variant == "wide" else SHIPPED_MAX_GRAPHS
    for run in prepared_runs():
        run._graphs.clear()
        run._seen.clear()
        run._graph_failures = prepared.MAX_GRAPH_FAILURES if variant == "none" else 0


def solver_table() -> dict[str, Any]:
    """Runs per solver, with whether its invoker says a replay pays and the graphs kept."""
    rows: dict[str, dict[str, int]] = collections.defaultdict(collections.Counter)
    for run in prepared_runs():
        row = rows[run.solver]
        row["runs"] += 1
        row["replay_pays"] += int(bool(getattr(run._invoker, "replay_pays", False)))
        row["graphs"] += len(run._graphs)
    return {k: dict(v) for k, v in sorted(rows.items())}


def census(fn: Any, passes: int = 6) -> dict[str, float]:
    """Per pass of ``fn`` (after one warm-up pass): ``run_at`` calls, graphs recorded
    (``_record_at``) and calls that replayed none (``_invoke``: the invoker; ``at``: an own
    kernel's raw-address launch), counted by wrapping the prepared runs' methods; and the
    distinct address triples the runs met over all passes (most for one run, and in all)."""
    from miocore.find.prepared import PreparedRun

    counts: collections.Counter[str] = collections.Counter()
    originals = {n: getattr(PreparedRun, n) for n in ("run_at", "_record_at", "_invoke")}

    triples: dict[int, set[tuple[int, ...]]] = collections.defaultdict(set)

    def counting(label: str, original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[label] += 1
            if label == "run_at":  # (run, x, w, y)
                triples[id(args[0])].add(args[1:4])
            return original(*args, **kwargs)

        return wrapper

    fn()
    runs = [(run, run._at) for run in prepared_runs() if run._at is not None]
    try:
        for label, original in originals.items():
            setattr(PreparedRun, label, counting(label, original))
        for run, at in runs:
            run._at = counting("at", at)
        for _ in range(passes):
            fn()
        torch.cuda.synchronize()
    finally:
        for label, original in originals.items():
            setattr(PreparedRun, label, original)
        for run, at in runs:
            run._at = at
    out = {k: v / passes for k, v in counts.items()}
    sizes = [len(t) for t in triples.values()]
    out["runs"] = len(sizes)
    out["triples_max_per_run"] = max(sizes, default=0)
    out["triples_total"] = sum(sizes)
    return out


def model_rows(name: str, dtype: torch.dtype, rounds: int) -> dict[str, Any]:
    from gpu_models import build

    torch.backends.cudnn.benchmark = True
    model, shape = build(name)
    ref = model.cuda().to(dtype).to(memory_format=torch.channels_last)
    mio = mt.convert(copy.deepcopy(ref))
    x = torch.randn(*shape, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    mt.prepare(mio, x, backward=True, progress=False)
    times: dict[str, list[float]] = collections.defaultdict(list)
    tables = {}
    row_census: dict[str, Any] = {}
    for _ in range(rounds):
        for variant in VARIANTS:
            m = ref if variant == "cudnn" else mio
            if variant != "cudnn":
                graph_policy(variant)
            m.eval()
            infer = inference(m, x)
            times[f"{variant}_infer_ms"].append(device_ms(infer, iters=20))
            times[f"{variant}_infer_device_ms"].append(
                queued_device_ms(infer, repeat=1, sleep_cycles=QUEUE_SLEEP_CYCLES)
            )
            times[f"{variant}_infer_host_ms"].append(host_ms(infer, calls=2))
            m.train()
            times[f"{variant}_train_ms"].append(device_ms(training_step(m, x), iters=10))
            if variant != "cudnn":
                tables[variant] = solver_table()
                m.eval()
                row_census[f"{variant}_infer"] = census(inference(m, x))
                m.train()
                row_census[f"{variant}_train"] = census(training_step(m, x))
    row: dict[str, Any] = {k: round(statistics.median(v), 3) for k, v in times.items()}
    for variant in VARIANTS[1:]:
        for kind in ("infer", "train"):
            row[f"{variant}_{kind}_ratio"] = round(
                row[f"cudnn_{kind}_ms"] / row[f"{variant}_{kind}_ms"], 3
            )
    row["solvers"] = tables
    row["census"] = row_census
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50"])
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "dtype": args.dtype}
    for name in args.models:
        row = model_rows(name, getattr(torch, args.dtype), args.rounds)
        result[name] = row
        print(name, json.dumps({k: v for k, v in row.items() if k != "solvers"}), flush=True)
        print(name, "solvers", json.dumps(row["solvers"]["full"]), flush=True)
        print(name, "census", json.dumps(row["census"]), flush=True)
        if args.out:
            args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
