"""miocore tune: runs on a Dask LocalCluster on the CPU (killed, resumed), workers, arguments
(the problem sources: test_tune_sources.py)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import needs
import pytest
from tune_fixtures import tiny_problems

from miocore.db.finddb import FindDb
from miocore.errors import InvalidArgumentError, MiocoreError
from miocore.problem.conv import ConvProblem
from miocore.tune import tune
from miocore.tune.shards import iter_log

DEVICE = None  # filled from a Handle when first needed


def _task(problem: ConvProblem, run: Path, versions: str) -> dict[str, object]:
    """One problem's task as ``tune`` hands it to a worker (exact math, CPU, no limit)."""
    return {
        "key": problem.key,
        "direction": problem.direction.value,
        "math_mode": "exact",
        "exhaustive": False,
        "run_dir": str(run),
        "devices": ["cpu"],
        "time_limit_s": None,
        "versions": versions,
        "prune": False,
    }


def _device_id() -> str:
    from miocore.backends import open_backend

    return open_backend("cpu").device.identity


def test_each_gpu_worker_sees_only_its_own_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from miocore.tune import worker_environments

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    envs = worker_environments(["cuda:0", "cuda:1"], 2)
    assert envs == [
        {"CUDA_VISIBLE_DEVICES": "0", "MIOCORE_TUNE_DEVICE": "cuda:0"},
        {"CUDA_VISIBLE_DEVICES": "1", "MIOCORE_TUNE_DEVICE": "cuda:0"},
    ]
    # The caller's own list is honoured: cuda:1 of a process that sees "5,7" is physical 7.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    envs = worker_environments(["cuda:0", "cuda:1"], 3)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["5", "7", "5"]
    assert worker_environments(["hip:1"], 1) == [
        {"HIP_VISIBLE_DEVICES": "1", "MIOCORE_TUNE_DEVICE": "hip:0"}
    ]
    monkeypatch.delenv("MIOCORE_CPU_THREADS", raising=False)
    assert worker_environments(["cpu"], 1) == [{"MIOCORE_TUNE_DEVICE": "cpu"}]
    share = str(max(1, (os.cpu_count() or 1) // 2))  # two CPU workers share the cores out
    assert (
        worker_environments(["cpu"], 2)
        == [{"MIOCORE_TUNE_DEVICE": "cpu", "MIOCORE_CPU_THREADS": share}] * 2
    )
    monkeypatch.setenv("MIOCORE_CPU_THREADS", "1")  # the caller's own setting is inherited
    assert worker_environments(["cpu"], 2) == [{"MIOCORE_TUNE_DEVICE": "cpu"}] * 2


def test_a_worker_under_dasks_trim_threshold_is_named_in_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On a cluster of the caller's own, started the way Dask starts workers by default, the
    run still tunes, and says which worker timed under glibc's trim threshold."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        if not any(client.run(lambda: bool(os.environ.get("MALLOC_TRIM_THRESHOLD_"))).values()):
            pytest.skip("this Dask does not set MALLOC_TRIM_THRESHOLD_ in its workers")
        with caplog.at_level("WARNING", logger="miocore.tune"):
            result = tune(
                tiny_problems()[:1], out_dir=tmp_path, scheduler=cluster.scheduler_address
            )
    assert result.tuned == 1
    warned = [r.getMessage() for r in caplog.records if "MALLOC_TRIM_THRESHOLD_" in r.getMessage()]
    assert len(warned) == 1 and "PRE_SPAWN_ENVIRON" in warned[0]
    assert all(line.get("malloc_trim_threshold") for line in iter_log(tmp_path))


def test_local_cluster_workers_time_in_the_callers_environment() -> None:
    """Dask's nanny would start workers with glibc's MALLOC_TRIM_THRESHOLD_ and one-thread
    OpenMP/BLAS caps (and write them into this process's environment): numpy-heavy solvers
    then timed up to 3.6x slower in a tuning worker than in the user's process."""
    distributed = pytest.importorskip("distributed")
    from miocore.tune import local_cluster

    names = ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    before = {k: os.environ.get(k) for k in names}

    def seen() -> dict[str, str | None]:
        return {k: os.environ.get(k) for k in names}

    with local_cluster("cpu", 1) as cluster, distributed.Client(cluster) as client:
        workers = list(client.run(seen).values())
    assert workers == [before]
    assert {k: os.environ.get(k) for k in names} == before


def test_tune_rejects_bad_arguments_naming_them(tmp_path: Path) -> None:
    with pytest.raises(MiocoreError) as info:
        tune(["not a problem"], out_dir=tmp_path)  # type: ignore[list-item]
    assert info.value.field == "problems[0]"
    with pytest.raises(MiocoreError) as info:
        tune(tiny_problems(), out_dir=tmp_path, math_modes=["fast"])
    assert info.value.field == "math_modes"
    with pytest.raises(MiocoreError) as info:
        tune(tiny_problems(), out_dir=tmp_path, time_limit_s=0)
    assert info.value.field == "time_limit_s"


# -- runs on a LocalCluster ----------------------------------------------------------------------


def _records(db_file: Path) -> dict[str, dict[str, float]]:
    db = FindDb(db_file.stem, user_dir=db_file.parent, system_dir=db_file.parent / "none")
    try:
        return {r.key: {e.solver: e.time_ms for e in r.entries} for r in db.items("user")}
    finally:
        db.close()


@pytest.mark.slow
def test_a_killed_worker_and_a_resumed_run_lose_nothing_and_tune_nothing_twice(
    tmp_path: Path,
) -> None:
    distributed = pytest.importorskip("distributed")

    class Stop(Exception):
        pass

    problems = tiny_problems()
    run = tmp_path / "run"
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        pids = list(client.run(os.getpid).values())

        def kill_after_three(progress: object) -> None:
            if progress.done == 3:  # type: ignore[attr-defined]
                os.kill(pids[0], signal.SIGKILL)
                raise Stop

        with pytest.raises(Stop):
            tune(
                problems,
                out_dir=run,
                scheduler=cluster.scheduler_address,
                progress=kill_after_three,
            )
        deadline = time.monotonic() + 60
        while any(client.processing().values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        first = Counter(line["key"] for line in iter_log(run))
        assert 3 <= sum(first.values()) < len(problems)
        result = tune(problems, out_dir=run, scheduler=cluster.scheduler_address)
    logged = Counter(line["key"] for line in iter_log(run))
    assert set(logged) == {p.key for p in problems}  # nothing lost
    assert max(logged.values()) == 1  # nothing tuned twice
    # A task the first run had under way when it stopped may still finish (a cancel does not
    # interrupt a running task): the resumed run skips it too.
    assert result.tuned + result.failed + result.skipped == len(problems)
    assert result.skipped >= sum(first.values())
    assert set(_records(result.database)) == {p.key for p in problems}
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["device"] == _device_id() and "miocore-direct" in manifest["versions"]
    # Run again: everything is done, nothing is measured.
    again = tune(problems, out_dir=run, workers=1)
    assert (again.tuned, again.skipped) == (0, len(problems))


def test_a_solver_that_fails_is_named_with_its_reason_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A problem's log line says which solvers failed and why, so that a solver missing
    from one run's record and not another's can be explained."""
    from fake_solvers import BrokenSolver, TimedSolver

    import miocore
    from miocore.solver.registry import Registry
    from miocore.tune import worker

    registry = Registry.from_solvers([TimedSolver("test.good", delay_s=0.0), BrokenSolver("run")])
    handle = miocore.Handle("cpu", registry=registry, user_db_path=tmp_path / "db")
    monkeypatch.setattr(worker, "_handle", lambda *args: handle)
    problem = tiny_problems()[0]
    line = worker.run_task(_task(problem, tmp_path / "run", "v"))
    assert line["status"] == "ok" and line["best"] == "test.good"
    assert set(line["solver_failures"]) == {"test.broken_run"}
    assert "boom in run" in line["solver_failures"]["test.broken_run"]
    assert [ln.get("solver_failures") for ln in iter_log(tmp_path / "run")] == [
        line["solver_failures"]
    ]


def test_a_task_under_way_elsewhere_is_waited_for_then_skipped(tmp_path: Path) -> None:
    """A stopped run's cancelled task runs on; the resumed run's copy of it must wait for it
    and then skip it, not tune it a second time (the claim lock)."""
    import threading

    from miocore.solver.registry import default_registry
    from miocore.tune.shards import append_log, claim, shard_dir, versions_signature
    from miocore.tune.worker import run_task

    problem = tiny_problems()[0]
    run = tmp_path / "run"
    signature = versions_signature(default_registry())
    task = _task(problem, run, signature)
    results: list[dict[str, object]] = []
    with claim(run, problem.key, "exact"):  # "another worker" is tuning it
        twin = threading.Thread(target=lambda: results.append(run_task(task)))
        twin.start()
        twin.join(timeout=0.5)
        assert twin.is_alive() and not results  # it waits
        line = {"key": problem.key, "math_mode": "exact", "versions": signature}
        append_log(shard_dir(run, "other"), {**line, "status": "ok", "best": "direct.naive"})
    twin.join(timeout=30)
    assert results and results[0]["skipped"] is True and results[0]["best"] == "direct.naive"
    assert [ln["key"] for ln in iter_log(run)] == [problem.key]  # tuned once, by the other


@pytest.mark.slow
def test_two_workers_merge_into_what_one_worker_records(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    problems = tiny_problems()
    one = tune(problems, out_dir=tmp_path / "one", workers=1)
    two = tune(problems, out_dir=tmp_path / "two", workers=2, merge_every=2)
    assert one.tuned == two.tuned == len(problems)
    workers = {line["worker"] for line in iter_log(tmp_path / "two")}
    assert len(workers) == 2  # both workers tuned, each into its own shard
    a, b = _records(one.database), _records(two.database)
    assert set(a) == set(b) == {p.key for p in problems}
    for key in a:
        assert set(a[key]) == set(b[key]), key  # the same applicable solvers measured
    # Which solver wins each key is a timing question: these 10-microsecond problems timed on a
    # CI machine shared with other jobs (and solvers compiling at first use in each worker)
    # differ between runs by far more than any noise rule. benchmarks/tune_scaling.py compares
    # the winners of the two databases on a quiet machine; here the records must agree.


@needs.plugins("direct", "gemm")
def test_a_failing_problem_is_recorded_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without Dask: the worker function itself, as a run calls it, on a problem whose
    direction no installed solver takes (every solver disabled)."""
    from miocore.solver.registry import default_registry
    from miocore.tune.shards import versions_signature
    from miocore.tune.worker import run_task

    p = tiny_problems()[0]
    task = {
        "key": p.key,
        "direction": p.direction.value,
        "math_mode": "exact",
        "exhaustive": False,
        "run_dir": str(tmp_path),
        "devices": ["cpu"],
        "time_limit_s": None,
        "versions": versions_signature(default_registry()),
    }
    monkeypatch.setenv("MIOCORE_FIND_ONLY_SOLVER", "no.such_solver")
    failed = run_task(task)
    assert failed["status"] == "error" and failed["error"]
    monkeypatch.delenv("MIOCORE_FIND_ONLY_SOLVER")
    # A recorded failure counts as done: a resumed run does not retry it.
    assert run_task(task)["skipped"] is True
    timed = run_task({**task, "key": tiny_problems()[1].key, "time_limit_s": 1e-9})
    assert timed["status"] == "timeout" and "time_limit_s" in timed["error"]


@pytest.mark.slow
def test_the_tune_command_runs_a_text_finddb_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("distributed")
    import argparse

    from miocore.cli import tune as tune_cli

    keys = [p.key for p in tiny_problems()[:2]]
    text = tmp_path / "theirs.fdb.txt"
    text.write_text("\n".join(f"{k}=miopenConvolutionFwdAlgoGEMM:1.5,0,gemm" for k in keys) + "\n")
    parser = argparse.ArgumentParser()
    tune_cli.add_parser(parser.add_subparsers(dest="command"))
    argv = ["tune", "--finddb", str(text), "--out", str(tmp_path / "run"), "--workers", "1"]
    args = parser.parse_args(argv)
    assert args.handler(args) == 0
    assert "tuned 2, failed 0, resumed 0" in capsys.readouterr().out
    args = parser.parse_args(argv)
    assert args.handler(args) == 0
    assert "tuned 0, failed 0, resumed 2" in capsys.readouterr().out


def test_each_record_is_tuned_once_across_math_modes(tmp_path: Path) -> None:
    """Two math modes find an fp32 problem twice (its tf32 record has a key of its own) and
    a problem of another type once: its records are the same in both modes."""
    pytest.importorskip("distributed")
    fp32, fp16 = (
        ConvProblem.from_sizes(
            "forward", n=1, c=2, k=2, in_spatial=(5, 5), filter_spatial=(3, 3), pads=(1, 1),
            dtype=dtype,
        )
        for dtype in ("float32", "float16")
    )  # fmt: skip
    result = tune([fp32, fp16], out_dir=tmp_path, workers=1, math_modes=["exact", "tf32"])
    assert result.tuned == 3
    assert set(_records(result.database)) == {fp32.key, fp32.key + "_tf32", fp16.key}
    modes = Counter((line["key"], line["math_mode"]) for line in iter_log(tmp_path))
    assert modes == {(fp32.key, "exact"): 1, (fp32.key, "tf32"): 1, (fp16.key, "exact"): 1}


def test_modes_of_finds_a_problem_only_in_its_own_math_modes(tmp_path: Path) -> None:
    """A refresh finds a problem again only in the math modes where its record is stale
    (benchmarks/build_system_db.py --stale-only): ``modes_of`` narrows them per key, and a
    key it does not name keeps every mode."""
    pytest.importorskip("distributed")
    narrowed, whole = (
        ConvProblem.from_sizes(
            "forward", n=1, c=c, k=2, in_spatial=(5, 5), filter_spatial=(3, 3), pads=(1, 1),
            dtype="float32",
        )
        for c in (2, 3)
    )  # fmt: skip
    with pytest.raises(InvalidArgumentError) as info:
        tune([narrowed], out_dir=tmp_path, math_modes=["exact"], modes_of={narrowed.key: "tf32"})
    assert info.value.field == f"modes_of[{narrowed.key!r}]"
    result = tune(
        [narrowed, whole],
        out_dir=tmp_path,
        workers=1,
        math_modes=["exact", "tf32"],
        modes_of={narrowed.key: ["tf32"]},
    )
    assert result.tuned == 3
    modes = Counter((line["key"], line["math_mode"]) for line in iter_log(tmp_path))
    assert modes == {(narrowed.key, "tf32"): 1, (whole.key, "exact"): 1, (whole.key, "tf32"): 1}
    records = set(_records(result.database))
    assert records == {narrowed.key + "_tf32", whole.key, whole.key + "_tf32"}


def test_keys_of_a_database_names_every_problem_once_whatever_its_math_modes(
    tmp_path: Path,
) -> None:
    """benchmarks/build_system_db.py --keys-of (what refreshdb and nhwcdb go through): a
    problem whose records are of the tf32 math mode alone (the channels-last fp32 twins) is
    one of its problems too; it once took exact-mode keys only, so no refresh saw those."""
    import importlib.util

    from miocore.db import FindDb, FindDbEntry

    spec = importlib.util.spec_from_file_location(
        "build_system_db", Path(__file__).parents[1] / "benchmarks" / "build_system_db.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    both, exact_only, tf32_only = (
        ConvProblem.from_sizes(
            "forward", n=1, c=c, k=2, in_spatial=(5, 5), filter_spatial=(3, 3), pads=(1, 1),
            dtype="float32",
        )
        for c in (2, 3, 4)
    )  # fmt: skip
    db = FindDb("cpu_test_4", user_dir=tmp_path, system_dir=tmp_path / "none")
    entry = [FindDbEntry(solver="direct.naive", algorithm="direct", time_ms=1.0, workspace_size=0)]
    for key in (both.key, both.key + "_tf32", exact_only.key, tf32_only.key + "_tf32"):
        db.write(key, entry)
    db.close()
    found = script._keys_of(str(tmp_path / "cpu_test_4.db"), None)
    assert sorted(p.key for p in found) == sorted([both.key, exact_only.key, tf32_only.key])
    assert script._keys_of(str(tmp_path / "cpu_test_4.db"), "float16") == []
