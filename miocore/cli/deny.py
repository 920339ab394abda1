"""``miocore db deny list/add/remove``: the per-device deny list (``miocore.db.denylist``).

:func:`add_deny_parser` adds the ``deny`` sub-command under ``miocore db``; the ``db`` command
dispatches ``deny`` to :func:`run_deny_command`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from miocore.db.deny_entries import DenyEntry
from miocore.db.denylist import DenyList
from miocore.errors import MiocoreError


def add_deny_parser(db_subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``deny`` (with ``list``, ``add``, ``remove``) to ``miocore db``'s sub-parsers;
    ``common`` carries ``--device``, ``--user-db-path`` and ``--system-db-path``."""
    deny = db_subparsers.add_parser(
        "deny",
        help="list, add or remove deny-list entries (solvers find must not use)",
        description="The per-device deny list: solvers (in a version range, on problems whose "
        "key matches a pattern) that find, immediate mode and FindDb hits skip. The user "
        "list is written here and by find when a candidate is proven wrong; the system list "
        "ships with the package. Format: docs/numerics.md.",
    )
    deny.set_defaults(deny_command=None)
    sub = deny.add_subparsers(dest="deny_command", metavar="COMMAND")
    show = sub.add_parser("list", parents=[common], help="print both layers' entries")
    show.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add = sub.add_parser("add", parents=[common], help="deny a solver (user list)")
    add.add_argument("solver", help="solver name, as `miocore solvers` prints it")
    add.add_argument("--reason", required=True, help="why (one line, no '|')")
    add.add_argument("--versions", default="*", help="version range, e.g. '<0.2' (default *)")
    add.add_argument("--key", default="*", help="FindDb key pattern, e.g. '*-FP16-F' (default *)")
    remove = sub.add_parser("remove", parents=[common], help="remove user-list entries")
    remove.add_argument("solver", help="solver name")
    remove.add_argument("--key", help="only the entries with exactly this key pattern")
    remove.add_argument("--versions", help="only the entries with exactly this version range")


def _deny_list(args: argparse.Namespace) -> DenyList:
    from miocore.backends.cpu import cpu_device_info

    return DenyList(
        args.device or cpu_device_info().identity,
        user_dir=args.user_db_path,
        system_dir=args.system_db_path,
    )


def run_deny_command(args: argparse.Namespace) -> int:
    """Run a parsed ``miocore db deny ...`` command; returns the exit status."""
    command = getattr(args, "deny_command", None)
    if command is None:
        print("miocore db deny: choose a command: list, add, remove", file=sys.stderr)
        return 2
    try:
        deny = _deny_list(args)
        if command == "list":
            return _list(deny, args.json)
        if command == "add":
            entry = deny.add(
                DenyEntry(
                    solver=args.solver,
                    reason=args.reason,
                    versions=args.versions,
                    key_pattern=args.key,
                )
            )
            print(f"denied in {deny.user_path}: {entry.to_line()}", end="")
            return 0
        removed = deny.remove(args.solver, key_pattern=args.key, versions=args.versions)
        if not removed:
            in_system = [e for layer, e in deny.entries() if layer == "system"]
            where = (
                f"; {args.solver} is denied by the system list {deny.system_path} (read only)"
                if any(e.solver == args.solver for e in in_system)
                else ""
            )
            print(f"miocore db deny remove: no user entry matched{where}", file=sys.stderr)
            return 1
        for entry in removed:
            print(f"removed: {entry.to_line()}", end="")
        return 0
    except MiocoreError as exc:
        print(f"miocore db deny {command}: error: {exc}", file=sys.stderr)
        return 1


def _list(deny: DenyList, as_json: bool) -> int:
    entries = deny.entries()
    problems = deny.problems
    if as_json:
        print(
            json.dumps(
                {
                    "device": deny.device,
                    "user_path": str(deny.user_path),
                    "system_path": str(deny.system_path),
                    "entries": [
                        {
                            "layer": layer,
                            "solver": e.solver,
                            "versions": e.versions,
                            "key_pattern": e.key_pattern,
                            "reason": e.reason,
                            "when": e.when,
                        }
                        for layer, e in entries
                    ],
                    "skipped_lines": [str(p) for p in problems],
                },
                indent=2,
            )
        )
        return 0
    print(f"deny list of {deny.device}: user {deny.user_path}, system {deny.system_path}")
    if not entries:
        print("  (no entries)")
    for layer, e in entries:
        print(f"  [{layer}] {e.to_line()}", end="")
    for problem in problems:
        print(f"  skipped {problem}")
    return 0
