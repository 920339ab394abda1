"""``miocore db``: show, locate, export, import, merge and clean the FindDb and PerfDb.

The main command line calls :func:`add_db_parser` with its sub-parsers and dispatches
``args.func(args)``, which is :func:`run_db_command`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

from miocore.cli.deny import add_deny_parser, run_deny_command
from miocore.db import FindDb, PerfDb
from miocore.errors import DatabaseError, MiocoreError


def _default_device() -> str:
    from miocore.backends.cpu import cpu_device_info

    return cpu_device_info().identity


def add_db_parser(subparsers: Any) -> None:
    """Add the ``db`` sub-command (and its own sub-commands) to an argparse sub-parsers object."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--device",
        help="device identity naming the database files (default: this CPU's, e.g. "
        "cpu_x86_64_16; GPUs look like sm90_132 or gfx90a104)",
    )
    common.add_argument(
        "--user-db-path",
        metavar="DIR",
        type=Path,
        help="user database folder (default: $MIOCORE_USER_DB_PATH, else the user cache)",
    )
    common.add_argument(
        "--system-db-path",
        metavar="DIR",
        type=Path,
        help="system database folder (default: $MIOCORE_SYSTEM_DB_PATH, else miocore/data/db)",
    )

    db = subparsers.add_parser(
        "db",
        help="inspect and maintain the FindDb and PerfDb",
        description="Inspect and maintain the per-device FindDb and PerfDb (user and system "
        "layers): show records, say where the files are, export/import MIOpen's text FindDb "
        "format, merge databases, clean entries.",
    )
    db.set_defaults(func=run_db_command, db_command=None)
    sub = db.add_subparsers(dest="db_command", metavar="COMMAND")

    show = sub.add_parser("show", parents=[common], help="show FindDb (and PerfDb) records")
    show.add_argument("--key", help="only this problem key")
    show.add_argument("--layer", choices=["user", "system", "all"], default="all")
    show.add_argument("--perf", action="store_true", help="also show PerfDb entries")
    show.add_argument("--json", action="store_true", help="print JSON instead of tables")

    path = sub.add_parser("path", parents=[common], help="where the database files are")
    path.add_argument("--json", action="store_true", help="print JSON")

    export = sub.add_parser(
        "export", parents=[common], help="write a layer as MIOpen's text FindDb ('-': stdout)"
    )
    export.add_argument("file")
    export.add_argument("--layer", choices=["user", "system"], default="user")

    imp = sub.add_parser(
        "import",
        parents=[common],
        help="import a MIOpen text FindDb (.fdb.txt, .bz2, .gz) into the user layer "
        "(replaces the records of its keys); lines that cannot be imported are skipped and "
        "reported by reason",
        description="The device defaults to the one in MIOpen's file name "
        "(gfx942130.HIP.fdb.txt -> gfx942130); a file named for another device than --device "
        "is refused.",
    )
    imp.add_argument("file", type=Path)
    imp.add_argument(
        "--strict", action="store_true", help="import nothing if any line cannot be imported"
    )
    imp.add_argument(
        "--skip-bad-lines", action="store_true", help="the default; kept for older scripts"
    )

    merge = sub.add_parser(
        "merge",
        parents=[common],
        help="merge a database (SQLite or text) into the user layer: per solver the newer "
        "solver revision wins, else the faster time",
    )
    merge.add_argument("file", type=Path)
    merge.add_argument("--skip-bad-lines", action="store_true", help="for text sources")

    clean = sub.add_parser(
        "clean",
        parents=[common],
        help="delete user-layer entries (FindDb and PerfDb) by key, solver, stale solver or all",
    )
    clean.add_argument("--key", help="delete the records of this problem key")
    clean.add_argument("--solver", help="delete this solver's entries (across keys)")
    clean.add_argument(
        "--stale", action="store_true", help="delete entries of solvers that are not installed"
    )
    clean.add_argument("--all", action="store_true", help="delete every user entry")
    pack = sub.add_parser(
        "pack",
        help="pack a SQLite database as <file>.xz, the form miocore ships system databases in "
        "(expanded into the cache on first read)",
    )
    pack.add_argument("file", type=Path)
    add_deny_parser(sub, common)


def run_db_command(args: argparse.Namespace) -> int:
    """Run a parsed ``miocore db ...`` command; returns the process exit status."""
    command = getattr(args, "db_command", None)
    if command is None:
        print(
            "miocore db: choose a command: show, path, export, import, merge, clean, pack, deny",
            file=sys.stderr,
        )
        return 2
    try:
        return _COMMANDS[command](args)
    except MiocoreError as exc:
        print(f"miocore db {command}: error: {exc}", file=sys.stderr)
        return 1


def _dbs(args: argparse.Namespace) -> tuple[FindDb, PerfDb]:
    device = args.device or _default_device()
    kwargs = {"user_dir": args.user_db_path, "system_dir": args.system_db_path}
    return FindDb(device, **kwargs), PerfDb(device, **kwargs)


def _file_info(path: Path) -> dict[str, Any]:
    info: dict[str, Any] = {"path": str(path), "exists": False}
    try:
        info["exists"] = path.is_file()
        if info["exists"]:
            info["bytes"] = path.stat().st_size
            wal = path.with_name(path.name + "-wal")
            if wal.exists():
                info["wal_bytes"] = wal.stat().st_size
    except OSError as exc:  # a folder we may not enter: the status line says so
        info["error"] = str(exc)
    return info


def _cmd_path(args: argparse.Namespace) -> int:
    find, _ = _dbs(args)
    status = find.probe()
    data = {
        "device": find.device,
        "user": {**_file_info(find.user_path), "journal_mode": find.journal_mode},
        "system": _file_info(find.system_path),
        "status": status.as_dict(),
    }
    from miocore.db._common import default_system_dir
    from miocore.db.packed import packed_twin

    folder = args.system_db_path or default_system_dir()
    packed = packed_twin(Path(folder) / f"{find.device}.db")
    if find.system_path != Path(folder) / f"{find.device}.db" and packed.is_file():
        data["system"]["expanded_from"] = str(packed)  # shipped packed, read from the cache
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"device: {find.device}")
    for layer in ("user", "system"):
        info = data[layer]
        if info["exists"]:
            state = f"exists, {info['bytes']:,} bytes"
            if "wal_bytes" in info:
                state += f" + {info['wal_bytes']:,} bytes of WAL"
        else:
            state = "does not exist" + (" yet" if layer == "user" else "")
        if "expanded_from" in info:
            state += f", expanded from {info['expanded_from']}"
        # Plain lines, not a table: paths must stay whole for copy and paste.
        print(f"{layer}: {info['path']} ({state})")
    print(
        f"user journal: {data['user']['journal_mode']} (rollback journal on network file systems)"
    )
    print(f"status: {status.line()}")
    if not status.ok:
        print(
            "  results will be kept in memory only; set MIOCORE_USER_DB_PATH to a writable "
            "local folder (or pass --user-db-path)"
        )
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    find, perf = _dbs(args)
    layers = ["user", "system"] if args.layer == "all" else [args.layer]
    records = []
    for layer in layers:
        if args.key:
            rec = find.record(args.key, layer)
            records.extend([rec] if rec else [])
        else:
            records.extend(find.items(layer))
    perf_entries = []
    if args.perf:
        perf_entries = [
            e for layer in layers for e in perf.items(layer) if not args.key or e.key == args.key
        ]
    usage = find.usage()
    if args.json:
        out: dict[str, Any] = {
            "device": find.device,
            "user_usage": usage,
            "status": find.status.as_dict(),
            "find_db": [
                {
                    "key": r.key,
                    "layer": r.layer,
                    "entries": [
                        {
                            "solver": e.solver,
                            "algorithm": e.algorithm,
                            "time_ms": e.time_ms,
                            "spread_ms": e.spread_ms,
                            "count": e.count,
                            "workspace_size": e.workspace_size,
                            "perf_config": e.perf_config,
                            "provenance": dict(e.provenance),
                        }
                        for e in r.entries
                    ],
                }
                for r in records
            ],
        }
        if args.perf:
            out["perf_db"] = [
                {
                    "key": e.key,
                    "solver": e.solver,
                    "layer": e.layer,
                    "perf_config": e.perf_config,
                    "provenance": dict(e.provenance),
                }
                for e in perf_entries
            ]
        print(json.dumps(out, indent=2))
        return 0

    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    if not console.is_terminal:
        # Piped or captured: no terminal width to respect, so never cut a cell short.
        console = Console(highlight=False, width=200)
    cap = usage["max_bytes"]
    console.print(
        f"user layer: {usage['measured_keys']:,} measured and {usage['imported_keys']:,} "
        f"imported keys, {usage['live_bytes']:,} bytes; size cap "
        + (f"{cap / 2**20:g} MiB" if cap else "none (MIOCORE_USER_DB_MAX_MB)")
        + f", {usage['evicted_keys']:,} keys evicted so far",
        soft_wrap=True,
    )
    if not find.status.ok:
        console.print(f"user layer {find.status.line()}", soft_wrap=True)
    if not records:
        where = ", ".join(str(p) for p in _layer_paths(find, layers))
        console.print(
            f"no FindDb records ({args.layer} layer{'s' if len(layers) > 1 else ''}: {where})",
            soft_wrap=True,
        )
    for r in records:
        # The key on its own line: tables would wrap it, and keys get copied into commands.
        console.print(f"[bold]{r.key}[/bold] ({r.layer})", soft_wrap=True)
        table = Table(show_edge=False, pad_edge=False)
        columns = ("solver", "algorithm", "time ms", "spread", "runs", "workspace", "from")
        for col in (*columns, "written (UTC)"):
            table.add_column(col, no_wrap=col in ("solver", "time ms"))
        for e in r.entries:
            prov = e.provenance
            origin = prov.get("plugin", prov.get("source", ""))
            if "plugin_version" in prov:
                origin += f" {prov['plugin_version']}"
            table.add_row(
                e.solver,
                e.algorithm,
                f"{e.time_ms:.4g}",
                "" if e.spread_ms is None else f"{e.spread_ms:.2g}",
                str(e.count) if e.count else "-",
                f"{e.workspace_size:,}",
                origin,
                prov.get("written_at", "")[:16].replace("T", " "),
            )
        console.print(table)
    if args.perf:
        console.print(f"PerfDb: {len(perf_entries)} entries")
        for e in perf_entries:
            console.print(f"{e.key} {e.solver} ({e.layer}): {e.perf_config}", soft_wrap=True)
    return 0


def _layer_paths(find: FindDb, layers: list[str]) -> list[Path]:
    return [find.user_path if layer == "user" else find.system_path for layer in layers]


def _cmd_export(args: argparse.Namespace) -> int:
    find, _ = _dbs(args)
    if args.file == "-":
        count = find.export_text(sys.stdout, layer=args.layer)
    else:
        count = find.export_text(Path(args.file), layer=args.layer)
        print(f"exported {count} records ({args.layer} layer) to {args.file}")
    return 0


def _report_skipped(skipped: Any) -> None:
    for bad in skipped:
        text = bad.text if len(bad.text) <= 100 else bad.text[:97] + "..."
        print(f"skipped line {bad.line}: {bad.reason}\n    {text}", file=sys.stderr)


def _cmd_import(args: argparse.Namespace) -> int:
    from miocore.db.imported import device_from_filename

    named = device_from_filename(args.file.name)
    if args.device is None:
        if named is None:
            print(
                f"miocore db import: warning: {args.file.name} does not name a device; importing "
                f"into this CPU's database ({_default_device()}); pass --device for a GPU's",
                file=sys.stderr,
            )
        args.device = named
    find, _ = _dbs(args)
    result = find.import_text(args.file, strict=args.strict)
    rate = result.lines / result.seconds if result.seconds else 0.0
    print(
        f"imported {result.records} records ({result.entries} entries) into {find.user_path} "
        f"(device {find.device}; {result.lines:,} lines in {result.seconds:.2f} s, "
        f"{rate:,.0f} lines/s)"
        + (f"; skipped {result.skipped_total} bad lines" if result.skipped_total else "")
    )
    if result.skipped_total:
        print(
            f"miocore db import: warning: skipped {result.skipped_total} lines that cannot be "
            "imported (--strict to import nothing then):",
            file=sys.stderr,
        )
        for reason, count in sorted(result.skip_counts.items(), key=lambda kv: -kv[1]):
            print(f"  {count:>7,}  {reason}", file=sys.stderr)
        _report_skipped(result.skipped)
    if not find.status.ok:
        print(f"miocore db import: error: {find.status.line()}", file=sys.stderr)
        return 1
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    find, _ = _dbs(args)
    r = find.merge_from(args.file, skip_bad_lines=args.skip_bad_lines)
    _report_skipped(r.skipped)
    print(
        f"merged {args.file} into {find.user_path}: {r.keys} records changed, {r.added} entries "
        f"added, {r.replaced} replaced by faster ones, {r.kept} kept, "
        f"{r.perf_added} PerfDb entries added"
    )
    return 0


def _cmd_pack(args: argparse.Namespace) -> int:
    from miocore.db._sqlite import open_readonly
    from miocore.db.packed import pack, packed_twin

    if not args.file.is_file():
        raise DatabaseError("no such file", field="file", value=str(args.file))
    # A snapshot of the whole database (its write-ahead log included), compacted, packed.
    snapshot = args.file.with_name(f".{args.file.name}.snapshot-{os.getpid()}")
    conn = open_readonly(args.file)
    try:
        conn.execute("VACUUM INTO ?", (str(snapshot),))
    finally:
        conn.close()
    try:
        with contextlib.closing(sqlite3.connect(snapshot, isolation_level=None)) as snap:
            snap.execute("PRAGMA journal_mode=DELETE")  # read in place, no -wal beside it
        dest = pack(snapshot, packed_twin(args.file))
    finally:
        snapshot.unlink(missing_ok=True)
    before, after = args.file.stat().st_size, dest.stat().st_size
    print(f"packed {args.file} ({before:,} bytes) as {dest} ({after:,} bytes)")
    return 0


def _cmd_clean(args: argparse.Namespace) -> int:
    find, perf = _dbs(args)
    if args.all and (args.key or args.solver or args.stale):
        print("miocore db clean: error: --all takes no other filter", file=sys.stderr)
        return 2
    if not (args.all or args.key or args.solver or args.stale):
        print(
            "miocore db clean: error: say what to clean: --key, --solver, --stale or --all",
            file=sys.stderr,
        )
        return 2
    keep = None
    if args.stale:
        from miocore.solver.registry import default_registry

        keep = default_registry().names()
    kwargs: dict[str, Any] = (
        {"all": True}
        if args.all
        else {"key": args.key, "solver": args.solver, "keep_solvers": keep}
    )
    n_find = find.clean(**kwargs)
    n_perf = perf.clean(**kwargs)
    print(f"deleted {n_find} FindDb entries and {n_perf} PerfDb entries from {find.user_path}")
    return 0


_COMMANDS = {
    "show": _cmd_show,
    "pack": _cmd_pack,
    "path": _cmd_path,
    "export": _cmd_export,
    "import": _cmd_import,
    "merge": _cmd_merge,
    "clean": _cmd_clean,
    "deny": run_deny_command,
}
