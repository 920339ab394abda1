"""``miocore plugins``: each plugin's distribution, version, status and solvers."""

from __future__ import annotations

import argparse
import json
from typing import Any

from miocore.cli.output import stdout_console


def _plugin_rows(registry: Any) -> list[dict[str, Any]]:
    return [
        {
            "plugin": p.name,
            "distribution": p.distribution,
            "version": p.version,
            "status": p.status,
            "error": p.error or "",
            "solvers": list(p.solvers),
        }
        for p in sorted(registry.plugins, key=lambda p: (p.name, p.distribution))
    ]


def run_plugins(args: argparse.Namespace, registry: Any = None) -> int:
    """``miocore plugins``: each plugin's distribution, version, status and solvers.

    Status is ``active``, ``disabled`` (with what disabled it) or ``failed`` (with why). Exit
    status 0 even when a plugin failed: the listing is the answer; ``--check`` makes a failed
    plugin exit 1, for deployment scripts.
    """
    from rich.table import Table

    from miocore.solver.registry import default_registry

    reg = registry if registry is not None else default_registry()
    rows = _plugin_rows(reg)
    failed = any(r["status"] == "failed" for r in rows)
    status = 1 if args.check and failed else 0
    if args.json:
        print(json.dumps({"plugins": rows}, indent=2))
        return status
    console = stdout_console()
    if not rows:
        console.print(
            "No miocore plugin is installed (entry point group 'miocore'). Install one, for "
            "example `pip install miocore-gemm`."
        )
        return status
    table = Table(title=f"Plugins ({len(rows)})")
    for col in ("plugin", "distribution", "version", "status", "solvers", "details"):
        table.add_column(col)
    styles = {"active": "green", "disabled": "yellow", "failed": "red"}
    for row in rows:
        table.add_row(
            row["plugin"],
            row["distribution"],
            row["version"],
            f"[{styles.get(row['status'], '')}]{row['status']}[/]",
            ", ".join(row["solvers"]),
            row["error"],
        )
    console.print(table)
    if failed:
        console.print(
            "A failed plugin is skipped; the others work. Disable it with "
            "MIOCORE_DISABLE_PLUGINS=<plugin or distribution> (or all) until it is fixed."
        )
    return status


def add_parser(subparsers: Any) -> None:
    """Add ``plugins``."""
    plugins = subparsers.add_parser(
        "plugins",
        help="list installed plugins: distribution, version, status and solvers",
        description="List every plugin of the 'miocore' entry point group with its "
        "distribution, version, status (active, disabled, failed and why) and the solvers "
        "it provides.",
        allow_abbrev=False,
    )
    plugins.add_argument("--json", action="store_true", help="print JSON instead of a table")
    plugins.add_argument("--check", action="store_true", help="exit 1 when a plugin failed to load")
    plugins.set_defaults(handler=run_plugins)
