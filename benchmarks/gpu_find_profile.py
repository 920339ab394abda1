"""Where a first find's time goes: every problem of a model's ``prepare`` split by phase.

One process per pass (the handle reads the user database folder once): run it first with a
cold binary cache to fill it, then again with an empty database to measure a first find with
a warm binary cache. The find machinery's phases are wrapped with wall clocks (nested phases
are named by their parent: ``alternatives.time`` is timing inside the alternatives pass), and
``build`` and ``time`` are also split per solver family; ``--profile`` adds a cProfile of the
whole pass (its overhead inflates the Python-heavy parts, so compare phases from a pass
without it).

    python benchmarks/gpu_find_profile.py --model resnet50 --db /tmp/db1 --out pass.json
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import json
import os
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

#: phase -> [seconds, calls]
TOTALS: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
#: (phase, solver) -> [seconds, calls]
PER_SOLVER: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
_STACK: list[str] = []


def _wrap(owner: Any, attr: str, phase: str, solver_of: Callable[..., str] | None = None) -> None:
    """Replace ``owner.attr`` by a wrapper that adds its wall time to ``phase``."""
    inner = getattr(owner, attr)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        name = ".".join([*_STACK[-1:], phase]) if _STACK else phase
        _STACK.append(phase)
        start = time.perf_counter()
        failed = True
        try:
            out = inner(*args, **kwargs)
            failed = False
            return out
        finally:
            spent = time.perf_counter() - start
            _STACK.pop()
            TOTALS[name][0] += spent
            TOTALS[name][1] += 1
            if solver_of is not None:
                try:
                    solver = solver_of(*args, **kwargs)
                except Exception:
                    solver = "?"
                per = PER_SOLVER[(name, solver + (" (raised)" if failed else ""))]
                per[0] += spent
                per[1] += 1

    setattr(owner, attr, wrapper)


def _device_of(handle: Any) -> str:
    """The device identity a cuDNN handle was made for (the loader's cache key)."""
    from miocore_cudnn import _loader

    for device, made in getattr(_loader, "_handles", {}).items():
        if made is handle:
            return str(device)
    return ""


def _family(name: str) -> str:
    """A solver's family for the per-solver table: cuDNN's engines as one row each kind."""
    return name if not name.startswith("cudnn.") else "cudnn.*"


#: (problem, device identity, math mode) of every cuDNN plan set made, for --plan-probe
SEEN_PLANS: list[tuple[Any, str, str]] = []
#: cuDNN engines' reasons for not applying, with counts
REASONS: dict[str, int] = defaultdict(int)


def _note_reasons(handle: Any) -> None:
    report = getattr(handle, "last_report", None)
    for name, reason in getattr(report, "not_applicable", {}).items():
        if name.startswith("cudnn."):
            REASONS[f"{name}: {reason[:150]}"] += 1


def plan_probe(count: int, threads: int) -> dict[str, Any]:
    """Build every listed configuration's plan of ``count`` problems met in the pass from a
    cold plan cache, one thread against ``threads`` (does cuDNN's build leave the GIL?)."""
    from concurrent.futures import ThreadPoolExecutor

    from miocore_cudnn import _loader, _plans

    cudnn, _ = _loader.frontend()
    out: dict[str, Any] = {}
    picked = SEEN_PLANS[:count]
    for label, workers in (("sequential", 1), (f"{threads} threads", threads), ("again", 1)):
        _plans.clear_cache()
        start = time.perf_counter()
        built = failed = 0
        for problem, device, mode in picked:
            handle, _ = _loader.handle_for(device)
            plans = _plans.plans_for(cudnn, handle, device, problem, mode)
            configs = [c for cs in plans.by_engine.values() for c in cs]

            def build(config: Any, plans: Any = plans) -> bool:
                try:
                    plans.build(config)
                    return True
                except Exception:
                    return False

            if workers == 1:
                results = [build(c) for c in configs]
            else:
                with ThreadPoolExecutor(workers) as pool:
                    results = list(pool.map(build, configs))
            built += sum(results)
            failed += len(results) - sum(results)
        out[label] = {
            "s": time.perf_counter() - start,
            "problems": len(picked),
            "built": built,
            "failed": failed,
        }
    return out


def rtc_probe(db: Path, count: int, dynamic: bool) -> dict[str, Any]:
    """Build the run-time compiled configurations cuDNN lists for ``count`` problems of an
    earlier pass's database (this process fresh: nothing compiled yet), in the plain graph
    or (``dynamic``) in a dynamic-shape graph sharing one kernel cache, which cuDNN says
    reuses a compiled kernel across same-topology graphs."""
    import sqlite3

    from miocore_cudnn import _loader, _plans

    from miocore.problem.conv import ConvProblem

    cudnn, _ = _loader.frontend()
    device = f"{torch.cuda.get_device_name()}"
    handle = _loader.CudnnHandle(cudnn)
    (path,) = db.glob("*.db")
    keys = [k for (k,) in sqlite3.connect(path).execute("select distinct key from find_db")]
    cache = cudnn.create_kernel_cache() if dynamic else None
    rtc_note = cudnn.behavior_note.RUNTIME_COMPILATION
    out: dict[str, Any] = {"dynamic": dynamic, "device": device, "problems": 0, "rtc": 0}
    out.update(built=0, found=0, build_s=0.0, heuristics_s=0.0, errors={})
    for key in keys[:count]:
        problem = ConvProblem.from_key(key)
        start = time.perf_counter()
        plans = _plans.ProblemPlans(cudnn, handle, problem, "exact")
        graph = None
        if dynamic:
            try:
                graph = _plans.build_graph(
                    cudnn, handle, problem, kernel_cache=cache, is_dynamic_shape_enabled=True
                )
                graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            except Exception as exc:
                out["errors"][str(exc)[:120]] = out["errors"].get(str(exc)[:120], 0) + 1
                graph = None
        out["heuristics_s"] += time.perf_counter() - start
        out["problems"] += 1
        for configs in plans.by_engine.values():
            for config in configs:
                if config.graph is not None:
                    continue
                notes = list(plans.graph.get_behavior_notes_for_plan_at_index(config.index))
                if rtc_note not in notes:
                    continue
                out["rtc"] += 1
                start = time.perf_counter()
                try:
                    if graph is None:
                        if dynamic:
                            continue
                        plans.graph.build_plan_at_index(config.index)
                    else:
                        names = [
                            graph.get_plan_name_at_index(i)
                            for i in range(graph.get_execution_plan_count())
                        ]
                        if config.tag not in names:
                            continue
                        out["found"] += 1
                        graph.build_plan_at_index(names.index(config.tag))
                    out["built"] += 1
                except Exception as exc:
                    text = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else "?"
                    out["errors"][text] = out["errors"].get(text, 0) + 1
                out["build_s"] += time.perf_counter() - start
    return out


#: Per solver family: timed runs of find's candidates, split into the first (warm-up) run
#: and the rest: [runs, wall s, device ms] each.
RUNS: dict[str, dict[str, list[float]]] = defaultdict(
    lambda: {"first": [0, 0.0, 0.0], "rest": [0, 0.0, 0.0]}
)
_CURRENT: list[Any] = [None, 0]  # (solver family of the candidate being timed, runs so far)


def _time_runs() -> None:
    """Count each candidate's timed runs (``backend.time_ms`` inside ``FindEngine._time``),
    with their wall and device time, the warm-up run apart."""
    from miocore.backends._gpu.base import GpuBackend
    from miocore.find import engine

    timed = engine.FindEngine._time

    def each_candidate(self: Any, canon: Any, entry: Any, *args: Any, **kwargs: Any) -> Any:
        _CURRENT[0], _CURRENT[1] = _family(entry.solver), 0
        try:
            return timed(self, canon, entry, *args, **kwargs)
        finally:
            _CURRENT[0] = None

    engine.FindEngine._time = each_candidate  # type: ignore[method-assign]
    time_ms = GpuBackend.time_ms

    def each_run(self: Any, run: Any) -> float:
        start = time.perf_counter()
        device_ms = time_ms(self, run)
        if _CURRENT[0] is not None:
            row = RUNS[_CURRENT[0]]["first" if _CURRENT[1] == 0 else "rest"]
            row[0] += 1
            row[1] += time.perf_counter() - start
            row[2] += device_ms
            _CURRENT[1] += 1
        return device_ms

    GpuBackend.time_ms = each_run  # type: ignore[method-assign]


def hide_from_system_db(model: Any, x: Any, folder: Path) -> int:
    """Point ``MIOCORE_SYSTEM_DB_PATH`` at a copy of the system folder in ``folder`` without
    the records of ``model``'s problems (every direction), so its first find is measured even
    where the shipped database holds its layers; the model and tables stay. Returns how many
    find-db entries (one a solver) were dropped. Call before the first handle is made."""
    import shutil
    import sqlite3

    from miocore.db._common import default_system_dir
    from miocore.db.packed import PACKED_SUFFIX, readable_db_file
    from miocore.tune.sources import problems_from_torch

    keys = [
        p.key
        for p in problems_from_torch(
            model, x, directions=("forward", "backward_data", "backward_weights")
        )
    ]
    shutil.copytree(default_system_dir(), folder, dirs_exist_ok=True)
    # The shipped databases are packed (<device>.db.xz): a plain copy beside each, which wins
    # over its packed twin, is the one edited (before this, nothing was hidden from them)
    for packed in folder.glob(f"*.db{PACKED_SUFFIX}"):
        plain = packed.with_name(packed.name.removesuffix(PACKED_SUFFIX))
        if not plain.exists():
            shutil.copyfile(readable_db_file(packed), plain)
    dropped = 0
    for path in folder.glob("*.db"):
        path.chmod(0o644)  # an installed package's files may be read-only
        with sqlite3.connect(path) as con:
            for table in ("find_db", "perf_db"):
                before = con.total_changes
                con.executemany(f"delete from {table} where key = ?", [(k,) for k in keys])
                if table == "find_db":
                    dropped += con.total_changes - before
    os.environ["MIOCORE_SYSTEM_DB_PATH"] = str(folder)
    return dropped


def instrument() -> None:
    """Wrap the find machinery's phases (must run before the first find)."""
    from miocore.find import engine, handle, runner, verify
    from miocore.find.candidates import Candidates

    _wrap(handle.Handle, "find_solutions", "find")
    found = handle.Handle.find_solutions

    def noting(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return found(self, *args, **kwargs)
        finally:
            _note_reasons(self)

    handle.Handle.find_solutions = noting  # type: ignore[method-assign]
    _wrap(handle, "recorded_hit", "hit_lookup")
    _wrap(Candidates, "select", "candidates")
    _wrap(engine, "dynamic_only", "dynamic_only")
    _wrap(engine.FindEngine, "_buffers", "random_data")
    _wrap(engine.FindEngine, "_precompile", "precompile")
    _wrap(engine.FindEngine, "_alternatives", "alternatives")
    _wrap(engine.FindEngine, "write_record", "write_record")
    _wrap(runner.Runner, "build", "build", lambda self, problem, reg, config: _family(reg.name))
    _wrap(
        engine.FindEngine,
        "_time",
        "time",
        lambda self, canon, entry, *a, **k: _family(entry.solver),
    )
    _time_runs()
    _wrap(verify.AccuracyCheck, "__init__", "verify_setup")
    _wrap(verify.AccuracyCheck, "measure", "verify")
    _wrap(verify.AccuracyCheck, "poison", "poison")
    _wrap(verify, "against_plain_paths", "verify_plain")
    try:  # cuDNN's side, where miocore-cudnn is installed
        from miocore_cudnn import _plans
    except ImportError:
        return
    _wrap(_plans.ProblemPlans, "__init__", "cudnn_heuristics")
    made = _plans.ProblemPlans.__init__

    def remember(
        self: Any, cudnn: Any, handle: Any, problem: Any, math_mode: str, *rest: Any
    ) -> None:
        made(self, cudnn, handle, problem, math_mode, *rest)
        SEEN_PLANS.append((problem, _device_of(handle), math_mode))

    _plans.ProblemPlans.__init__ = remember  # type: ignore[method-assign]
    _wrap(
        _plans.ProblemPlans,
        "build",
        "cudnn_plan_build",
        lambda self, config: f"eng{config.engine}" + (" built" if config.workspace else ""),
    )
    _wrap(_plans.ProblemPlans, "is_transform", "cudnn_is_transform")
    _wrap(_plans.ProblemPlans, "_variant", "cudnn_variant")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--db", type=Path, required=True, help="user database folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile stats here")
    parser.add_argument("--forward-only", action="store_true")
    parser.add_argument(
        "--plan-probe", type=int, default=0, help="rebuild the plans of this many problems"
    )
    parser.add_argument(
        "--rtc-probe",
        choices=["plain", "dynamic"],
        default=None,
        help="only build the run-time compiled configurations of --db's problems (see rtc_probe)",
    )
    parser.add_argument("--rtc-count", type=int, default=40)
    parser.add_argument(
        "--hide-from-system-db",
        type=Path,
        default=None,
        metavar="DIR",
        help="measure against a copy of the system databases (made in DIR) without the "
        "model's own layers (see hide_from_system_db)",
    )
    args = parser.parse_args()
    if args.rtc_probe:
        result = rtc_probe(args.db, args.rtc_count, args.rtc_probe == "dynamic")
        args.out.write_text(json.dumps(result, indent=1))
        print("rtc probe:", json.dumps(result))
        return
    os.environ["MIOCORE_USER_DB_PATH"] = str(args.db)
    from gpu_models import DTYPES, build

    import miocore.torch as mt

    instrument()
    dtype = DTYPES[args.dtype]
    torch.backends.cudnn.allow_tf32 = True
    model, shape = build(args.model)
    model = model.to("cuda", dtype=dtype, memory_format=torch.channels_last)
    x = torch.randn(shape, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    hidden = None
    if args.hide_from_system_db is not None:
        hidden = hide_from_system_db(model, x, args.hide_from_system_db)
        print(f"system database copy without the model's layers: {hidden} records dropped")
    mio = mt.convert(copy.deepcopy(model))
    profiler = cProfile.Profile() if args.profile else None
    torch.cuda.synchronize()
    start = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    mt.prepare(mio, x, backward=not args.forward_only, progress=False)
    torch.cuda.synchronize()
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - start
    finds = int(TOTALS["find"][1])
    row: dict[str, Any] = {
        "model": args.model,
        "dtype": args.dtype,
        "wall_s": wall,
        "finds": finds,
        "ms_per_find": 1e3 * wall / max(1, finds),
        "system_records_hidden": hidden,
        "phases": {k: {"s": v[0], "calls": v[1]} for k, v in sorted(TOTALS.items())},
        "per_solver": [
            {"phase": p, "solver": s, "s": v[0], "calls": v[1]}
            for (p, s), v in sorted(PER_SOLVER.items(), key=lambda kv: -kv[1][0])
        ],
    }
    row["timed_runs"] = {
        family: {part: dict(zip(("runs", "wall_s", "device_ms"), v, strict=True))
                 for part, v in parts.items()}
        for family, parts in RUNS.items()
    }  # fmt: skip
    row["cudnn_not_applicable"] = dict(sorted(REASONS.items(), key=lambda kv: -kv[1]))
    if args.plan_probe:
        row["plan_probe"] = plan_probe(args.plan_probe, 8)
        print("plan probe:", json.dumps(row["plan_probe"]))
    if profiler is not None:
        stats_text = io.StringIO()
        stats = pstats.Stats(profiler, stream=stats_text)
        stats.sort_stats("cumulative").print_stats(60)
        stats.sort_stats("tottime").print_stats(40)
        args.profile.write_text(stats_text.getvalue())
    args.out.write_text(json.dumps(row, indent=1))
    print(
        f"{args.model} {args.dtype}: {finds} finds in {wall:.2f} s "
        f"({row['ms_per_find']:.0f} ms each)"
    )
    for name, (spent, calls) in sorted(TOTALS.items(), key=lambda kv: -kv[1][0]):
        print(
            f"  {name:28s} {spent:8.3f} s {int(calls):6d} calls "
            f"{1e3 * spent / max(1, finds):8.1f} ms/find"
        )
    for family, parts in sorted(RUNS.items(), key=lambda kv: -kv[1]["rest"][1]):
        first, rest = parts["first"], parts["rest"]
        print(
            f"  runs {family:24s} first {int(first[0]):5d} {first[1]:7.3f} s "
            f"(device {first[2] / 1e3:6.3f} s)  rest {int(rest[0]):5d} {rest[1]:7.3f} s "
            f"(device {rest[2] / 1e3:6.3f} s)"
        )
    for item in row["per_solver"][:25]:
        print(f"  {item['phase']:24s} {item['solver']:28s} {item['s']:8.3f} s {item['calls']:5d}")


if __name__ == "__main__":
    main()
