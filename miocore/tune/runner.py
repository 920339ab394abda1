"""``tune``: NORMAL find over many problems on Dask workers, shards merged, resumable.

Dask is imported here and only here (``pip install miocore[tune]``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from miocore.db._common import miocore_version
from miocore.db._sqlite import utc_now_iso
from miocore.db.mathkeys import record_key
from miocore.errors import InvalidArgumentError, MiocoreError
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import MATH_MODES
from miocore.solver.registry import default_registry
from miocore.tune.shards import done_tasks, merge_shards, versions_signature
from miocore.tune.worker import MALLOC_TRIM, VISIBLE_DEVICES, run_task
from miocore.values import frozen

log = logging.getLogger("miocore.tune")


class TuneUnavailableError(MiocoreError):
    """``miocore tune`` needs Dask distributed (``pip install miocore[tune]``)."""


@frozen(kw_only=True)
class TuneProgress:
    """Where a run stands: counts of this run's tasks, elapsed seconds and the ETA."""

    total: int
    done: int
    ok: int
    failed: int
    skipped: int
    elapsed_s: float
    eta_s: float | None
    last: dict[str, Any] | None = None

    def line(self) -> str:
        """``37/120 done (35 ok, 2 failed), 4 resumed, 12.0 s elapsed, ETA 27 s``."""
        eta = "ETA ?" if self.eta_s is None else f"ETA {self.eta_s:.0f} s"
        return (
            f"{self.done}/{self.total} done ({self.ok} ok, {self.failed} failed), "
            f"{self.skipped} resumed, {self.elapsed_s:.1f} s elapsed, {eta}"
        )


@frozen(kw_only=True)
class TuneResult:
    """What a run did: tasks tuned now, failed (with their errors in the shard logs),
    skipped because an earlier run finished them, the merged database and the wall time."""

    database: Path
    tuned: int
    failed: int
    skipped: int
    workers: int
    wall_s: float
    failures: tuple[dict[str, Any], ...] = ()

    @property
    def per_minute_per_worker(self) -> float:
        """Tuning throughput: problems finished per minute per worker."""
        done = self.tuned + self.failed
        return 60.0 * done / self.wall_s / max(1, self.workers) if self.wall_s > 0 else 0.0


def cpu_sockets() -> int:
    """Physical CPU packages on this machine (1 when Linux's topology is not readable)."""
    ids = set()
    for path in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/physical_package_id"):
        try:
            ids.add(path.read_text().strip())
        except OSError:
            continue
    return max(1, len(ids))


def default_devices(device: str) -> list[str]:
    """One entry per worker: each GPU of the backend (``cuda:0``, ``cuda:1``...), or one
    ``cpu`` per CPU socket. An explicit index (``cuda:1``) pins a single worker."""
    if device == "cpu":
        return ["cpu"] * cpu_sockets()
    if ":" in device:
        return [device]
    import importlib

    module = importlib.import_module(f"miocore.backends.{device}")
    count = getattr(module, "device_count", None)
    n = int(count()) if callable(count) else 1
    return [f"{device}:{i}" for i in range(max(1, n))]


def tune(
    problems: Iterable[ConvProblem],
    *,
    out_dir: Path | str,
    device: str = "cpu",
    workers: int | None = None,
    scheduler: str | None = None,
    exhaustive: bool = False,
    math_modes: Sequence[str] = ("exact",),
    merge_every: int = 50,
    time_limit_s: float | None = None,
    prune: bool = False,
    progress: Callable[[TuneProgress], None] | None = None,
    modes_of: Mapping[str, Collection[str]] | None = None,
) -> TuneResult:
    """Run NORMAL find for every problem (and math mode) on Dask workers.

    ``modes_of`` narrows the math modes per problem key (a refresh finds a problem again only
    in the modes where its record is stale: ``miocore.tune.stale``); a key it lacks is found
    in every mode of ``math_modes``.

    ``out_dir`` holds the run (:mod:`miocore.tune.shards`); running again with the same
    folder resumes: tasks finished with the same miocore and plugin versions are skipped.
    ``workers`` defaults to one per device (:func:`default_devices`) on a new ``LocalCluster``;
    ``scheduler`` (``tcp://host:8786``) uses an existing cluster instead, each of whose workers
    tunes ``device`` (set ``MIOCORE_TUNE_DEVICE`` in a worker's environment to pin it).
    Shards are merged into ``<out_dir>/<device id>.db`` after every ``merge_every`` finished
    tasks and at the end, also when ``progress`` raises (which stops the run).
    """
    problems = list(problems)
    for i, p in enumerate(problems):
        if not isinstance(p, ConvProblem):
            raise InvalidArgumentError(
                "expected a miocore.ConvProblem", field=f"problems[{i}]", value=p
            )
    for mode in math_modes:
        if mode not in MATH_MODES:
            raise InvalidArgumentError(
                f"expected one of {', '.join(MATH_MODES)}", field="math_modes", value=mode
            )
    for key, modes in (modes_of or {}).items():
        if isinstance(modes, str) or not set(modes) <= set(math_modes):
            raise InvalidArgumentError(
                f"a collection of math modes out of {list(math_modes)}",
                field=f"modes_of[{key!r}]",
                value=modes,
            )
    if not isinstance(merge_every, int) or merge_every < 1:
        raise InvalidArgumentError("must be an int >= 1", field="merge_every", value=merge_every)
    if time_limit_s is not None and not time_limit_s > 0:
        raise InvalidArgumentError("must be > 0 seconds", field="time_limit_s", value=time_limit_s)
    run_dir = Path(out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    devices = default_devices(device)
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise InvalidArgumentError("must be an int >= 1", field="workers", value=workers)
    n_workers = workers or len(devices)
    signature = versions_signature(default_registry())
    device_id = _device_identity(devices[0])
    finished = done_tasks(run_dir, signature)
    tasks = []
    skipped = 0
    for p in problems:
        # One task per record: a math mode changes only fp32 problems' keys and results
        # (miocore.db.mathkeys), so a problem of another type is found in the first mode only.
        keys: set[str] = set()
        for mode in math_modes:
            if modes_of is not None and p.key in modes_of and mode not in modes_of[p.key]:
                continue
            record = record_key(p, mode)
            if record in keys:
                continue
            keys.add(record)
            if (p.key, mode) in finished:
                skipped += 1
                continue
            tasks.append(
                {
                    "key": p.key,
                    "direction": p.direction.value,
                    "math_mode": mode,
                    "exhaustive": bool(exhaustive),
                    "run_dir": str(run_dir.resolve()),
                    "devices": devices,
                    "time_limit_s": time_limit_s,
                    "versions": signature,
                    "prune": prune,
                }
            )
    _write_manifest(run_dir, device_id, signature, len(problems), math_modes, exhaustive)
    start = time.perf_counter()
    counts: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []
    if tasks:
        client, cluster = _connect(scheduler, device, n_workers)
        try:
            futures = client.map(run_task, tasks, pure=False)
            since_merge = 0
            from distributed import as_completed

            trimmed = False
            for future in as_completed(futures):
                line = future.result()
                if line.get("malloc_trim_threshold") and not trimmed:
                    trimmed = True
                    log.warning(
                        "worker %s runs with %s=%s (Dask's nanny default): CPU solvers time"
                        " up to 3.6x slower there than in your process; start the workers with"
                        " DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON='{}' (miocore's own"
                        " cluster does)",
                        line.get("worker"),
                        MALLOC_TRIM,
                        line["malloc_trim_threshold"],
                    )
                status = "resumed" if line.get("skipped") else line["status"]
                counts[status] += 1
                if status in ("error", "timeout"):
                    failures.append(line)
                since_merge += 1
                if since_merge >= merge_every:
                    merge_shards(run_dir, device_id)
                    since_merge = 0
                if progress is not None:
                    progress(_progress(len(tasks), counts, skipped, start, line))
        finally:
            try:
                if "futures" in locals():  # stopped early: leave no task running
                    client.cancel(futures)
            finally:
                client.close()
                if cluster is not None:
                    cluster.close()
                merge_shards(run_dir, device_id)
    else:
        merge_shards(run_dir, device_id)
    return TuneResult(
        database=run_dir / f"{device_id}.db",
        tuned=counts["ok"],
        failed=counts["error"] + counts["timeout"],
        skipped=skipped + counts["resumed"],
        workers=n_workers,
        wall_s=time.perf_counter() - start,
        failures=tuple(failures),
    )


def _progress(
    total: int, counts: Counter[str], skipped: int, start: float, line: dict[str, Any]
) -> TuneProgress:
    done = sum(counts.values())
    elapsed = time.perf_counter() - start
    eta = elapsed / done * (total - done) if done else None
    return TuneProgress(
        total=total,
        done=done,
        ok=counts["ok"],
        failed=counts["error"] + counts["timeout"],
        skipped=skipped + counts["resumed"],
        elapsed_s=elapsed,
        eta_s=eta,
        last=line,
    )


def _device_identity(device: str) -> str:
    from miocore.backends import open_backend

    return open_backend(device).device.identity


# A GPU worker sees only its own device (worker.VISIBLE_DEVICES), so that every library in its
# process (cuDNN, CuPy, torch) works on that device by default, as dask-cuda pins its workers.


def worker_environments(devices: Sequence[str], n_workers: int) -> list[dict[str, str]]:
    """Each LocalCluster worker's environment: worker ``i`` tunes ``devices[i % len]``.

    A GPU worker gets ``CUDA_VISIBLE_DEVICES`` (``HIP_VISIBLE_DEVICES``) naming its one device
    (an entry of the caller's own list when the caller set one) and tunes it as ``cuda:0``.
    Several CPU workers get ``MIOCORE_CPU_THREADS`` = cores / workers each (unless the caller
    set it), so their thread pools do not oversubscribe the machine.
    """
    envs = []
    cpu_workers = sum(devices[i % len(devices)].startswith("cpu") for i in range(n_workers))
    for i in range(n_workers):
        device = devices[i % len(devices)]
        backend, _, index = device.partition(":")
        variable = VISIBLE_DEVICES.get(backend)
        if variable is None or not index:
            envs.append({"MIOCORE_TUNE_DEVICE": device})
            if backend == "cpu" and cpu_workers > 1 and not os.environ.get("MIOCORE_CPU_THREADS"):
                # Workers sharing the cores share them out, rather than each timing with all.
                share = max(1, (os.cpu_count() or 1) // cpu_workers)
                envs[-1]["MIOCORE_CPU_THREADS"] = str(share)
            continue
        visible = [v.strip() for v in os.environ.get(variable, "").split(",") if v.strip()]
        physical = visible[int(index)] if int(index) < len(visible) else index
        envs.append({variable: physical, "MIOCORE_TUNE_DEVICE": f"{backend}:0"})
    return envs


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise TuneUnavailableError(
            "miocore tune runs on Dask distributed: pip install 'miocore[tune]'",
            field="scheduler",
            value=None,
        ) from exc
    return distributed


def local_cluster(device: str = "cpu", workers: int | None = None) -> Any:
    """The cluster ``tune`` starts when given no scheduler, for callers that keep one across
    runs (``tune(..., scheduler=cluster.scheduler_address)``): one process per worker, one
    thread each, worker names 0, 1, ... (a restarted worker keeps its name, and so its shard),
    each GPU worker pinned to its device (:func:`worker_environments`). Close it when done."""
    distributed = _distributed()
    import dask  # installed with distributed

    devices = default_devices(device)
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise InvalidArgumentError("must be an int >= 1", field="workers", value=workers)
    local = {"host": "127.0.0.1", "dashboard_address": ":0"}
    # No memory cap: Dask's default share (memory / cores) is a few GB on a many-core GPU
    # host, less than a worker holding CUDA, cuDNN and its libraries needs; past it, the
    # nanny would kill the worker mid-find.
    worker = {**local, "nthreads": 1, "memory_limit": 0}
    specs = {
        i: {"cls": distributed.Nanny, "options": {**worker, "env": env}}
        for i, env in enumerate(worker_environments(devices, workers or len(devices)))
    }
    # Dask's nanny starts a worker with its "pre-spawn" environment (glibc's
    # MALLOC_TRIM_THRESHOLD_=65536 and one thread for OpenMP, MKL and OpenBLAS), written
    # into this process's os.environ as well. A tuning worker must time solvers as the
    # caller's process runs them: under that trim threshold numpy-heavy CPU solvers timed
    # 1.8-3.6x slower (direct.naive 0.49 -> 1.75 ms on a grouped layer; docs/tuning.md), and
    # the database taught immediate mode that they were. The nannies read it when made,
    # which SpecCluster does before returning.
    with dask.config.set({"distributed.nanny.pre-spawn-environ": {}}):
        return distributed.SpecCluster(
            workers=specs,
            scheduler={"cls": distributed.Scheduler, "options": local},
            silence_logs=logging.WARNING,
        )


def _connect(scheduler: str | None, device: str, n_workers: int) -> tuple[Any, Any]:
    distributed = _distributed()
    if scheduler is not None:
        return distributed.Client(scheduler), None
    cluster = local_cluster(device, n_workers)
    return distributed.Client(cluster), cluster


def _write_manifest(
    run_dir: Path,
    device_id: str,
    signature: str,
    problems: int,
    math_modes: Sequence[str],
    exhaustive: bool,
) -> None:
    manifest = {
        "device": device_id,
        "versions": signature,
        "miocore": miocore_version(),
        "problems": problems,
        "math_modes": list(math_modes),
        "exhaustive": exhaustive,
        "started_at": utc_now_iso(),
        "host_cpus": os.cpu_count(),
    }
    tmp = run_dir / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    tmp.replace(run_dir / "manifest.json")
