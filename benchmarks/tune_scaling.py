"""`miocore tune` with 1 worker and with N workers on the same problems (issue 19's run).

    python benchmarks/tune_scaling.py --device cpu --workers 2 --per-direction 40 --out /tmp/scale
    python benchmarks/tune_scaling.py --device cuda --workers 2 --first-workers 8 \
        --per-direction 140 --full-size --max-gflop 20 --budget-s 540 \
        --json $OUT/scaling.json --merged $OUT/db

Three runs in one process:

1. **first**: every problem, from whatever binary cache the machine has (this run compiles
   the kernels the timed runs then find cached; ``--first-workers`` puts several workers on
   each GPU so that compiling, which is host work, runs in parallel). Worker 0 is killed
   (SIGKILL) once ``--kill-at`` of the problems are done, the run stops, and the same run is
   resumed on the same cluster (its nanny restarts the worker): the log must then hold every
   problem exactly once (nothing lost, nothing tuned twice).
2. **one**: 1 worker on the problems the first run tuned, on a new cluster, stopped at its
   share of the time left (``--budget-s``).
3. **n**: N workers, on a new cluster, on exactly the problems the 1-worker run finished.

Printed and written (``--json``): wall time, problems per minute, the speed-up against N, each
GPU's mean utilisation during each run (``nvidia-smi``, once a second), and whether the
databases of runs 2 and 3 agree: the same keys, the same solvers measured per key, and each
run's winner within the noise rule of the other run's best (3%, or the smaller of the two
spreads). ``--merged DIR`` writes the union of the three runs' databases to
``DIR/<device>.db`` (FindDb's merge rule: the
faster time wins), which is how the GPU system database is built.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from miocore.db.finddb import FindDb
from miocore.solver.results import tie_margin
from miocore.tune import local_cluster, problems_from_corpus, tune
from miocore.tune.shards import iter_log


class _Stop(Exception):
    """Raised from a progress callback to stop a run (the kill, or the time budget)."""


def _records(db_file: Path) -> dict[str, dict[str, tuple[float, float]]]:
    db = FindDb(db_file.stem, user_dir=db_file.parent, system_dir=db_file.parent / "none")
    try:
        return {
            r.key: {e.solver: (e.time_ms, e.spread_ms or 0.0) for e in r.entries}
            for r in db.items("user")
        }
    finally:
        db.close()


def _within_noise(mine: dict[str, Any], other: dict[str, Any], noise: float = 0.03) -> bool:
    winner = min(mine, key=lambda s: mine[s][0])
    best = min(other, key=lambda s: other[s][0])
    if winner not in other:
        return False
    t_w, s_w = other[winner]
    t_b, s_b = other[best]
    return t_w - t_b <= tie_margin(t_b, (s_w, s_b), noise)


class GpuSampler:
    """Each GPU's utilisation (percent) once a second from ``nvidia-smi``, in the background;
    nothing (and no error) where there is no ``nvidia-smi``."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.available = shutil.which("nvidia-smi") is not None
        if self.available:
            self._thread.start()

    def _loop(self) -> None:
        query = ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"]
        while not self._stop.is_set():
            now = time.time()
            try:
                text = subprocess.run(query, capture_output=True, text=True, timeout=5).stdout
            except (OSError, subprocess.SubprocessError):
                text = ""
            for row in text.strip().splitlines():
                index, _, util = row.partition(",")
                try:
                    self.samples.append((now, int(index), float(util)))
                except ValueError:
                    continue
            self._stop.wait(1.0)

    def mean(self, start: float, end: float) -> dict[int, float]:
        """Each GPU's mean utilisation between two ``time.time()`` stamps."""
        per: dict[int, list[float]] = {}
        for t, index, util in self.samples:
            if start <= t <= end:
                per.setdefault(index, []).append(util)
        return {i: round(sum(v) / len(v), 1) for i, v in sorted(per.items())}

    def stop(self) -> None:
        self._stop.set()


def _first_run(
    problems: list[Any], run: Path, args: argparse.Namespace, deadline: float
) -> dict[str, Any]:
    """N workers, one killed part-way, the run resumed on the same cluster."""
    import distributed

    kill_at = max(1, int(args.kill_at * len(problems)))
    started = time.time()
    killed: dict[str, Any] = {}
    with (
        local_cluster(args.device, args.first_workers or args.workers) as cluster,
        distributed.Client(cluster) as client,
    ):
        pids = client.run(os.getpid)
        run_on_cluster = functools.partial(
            tune,
            problems,
            out_dir=run,
            scheduler=cluster.scheduler_address,
            device=args.device,
            time_limit_s=args.time_limit,
            merge_every=args.merge_every,
        )

        def kill_then_stop(progress: Any) -> None:
            if progress.done >= kill_at:
                address, pid = sorted(pids.items())[0]
                os.kill(pid, signal.SIGKILL)
                killed.update(worker=address, pid=pid, after=progress.done)
                raise _Stop

        with contextlib.suppress(_Stop):
            run_on_cluster(progress=kill_then_stop)
        stop_deadline = time.monotonic() + 120
        while any(client.processing().values()) and time.monotonic() < stop_deadline:
            time.sleep(0.5)
        logged_at_kill = sum(1 for _ in iter_log(run))

        def budget(progress: Any) -> None:
            if time.time() > deadline:
                raise _Stop

        try:
            resumed = run_on_cluster(progress=budget)
            stopped_by_budget = False
        except _Stop:
            resumed = None
            stopped_by_budget = True
    logged = Counter(line["key"] for line in iter_log(run))
    return {
        "problems": len(problems),
        "killed": killed,
        "logged_at_kill": logged_at_kill,
        "resumed_skipped": resumed.skipped if resumed else None,
        "resumed_tuned": resumed.tuned if resumed else None,
        "stopped_by_budget": stopped_by_budget,
        "logged_keys": len(logged),
        "nothing_lost": set(logged) == {p.key for p in problems},
        "nothing_twice": max(logged.values(), default=0) == 1,
        "wall_s": round(time.time() - started, 1),
    }


def _timed(
    problems: list[Any], run: Path, args: argparse.Namespace, workers: int, deadline: float | None
) -> tuple[float, set[str]]:
    """One timed run on a new cluster, stopped after the task that passes ``deadline``: its
    wall time (cluster start included) and the keys it finished."""

    def budget(progress: Any) -> None:
        if deadline is not None and time.time() > deadline:
            raise _Stop

    start = time.time()
    with contextlib.suppress(_Stop):
        tune(
            problems,
            out_dir=run,
            device=args.device,
            workers=workers,
            time_limit_s=args.time_limit,
            merge_every=args.merge_every,
            progress=budget,
        )
    return time.time() - start, {line["key"] for line in iter_log(run)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--first-workers",
        type=int,
        help="workers of the first (compiling) run; several per GPU compile in parallel",
    )
    parser.add_argument("--per-direction", type=int, default=40)
    parser.add_argument("--full-size", action="store_true")
    parser.add_argument("--max-gflop", type=float, help="full size: batch cut to this work")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds per problem")
    parser.add_argument("--merge-every", type=int, default=20)
    parser.add_argument("--kill-at", type=float, default=0.3, help="share done when one dies")
    parser.add_argument("--budget-s", type=float, default=3600.0, help="for all three runs")
    parser.add_argument("--out", default="/tmp/tune-scaling")
    parser.add_argument("--json", help="write the summary here")
    parser.add_argument("--merged", help="a folder: the union of the runs' databases goes here")
    args = parser.parse_args()
    t0 = time.time()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    sampler = GpuSampler()
    problems = problems_from_corpus(
        args.per_direction, shrink=not args.full_size, max_gflop=args.max_gflop
    )
    random.Random(0).shuffle(problems)  # any prefix (the timed runs') is a fair sample
    summary: dict[str, Any] = {"device": args.device, "workers": args.workers}

    first_end = t0 + 0.5 * args.budget_s
    summary["first"] = _first_run(problems, out / "first", args, first_end)
    summary["first"]["gpu_util"] = sampler.mean(t0, time.time())
    print(json.dumps(summary["first"]), flush=True)

    # One worker first, on every problem the first run tuned, stopped at its share of the time
    # left; N workers then tune exactly the problems it finished.
    pool = [p for p in problems if p.key in {ln["key"] for ln in iter_log(out / "first")}]
    left = t0 + args.budget_s - time.time()
    runs: dict[int, Path] = {}
    subset = pool
    for n in (1, args.workers):
        deadline = time.time() + left * args.workers / (args.workers + 1) if n == 1 else None
        start = time.time()
        runs[n] = out / f"w{n}"
        wall, finished = _timed(subset, runs[n], args, n, deadline)
        if n == 1:
            subset = [p for p in subset if p.key in finished]
        lines = [ln for ln in iter_log(runs[n])]
        summary[f"w{n}"] = {
            "tuned": sum(ln.get("status") == "ok" for ln in lines),
            "failed": sum(ln.get("status") != "ok" for ln in lines),
            "wall_s": round(wall, 1),
            "problems_per_min": round(60 * len(lines) / wall, 1),
            "gpu_util": sampler.mean(start, time.time()),
        }
        print(f"{n} worker(s): {json.dumps(summary[f'w{n}'])}", flush=True)
    summary["timed_problems"] = len(subset)
    summary["timed_mix"] = Counter(
        f"{p.direction.value}/{p.x.dtype.value}" for p in subset
    ).most_common()
    sampler.stop()
    if subset:
        device_id = json.loads((out / "first" / "manifest.json").read_text())["device"]
        a = _records(runs[1] / f"{device_id}.db")
        b = _records(runs[args.workers] / f"{device_id}.db")
        a = {k: v for k, v in a.items() if k in {p.key for p in subset}}
        both = set(a) & set(b)
        agree = [k for k in both if _within_noise(a[k], b[k]) and _within_noise(b[k], a[k])]
        summary.update(
            same_keys=set(a) == set(b),
            keys=len(both),
            same_solvers=sum(set(a[k]) == set(b[k]) for k in both),
            winners_within_noise=len(agree),
            same_winner=sum(
                min(a[k], key=lambda s: a[k][s][0]) == min(b[k], key=lambda s: b[k][s][0])
                for k in both
            ),
            disagree=[
                {
                    "key": k,
                    "one": min(a[k].items(), key=lambda kv: kv[1][0]),
                    "n": min(b[k].items(), key=lambda kv: kv[1][0]),
                }
                for k in sorted(both - set(agree))[:20]
            ],
            speedup=round(summary["w1"]["wall_s"] / summary[f"w{args.workers}"]["wall_s"], 2),
        )
    if args.merged:
        device_id = json.loads((out / "first" / "manifest.json").read_text())["device"]
        db = FindDb(device_id, user_dir=Path(args.merged), system_dir=out / "none")
        try:
            for run in [out / "first", *runs.values()]:
                if (run / f"{device_id}.db").is_file():
                    db.merge_from(run / f"{device_id}.db")
        finally:
            db.close()
        summary["merged"] = str(Path(args.merged) / f"{device_id}.db")
    summary["total_wall_s"] = round(time.time() - t0, 1)
    print(json.dumps(summary, indent=1, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
