"""The ``miocore`` entry points of the installed distributions, scanned once per installation.

``importlib.metadata`` reads every distribution's metadata to find a group's entry points, and
its import alone (``email``, ``zipfile``, ``csv``) costs more than the rest of the scan: about
15 ms of a FindDb hit in a new process on the development machine, a tenth of a warm start.
The scan's answer is kept in a JSON file (one per interpreter, in the per-user cache folder),
and a later process uses it while a *fingerprint* of what decides it is unchanged:

* the interpreter;
* in ``sys.path`` order, every folder that holds ``*.dist-info`` / ``*.egg-info`` folders, with
  their names (installing, upgrading or removing a distribution, editable ones included, adds,
  renames or removes one) and the ``stat`` (device, inode, size, modification time) of each
  one's ``entry_points.txt`` and ``METADATA`` (``PKG-INFO`` for an ``*.egg-info``) (an edit in
  place is seen too);
* the ``stat`` of every zip file on ``sys.path``.

Computing it costs under a millisecond (one ``listdir`` per ``sys.path`` folder, a few ``stat``
calls per distribution). Where distributions could come from elsewhere (a ``.egg`` on
``sys.path``, a ``sys.meta_path`` finder with distributions of its own), nothing is cached.
The file holds strings only and is read as JSON, never as a pickle; a damaged or foreign one
is ignored and rewritten. ``MIOCORE_DISABLE_CACHE=1`` turns the cache off (every process
scans).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

from miocore import env
from miocore._digest import blake2b
from miocore.paths import user_cache_dir

log = logging.getLogger("miocore.plugins")

#: Bumped when the file's layout or the fingerprint's recipe changes.
FORMAT = 2

#: The files of a distribution's metadata folder whose change can change the answer, by the
#: folder's kind: its entry points, and its name and version (a ``*.egg-info`` folder's name may
#: not carry the version). Only the kind's own metadata file is looked at: a failed ``stat``
#: costs more than a good one, and a user's environment may hold hundreds of distributions.
_WATCHED = {
    ".dist-info": ("entry_points.txt", "METADATA"),
    ".egg-info": ("entry_points.txt", "PKG-INFO"),
}

#: ``module``, ``module:attr.attr`` and an ignored ``[extras]`` part (as importlib.metadata).
_VALUE_RE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")


class EntryPoint(NamedTuple):
    """One entry point of the group, with the distribution that declares it."""

    name: str
    value: str
    distribution: str
    version: str

    def load(self) -> Any:
        """Import the module the value names and return the object (as importlib.metadata)."""
        match = _VALUE_RE.match(self.value)
        if match is None:
            raise ValueError(f"malformed entry point value {self.value!r}")
        found: Any = importlib.import_module(match.group("module"))
        for part in filter(None, (match.group("attr") or "").split(".")):
            found = getattr(found, part)
        return found


def entry_points(group: str) -> list[EntryPoint]:
    """The group's entry points of every installed distribution, sorted by name: from the
    cache file while the installation's fingerprint is unchanged, else from a scan (which
    then refreshes the file)."""
    fingerprint = _fingerprint(group)
    path = cache_file()
    if fingerprint is not None and path is not None:
        cached = _read(path, fingerprint)
        if cached is not None:
            return cached
    scanned = scan(group)
    if fingerprint is not None and path is not None:
        _write(path, fingerprint, scanned)
    return scanned


def scan(group: str) -> list[EntryPoint]:
    """The group's entry points, read through ``importlib.metadata`` (no cache)."""
    from importlib import metadata

    found = []
    for ep in sorted(metadata.entry_points(group=group), key=lambda e: e.name):
        dist = ep.dist
        found.append(
            EntryPoint(
                name=ep.name,
                value=ep.value,
                distribution=dist.name if dist is not None else "unknown",
                version=dist.version if dist is not None else "unknown",
            )
        )
    return found


def cache_file() -> Path | None:
    """This interpreter's cache file, or None when ``MIOCORE_DISABLE_CACHE`` turns it off."""
    if env.flag("MIOCORE_DISABLE_CACHE", False):
        return None
    interpreter = blake2b(sys.executable.encode(), digest_size=8).hexdigest()
    return user_cache_dir() / "plugins" / f"{interpreter}.json"


def _stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def _fingerprint(group: str) -> str | None:
    """A digest of everything that decides the scan's answer; None where it cannot be told
    (then nothing is cached).

    A ``sys.path`` folder without distribution metadata adds nothing to the answer and is left
    out, so that scripts in different folders (``sys.path[0]``) share one fingerprint; once
    such a folder holds a ``*.dist-info``, it is in."""
    from importlib.machinery import PathFinder

    if any(f is not PathFinder and hasattr(f, "find_distributions") for f in sys.meta_path):
        return None  # distributions from a finder of its own: not fingerprinted here
    entries: list[Any] = []
    for item in sys.path:
        entry = str(item)
        folder = entry or "."
        if folder.lower().endswith(".egg"):
            return None  # a legacy egg's metadata lives inside it, unfingerprinted
        try:
            children = sorted(os.listdir(folder))
        except NotADirectoryError:  # a zip file: its stat says when its content changes
            entries.append([entry, _stat(folder)])
            continue
        except OSError:  # missing or unreadable: it holds no distribution
            continue
        infos = []
        for child in children:  # site-packages holds hundreds: one suffix lookup each
            watched = _WATCHED.get(os.path.splitext(child)[1].lower())
            if watched is not None:
                path = os.path.join(folder, child)
                infos.append([child, *(_stat(os.path.join(path, name)) for name in watched)])
        if infos:
            entries.append([entry, infos])
    recipe = [FORMAT, group, sys.version, sys.executable, entries]
    return blake2b(json.dumps(recipe).encode(), digest_size=32).hexdigest()


def _read(path: Path, fingerprint: str) -> list[EntryPoint] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    if data.get("fingerprint") != fingerprint:
        return None
    rows = data.get("entry_points")
    if not isinstance(rows, list) or not all(
        isinstance(row, list) and len(row) == 4 and all(isinstance(v, str) for v in row)
        for row in rows
    ):
        log.warning("plugin scan cache %s is malformed; scanning again", path)
        return None
    return [EntryPoint(*row) for row in rows]


def _write(path: Path, fingerprint: str, found: list[EntryPoint]) -> None:
    """Replace the file atomically; a cache that cannot be written is only logged."""
    data = {"format": FORMAT, "fingerprint": fingerprint, "entry_points": [list(e) for e in found]}
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(temporary, path)
    except OSError as exc:
        log.debug("plugin scan cache %s not written: %s", path, exc)
        with contextlib.suppress(OSError):
            temporary.unlink()
