"""One test per cell of the find-mode and find-enforce tables (design guide, section 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_solvers import TimedSolver, TunableTimedSolver, small_problem

import miocore
from miocore import Algorithm, FindEnforce, FindMode, Handle, InvalidEnvironmentError, Registry
from miocore.db import FindDb, FindDbEntry


@pytest.fixture
def solvers() -> dict[str, TimedSolver]:
    return {
        "fast": TimedSolver("test.fast", delay_s=0.001, algorithm=Algorithm.GEMM, wti=0.2),
        "slow": TimedSolver("test.slow", delay_s=0.006, wti=0.9),
        "dynamic": TimedSolver(
            "test.dynamic", delay_s=0.003, dynamic=True, algorithm=Algorithm.WINOGRAD, wti=0.1
        ),
    }


@pytest.fixture
def handle(solvers: dict[str, TimedSolver]) -> Handle:
    return Handle("cpu", registry=Registry.from_solvers(solvers.values()))


def _runs(solvers: dict[str, TimedSolver]) -> dict[str, int]:
    return {name: s.runs for name, s in solvers.items()}


def _seed_record(h: Handle, key: str, times: dict[str, float]) -> None:
    h.find_db.write(
        key,
        [
            FindDbEntry(
                solver=name, algorithm="direct", time_ms=t, workspace_size=0, count=5, spread_ms=0.0
            )
            for name, t in times.items()
        ],
    )


PROBLEM = small_problem()


# -- find modes: hit ---------------------------------------------------------------------------


def test_normal_hit_ignores_record_benchmarks_all_and_rewrites(
    handle: Handle, solvers: dict
) -> None:
    _seed_record(handle, PROBLEM.key, {"test.slow": 0.001, "test.fast": 50.0})
    sols = handle.find_solutions(PROBLEM, find_mode="NORMAL")
    assert {s.source for s in sols} == {"measured"}
    assert all(n > 0 for n in _runs(solvers).values())
    assert sols[0].solver == "test.fast"
    [record] = handle.find_db.records(PROBLEM.key)
    assert record.entries[0].solver == "test.fast" and record.entries[0].time_ms < 50.0
    assert len(record.entries) == 3


@pytest.mark.parametrize("mode", ["FAST", "HYBRID", "DYNAMIC_HYBRID"])
def test_hit_returns_recorded_solutions_without_benchmark(
    handle: Handle, solvers: dict, mode: str
) -> None:
    _seed_record(handle, PROBLEM.key, {"test.slow": 0.5, "test.fast": 2.0})
    sols = handle.find_solutions(PROBLEM, find_mode=mode)
    assert [s.solver for s in sols] == ["test.slow", "test.fast"]  # fastest first, as recorded
    assert [s.time_ms for s in sols] == [0.5, 2.0]
    assert {s.source for s in sols} == {"find-db"} and not any(s.is_estimate for s in sols)
    assert sum(_runs(solvers).values()) == 0
    assert sols.report.db_hit == "the user FindDb"


# -- find modes: miss --------------------------------------------------------------------------


def test_normal_miss_benchmarks_all_and_writes(handle: Handle, solvers: dict) -> None:
    sols = handle.find_solutions(PROBLEM, find_mode=1)
    assert all(n > 0 for n in _runs(solvers).values())
    assert sols[0].solver == "test.fast"
    assert {e.solver for e in handle.find_db.records(PROBLEM.key)[0].entries} == set(
        s.name for s in solvers.values()
    )


def test_fast_miss_ranks_without_benchmark_and_writes_nothing(
    handle: Handle, solvers: dict
) -> None:
    sols = handle.find_solutions(PROBLEM, find_mode="fast")
    assert sum(_runs(solvers).values()) == 0
    assert handle.find_db.records(PROBLEM.key) == []
    assert [s.solver for s in sols] == ["test.slow", "test.fast", "test.dynamic"]  # by WTI
    assert all(s.is_estimate and s.source == "wti" for s in sols)


def test_hybrid_miss_benchmarks_all_and_writes(handle: Handle, solvers: dict) -> None:
    handle.find_solutions(PROBLEM, find_mode="HYBRID")
    assert all(n > 0 for n in _runs(solvers).values())
    assert len(handle.find_db.records(PROBLEM.key)[0].entries) == 3


def test_dynamic_hybrid_miss_benchmarks_dynamic_only_and_writes(
    handle: Handle, solvers: dict
) -> None:
    sols = handle.find_solutions(PROBLEM)  # the default mode
    assert _runs(solvers) == {"fast": 0, "slow": 0, "dynamic": _runs(solvers)["dynamic"]}
    assert solvers["dynamic"].runs > 0
    assert [s.solver for s in sols] == ["test.dynamic"] and sols[0].source == "measured"
    assert [e.solver for e in handle.find_db.records(PROBLEM.key)[0].entries] == ["test.dynamic"]
    assert "DYNAMIC_HYBRID" in sols.report.skipped["test.slow"]


# -- what counts as a hit ------------------------------------------------------------------------


def test_record_of_uninstalled_or_inapplicable_solvers_is_a_miss(
    handle: Handle, solvers: dict
) -> None:
    _seed_record(handle, PROBLEM.key, {"gone.solver": 0.1})
    sols = handle.find_solutions(PROBLEM, find_mode="HYBRID")
    assert sols.report.db_hit is None and {s.source for s in sols} == {"measured"}


def test_record_over_workspace_limit_is_a_miss() -> None:
    big = TimedSolver("test.big", workspace=4096)
    small = TimedSolver("test.small", delay_s=0.002)
    h = Handle("cpu", registry=Registry.from_solvers([big, small]))
    _seed_record(h, PROBLEM.key, {"test.big": 0.1})
    sols = h.find_solutions(PROBLEM, find_mode="HYBRID", workspace_limit=1024)
    assert [s.solver for s in sols] == ["test.small"] and sols[0].source == "measured"
    assert "limit" in sols.report.skipped["test.big"]


def test_user_layer_first_then_system_layer(tmp_path: Path, solvers: dict) -> None:
    system_dir = tmp_path / "shipped"
    registry = Registry.from_solvers(solvers.values())
    writer = Handle("cpu", registry=registry, user_db_path=system_dir)
    _seed_record(writer, PROBLEM.key, {"test.slow": 0.25})
    h = Handle("cpu", registry=registry, system_db_path=system_dir)
    sols = h.find_solutions(PROBLEM, find_mode="FAST")
    assert [(s.solver, s.source) for s in sols] == [("test.slow", "system-db")]
    _seed_record(h, PROBLEM.key, {"test.fast": 0.75})
    assert [(s.solver, s.source) for s in h.find_solutions(PROBLEM, find_mode="FAST")] == [
        ("test.fast", "find-db")
    ]


def test_record_written_with_all_plugins_works_with_one(handle: Handle, solvers: dict) -> None:
    handle.find_solutions(PROBLEM, find_mode="NORMAL")
    only_one = Handle("cpu", registry=Registry.from_solvers([solvers["slow"]]))
    sols = only_one.find_solutions(PROBLEM, find_mode="FAST")
    assert [s.solver for s in sols] == ["test.slow"] and sols[0].source == "find-db"


# -- mode parsing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "mode"),
    [
        ("1", FindMode.NORMAL),
        ("normal", FindMode.NORMAL),
        ("Fast", FindMode.FAST),
        ("3", FindMode.HYBRID),
        ("dynamic_hybrid", FindMode.DYNAMIC_HYBRID),
        ("5", FindMode.DYNAMIC_HYBRID),
    ],
)
def test_find_mode_env_accepts_names_and_numbers(
    monkeypatch: pytest.MonkeyPatch, raw: str, mode: FindMode
) -> None:
    monkeypatch.setenv("MIOCORE_FIND_MODE", raw)
    assert miocore.env.find_mode() is mode


@pytest.mark.parametrize("raw", ["4", "6", "turbo", "-1"])
def test_bad_find_mode_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, handle: Handle, raw: str
) -> None:
    monkeypatch.setenv("MIOCORE_FIND_MODE", raw)
    with pytest.raises(InvalidEnvironmentError) as info:
        handle.find_solutions(PROBLEM)
    assert info.value.field == "MIOCORE_FIND_MODE" and info.value.value == raw
    if raw == "4":
        assert "reserved" in str(info.value)
    assert handle.find_db.records(PROBLEM.key) == []


def test_per_call_mode_overrides_environment(
    monkeypatch: pytest.MonkeyPatch, handle: Handle, solvers: dict
) -> None:
    monkeypatch.setenv("MIOCORE_FIND_MODE", "FAST")
    handle.find_solutions(PROBLEM, find_mode="NORMAL")
    assert solvers["slow"].runs > 0


# -- find enforce --------------------------------------------------------------------------------


@pytest.fixture
def tunable() -> TunableTimedSolver:
    return TunableTimedSolver()


@pytest.fixture
def tuned_handle(tunable: TunableTimedSolver) -> Handle:
    return Handle(
        "cpu", registry=Registry.from_solvers([tunable, TimedSolver("test.other", delay_s=0.02)])
    )


def _tuned(h: Handle) -> str | None:
    entry = h.perf_db.get(PROBLEM.key, "test.tunable")
    return entry.perf_config if entry else None


def _store_config(h: Handle, level: int) -> None:
    h.perf_db.put(PROBLEM.key, "test.tunable", f'{{"level":{level}}}', {"by": "test"})


def test_enforce_none_keeps_the_mode(tuned_handle: Handle, tunable: TunableTimedSolver) -> None:
    _seed_record(tuned_handle, PROBLEM.key, {"test.other": 1.0})
    sols = tuned_handle.find_solutions(PROBLEM, find_mode="FAST", find_enforce="NONE")
    assert sols[0].source == "find-db" and tunable.configs_run == []
    # exhaustive with no PerfDb entry tunes (NONE + exhaustive)
    tuned_handle.find_solutions(PROBLEM, find_mode="NORMAL", exhaustive=True)
    assert _tuned(tuned_handle) == '{"level":3}'


@pytest.mark.parametrize(
    "enforce", ["DB_UPDATE", "SEARCH", "SEARCH_DB_UPDATE", "DB_CLEAN", 2, 3, 4, 5]
)
def test_any_enforce_other_than_none_forces_normal(tuned_handle: Handle, enforce: object) -> None:
    _seed_record(tuned_handle, PROBLEM.key, {"test.other": 0.001})
    sols = tuned_handle.find_solutions(PROBLEM, find_mode="FAST", find_enforce=enforce)
    assert sols.report.mode == "NORMAL" and {s.source for s in sols} == {"measured"}


def test_enforce_db_update_retunes_only_when_exhaustive(
    tuned_handle: Handle, tunable: TunableTimedSolver
) -> None:
    _store_config(tuned_handle, 1)
    tuned_handle.find_solutions(PROBLEM, find_enforce="DB_UPDATE")
    assert _tuned(tuned_handle) == '{"level":1}' and set(tunable.configs_run) == {1}
    tuned_handle.find_solutions(PROBLEM, find_enforce="DB_UPDATE", exhaustive=True)
    assert _tuned(tuned_handle) == '{"level":3}'


def test_enforce_search_tunes_only_without_perfdb_entry(
    tuned_handle: Handle, tunable: TunableTimedSolver
) -> None:
    _store_config(tuned_handle, 2)
    tuned_handle.find_solutions(PROBLEM, find_enforce="SEARCH")
    assert _tuned(tuned_handle) == '{"level":2}' and set(tunable.configs_run) == {2}
    tuned_handle.perf_db.delete(PROBLEM.key)
    sols = tuned_handle.find_solutions(PROBLEM, find_enforce="SEARCH")
    assert _tuned(tuned_handle) == '{"level":3}'
    assert next(s for s in sols if s.solver == "test.tunable").perf_config == {"level": 3}


def test_enforce_search_db_update_always_retunes(
    tuned_handle: Handle, tunable: TunableTimedSolver
) -> None:
    _store_config(tuned_handle, 4)
    tuned_handle.find_solutions(PROBLEM, find_enforce="SEARCH_DB_UPDATE")
    assert set(tunable.configs_run) == {1, 2, 3, 4}
    assert _tuned(tuned_handle) == '{"level":3}'


def test_enforce_db_clean_deletes_user_entries_and_uses_defaults(
    tuned_handle: Handle, tunable: TunableTimedSolver
) -> None:
    _store_config(tuned_handle, 3)
    _seed_record(tuned_handle, PROBLEM.key, {"test.other": 0.001})
    other = small_problem(groups=2)
    _seed_record(tuned_handle, other.key, {"test.other": 0.001})
    sols = tuned_handle.find_solutions(PROBLEM, find_enforce="DB_CLEAN", exhaustive=True)
    assert _tuned(tuned_handle) is None
    assert set(tunable.configs_run) == {1}  # the default, no tuning even though exhaustive
    assert next(s for s in sols if s.solver == "test.tunable").perf_config == {"level": 1}
    assert tuned_handle.find_db.records(other.key)  # other problems keep their records


def test_find_enforce_env_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOCORE_FIND_ENFORCE", "search_db_update")
    assert miocore.env.find_enforce() is FindEnforce.SEARCH_DB_UPDATE
    monkeypatch.setenv("MIOCORE_FIND_ENFORCE", "9")
    with pytest.raises(InvalidEnvironmentError, match="MIOCORE_FIND_ENFORCE"):
        miocore.env.find_enforce()


def test_find_db_files_are_per_device(handle: Handle) -> None:
    handle.find_solutions(PROBLEM, find_mode="NORMAL")
    assert handle.device.identity in handle.find_db.user_path.name
    assert FindDb("sm90_132").records(PROBLEM.key) == []
