"""``miocore solvers``: what is installed; with problem flags, what applies and why not."""

from __future__ import annotations

import argparse
import json
from typing import Any

from miocore.cli.driver_flags import (
    add_driver_arguments,
    build_problems,
    describe_problem,
    driver_values,
    given_driver_flags,
)
from miocore.cli.output import fmt_bytes, stdout_console
from miocore.errors import NotApplicableError
from miocore.problem.conv import ConvProblem
from miocore.problem.dtypes import DataType
from miocore.solver.numerics import format_notes


def _made(reg: Any) -> Any:
    """``reg``'s solver, or None when its lazy record fails to make it (listed, not fatal)."""
    from miocore.errors import PluginError

    try:
        return reg.solver
    except PluginError:
        return None


def _solver_rows(registry: Any) -> list[dict[str, Any]]:
    from miocore.solver.interface import TunableSolver

    rows = []
    for r in registry.solvers:
        solver = _made(r)
        rows.append(
            {
                "name": r.name,
                "id": r.id,
                "algorithm": r.algorithm.value,
                "dynamic": bool(getattr(solver, "is_dynamic", False)),
                "tunable": isinstance(solver, TunableSolver),
                "notes": sorted(getattr(solver, "numerical_notes", ())),
                "backends": sorted(r.backends),
                "plugin": r.plugin,
                "distribution": r.distribution,
                "version": r.version,
            }
        )
        if solver is None:
            rows[-1]["error"] = "its module fails to import or differs from its record"
    return rows


def _applicability_rows(handle: Any, problem: ConvProblem) -> list[dict[str, Any]]:
    from miocore import env
    from miocore.solver.interface import normalize_applicability

    rows = []
    only = env.only_solver()
    for reg in handle.registry.solvers:
        row: dict[str, Any] = {
            "solver": reg.name,
            "algorithm": reg.algorithm.value,
            "notes": sorted(getattr(_made(reg), "numerical_notes", ())),
            "applicable": False,
            "workspace_size": None,
            "reason": "",
        }
        rows.append(row)
        if handle.backend.name not in reg.backends:
            row["reason"] = f"runs on {', '.join(sorted(reg.backends))}, not {handle.backend.name}"
            continue
        try:
            answer = normalize_applicability(
                reg.solver.is_applicable(handle.context, problem.canonical)
            )
        except Exception as exc:  # a broken solver is reported, never fatal
            row["reason"] = f"is_applicable raised {type(exc).__name__}: {exc}"
            continue
        if not answer.ok:
            row["reason"] = answer.reason or "not applicable"
            continue
        row["applicable"] = True
        try:
            row["workspace_size"] = handle.get_solution_workspace_size(problem, reg.name)
        except NotApplicableError as exc:  # refused at setup (a solver's deferred_setup)
            row["applicable"] = False
            row["reason"] = str(exc)
            continue
        except Exception as exc:
            row["reason"] = f"workspace_size raised {type(exc).__name__}: {exc}"
        notes = []
        if not env.algorithm_enabled(reg.algorithm.value):
            notes.append(f"find skips it: MIOCORE_DEBUG_CONV_{reg.algorithm.value.upper()}=0")
        if only is not None and only not in (reg.name, str(reg.id)):
            notes.append("find skips it: MIOCORE_FIND_ONLY_SOLVER")
        if notes:
            row["reason"] = "; ".join([row["reason"], *notes] if row["reason"] else notes)
    return rows


def run_solvers(args: argparse.Namespace, registry: Any = None) -> int:
    """``miocore solvers``: what is installed; with problem flags, what applies and why not."""
    from rich.table import Table

    from miocore.find.handle import Handle
    from miocore.solver.registry import default_registry

    problems: list[ConvProblem] = []
    if given_driver_flags(args):
        problems = build_problems(driver_values(args), args.dtype or DataType.FLOAT32)
    reg = registry if registry is not None else default_registry()
    handle = Handle(args.device, registry=reg) if problems else None
    solvers = _solver_rows(reg)
    failures = [
        {
            "plugin": p.name,
            "distribution": p.distribution,
            "version": p.version,
            "status": p.status,
            "error": p.error or "",
        }
        for p in reg.plugins
        if p.status != "active"
    ]
    applicability = [
        {"direction": p.direction.value, "key": p.key, "solvers": _applicability_rows(handle, p)}
        for p in problems
    ]
    if args.json:
        print(
            json.dumps(
                {"solvers": solvers, "plugin_failures": failures, "problems": applicability},
                indent=2,
            )
        )
        return 0

    console = stdout_console()
    if solvers:
        table = Table(title=f"Installed solvers ({len(solvers)})")
        for col in (
            "name",
            "id",
            "algorithm",
            "dynamic",
            "tunable",
            "notes",
            "backends",
            "plugin",
            "distribution",
            "version",
        ):
            table.add_column(col, justify="right" if col == "id" else "left")
        for row in solvers:
            table.add_row(
                row["name"],
                str(row["id"]),
                row["algorithm"],
                "yes" if row["dynamic"] else "no",
                "yes" if row["tunable"] else "no",
                format_notes(row["notes"]),
                ",".join(row["backends"]),
                row["plugin"],
                row["distribution"],
                row["version"],
            )
        console.print(table)
    else:
        console.print(
            "No solver plugin is installed: find has nothing to choose from. Install "
            "one (for example `pip install miocore-gemm`) or check "
            "MIOCORE_DISABLE_PLUGINS."
        )
    if failures:
        table = Table(title="Plugins not loaded")
        for col in ("plugin", "distribution", "version", "status", "error"):
            table.add_column(col)
        for row in failures:
            table.add_row(
                row["plugin"], row["distribution"], row["version"], row["status"], row["error"]
            )
        console.print(table)
    if problems:
        console.print(describe_problem(problems[0]), soft_wrap=True)
    for entry in applicability:
        rows = entry["solvers"]
        applies = sum(r["applicable"] for r in rows)
        console.print(
            f"{entry['direction']} {entry['key']}: {applies} of {len(rows)} solvers apply",
            soft_wrap=True,
        )
        table = Table()
        for col in ("solver", "algorithm", "notes", "applicable", "workspace", "reason"):
            table.add_column(col)
        for row in rows:
            ws = row["workspace_size"]
            table.add_row(
                row["solver"],
                row["algorithm"],
                format_notes(row["notes"]),
                "yes" if row["applicable"] else "no",
                fmt_bytes(ws) if ws is not None else "",
                row["reason"],
            )
        console.print(table)
    return 0


def add_parser(subparsers: Any) -> None:
    """Add ``solvers``."""
    solvers = subparsers.add_parser(
        "solvers",
        help="list installed solvers; with problem flags, which apply and why not",
        description="List the installed solvers and the plugins that failed to load. Given "
        "problem flags (as for conv), say for each direction which solvers apply, their "
        "workspace, and why the others do not.",
        allow_abbrev=False,
    )
    add_driver_arguments(solvers)
    solvers.add_argument(
        "--dtype",
        default=None,
        type=lambda v: DataType.parse(v, "--dtype"),
        help="element type of the problem: float32 (default), float16, bfloat16",
    )
    solvers.add_argument("--device", default="cpu", help="device to check against (default: cpu)")
    solvers.add_argument("--json", action="store_true", help="print JSON instead of tables")
    solvers.set_defaults(handler=run_solvers)
