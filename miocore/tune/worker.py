"""What runs on a tuning worker: one NORMAL find per task, written to the worker's own shard.

A task is a plain dict (JSON values only), so any Dask worker, or a plain process, can run it.
The worker keeps one :class:`~miocore.Handle` per (device, math mode) for its whole life; its
user database folder is its shard, so workers never write the same file.
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import Any

from miocore import env
from miocore.errors import MiocoreError
from miocore.problem.conv import ConvProblem
from miocore.tune.shards import append_log, claim, done_tasks, shard_dir

_handles: dict[tuple[str, str, str], Any] = {}
#: The variable that pins a GPU worker to its device, per backend (see runner.worker_environments).
VISIBLE_DEVICES = {"cuda": "CUDA_VISIBLE_DEVICES", "hip": "HIP_VISIBLE_DEVICES"}


#: glibc's variable that Dask's nanny sets in a worker it starts (65536 by default): numpy's
#: temporaries then go back to the kernel at each free, and numpy-heavy CPU solvers time
#: 1.8-3.6x slower than in the caller's process. A task records it (see runner.tune's warning).
MALLOC_TRIM = "MALLOC_TRIM_THRESHOLD_"


class ProblemTimeLimit(MiocoreError):
    """A problem's find ran past the run's per-problem time limit (checked between solvers)."""


def worker_identity() -> tuple[str, int | None]:
    """This worker's name and, on a LocalCluster (names 0, 1, ...), its index."""
    try:
        from distributed import get_worker

        name = get_worker().name
    except (ImportError, ValueError):  # not on a Dask worker: a plain process
        return f"pid{os.getpid()}", None
    if isinstance(name, int):
        return f"worker-{name}", name
    return str(name), None


def pick_device(devices: list[str], index: int | None) -> str:
    """The device this worker is pinned to: ``MIOCORE_TUNE_DEVICE`` when the worker's
    environment sets it, else the run's devices by worker index (one worker per device)."""
    pinned = env.get("MIOCORE_TUNE_DEVICE", "").strip()
    if pinned:
        return pinned
    return devices[(index or 0) % len(devices)]


def _handle(device: str, math_mode: str, shard: Path) -> Any:
    from miocore.find.handle import Handle

    cache_key = (device, math_mode, str(shard))
    handle = _handles.get(cache_key)
    if handle is None:
        # The system layer is left out on purpose: a tuning run measures, it never reads.
        handle = Handle(
            device,
            user_db_path=shard,
            system_db_path=shard / "no-system-layer",
            math_mode=math_mode,
        )
        _handles[cache_key] = handle
    return handle


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Tune one problem; return (and log in the shard) what happened.

    Task fields: ``key``, ``direction``, ``math_mode``, ``exhaustive``, ``run_dir``,
    ``devices``, ``time_limit_s`` (None: no limit), ``versions``, ``prune`` (whether find may
    skip hopeless solvers; a tuning run measures them all by default, for the heuristic).
    """
    run_dir = Path(task["run_dir"])
    with claim(run_dir, task["key"], task["math_mode"]):
        done = done_tasks(run_dir, task["versions"]).get((task["key"], task["math_mode"]))
        if done is not None:  # a worker that died before its result came back, or a
            return {**done, "skipped": True}  # cancelled task that ran on, finished it
        return _tune(task, run_dir)


def _tune(task: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    name, index = worker_identity()
    shard = shard_dir(run_dir, name)
    device = pick_device(task["devices"], index)
    line: dict[str, Any] = {
        "key": task["key"],
        "direction": task["direction"],
        "math_mode": task["math_mode"],
        "exhaustive": task["exhaustive"],
        "versions": task["versions"],
        "device": device,
        "worker": name,
    }
    for variable in VISIBLE_DEVICES.values():
        if os.environ.get(variable):  # a pinned GPU worker: which physical device it tuned
            line["visible_devices"] = os.environ[variable]
    if os.environ.get(MALLOC_TRIM):  # Dask's nanny default: timings the caller will not see
        line["malloc_trim_threshold"] = os.environ[MALLOC_TRIM]
    if not task.get("prune", False):
        os.environ["MIOCORE_FIND_PRUNE_FACTOR"] = "0"  # this worker process only
    start = time.perf_counter()
    limit = task.get("time_limit_s")

    def check_time(done: int, total: int, solver: str) -> None:
        if limit is not None and time.perf_counter() - start > limit:
            raise ProblemTimeLimit(
                f"ran past {limit} s after {done} of {total} solvers",
                field="time_limit_s",
                value=limit,
            )

    try:
        problem = ConvProblem.from_key(task["key"])
        if problem.direction.value != task["direction"]:
            problem = ConvProblem(
                task["direction"], x=problem.x, w=problem.w, y=problem.y, conv=problem.conv
            )
        handle = _handle(device, task["math_mode"], shard)
        line["device_id"] = handle.device.identity
        sols = handle.find_solutions(
            problem, find_mode="NORMAL", exhaustive=task["exhaustive"], progress=check_time
        )
        line.update(
            status="ok",
            best=sols[0].solver,
            best_ms=sols[0].time_ms,
            solvers=len(sols),
        )
        if sols.report.failed:  # why a solver has no time in this problem's record
            line["solver_failures"] = {
                name: str(why)[:300] for name, why in sorted(sols.report.failed.items())
            }
    except ProblemTimeLimit as exc:
        line.update(status="timeout", error=str(exc))
    except Exception as exc:  # recorded, and the run goes on
        line.update(
            status="error",
            error=f"{type(exc).__name__}: {exc}",
            where=traceback.format_exc(limit=3)[-600:],
        )
    line["seconds"] = round(time.perf_counter() - start, 4)
    append_log(shard, line)
    return line
