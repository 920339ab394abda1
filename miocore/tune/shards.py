"""A tuning run's folder: the merged database, one shard per worker, the logs; what is done.

::

    <run>/<device>.db             the merged FindDb + PerfDb (miocore's SQLite schema)
    <run>/shards/<worker>/<device>.db    one worker's own user database
    <run>/shards/<worker>/log.jsonl      one line per problem the worker finished (ok or not)
    <run>/manifest.json           what the run was asked to do, with provenance
    <run>/claims/<hash>           one lock file per task: held while a worker tunes it

A worker appends its log line only after its database record is committed, so a line always
means "recorded". A run resumes by skipping every (key, math mode) whose log line carries the
same versions signature (miocore and each plugin distribution's version).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from miocore.db.finddb import FindDb
from miocore.db.outcomes import MergeResult
from miocore.solver.registry import Registry

SHARDS = "shards"
LOG = "log.jsonl"
CLAIMS = "claims"


def versions_signature(registry: Registry) -> str:
    """``miocore=0.1.0;miocore-direct=0.1.0;...``: who measured, for the resume rule."""
    from miocore.db._common import miocore_version

    parts = {"miocore": miocore_version()}
    for info in registry.plugins:
        if info.status == "active":
            parts[info.distribution] = info.version
    return ";".join(f"{k}={v}" for k, v in sorted(parts.items()))


def shard_dir(run_dir: Path, worker: str) -> Path:
    """The folder of one worker's shard (its user database folder)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in worker)
    return run_dir / SHARDS / (safe or "worker")


def append_log(folder: Path, line: dict[str, Any]) -> None:
    """Append one JSON line and make it durable before returning."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOG, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def iter_log(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Every log line of every shard (a torn last line, from a killed worker, is skipped)."""
    root = run_dir / SHARDS
    if not root.is_dir():
        return
    for log in sorted(root.glob(f"*/{LOG}")):
        with open(log, encoding="utf-8") as fh:
            for text in fh:
                try:
                    line = json.loads(text)
                except json.JSONDecodeError:
                    continue
                if isinstance(line, dict) and "key" in line:
                    yield line


def done_tasks(run_dir: Path, signature: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(key, math mode) -> the log line of every problem finished with these versions."""
    return {
        (line["key"], line.get("math_mode", "exact")): line
        for line in iter_log(run_dir)
        if line.get("versions") == signature
    }


def merge_shards(run_dir: Path, device: str) -> list[MergeResult]:
    """Merge every shard's database into ``<run>/<device>.db`` (FindDb's merge rule: the
    union by solver; the newer solver revision, else the faster time, wins). Idempotent:
    merging a shard again changes nothing.
    """
    results = []
    merged = FindDb(device, user_dir=run_dir, system_dir=run_dir / "no-system-layer")
    try:
        for shard in sorted((run_dir / SHARDS).glob(f"*/{device}.db")):
            results.append(merged.merge_from(shard))
    finally:
        merged.close()
    return results


@contextlib.contextmanager
def claim(run_dir: Path, key: str, math_mode: str) -> Iterator[None]:
    """Hold a task's lock while tuning it: a second worker given the same task waits here
    until the first is done (and then finds its log line). A task a stopped run cancelled
    still runs to its end on its worker, so a resumed run can hand it out again; the lock is
    what keeps it from being tuned twice. The kernel drops the lock of a worker that dies,
    so a killed worker's task is tuned again, once. Where ``fcntl`` is missing (Windows),
    nothing is locked."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    folder = run_dir / CLAIMS
    folder.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha1(f"{key}|{math_mode}".encode()).hexdigest()
    with open(folder / name, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
