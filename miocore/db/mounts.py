"""Which file system a database lives on, and whether SQLite's WAL mode is safe there.

WAL keeps its index in a shared-memory file (``-shm``) that every process maps; processes on
different hosts of a network file system do not share that memory, so WAL there can lose or
corrupt commits. On a network file system the user layer therefore uses SQLite's rollback
journal (``journal_mode=DELETE``), whose locks are POSIX ``fcntl`` record locks that NFSv4,
Lustre, GPFS and SMB3 forward to the server. See ``docs/databases.md``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from pathlib import Path

from miocore import env

#: File system types (``/proc/mounts`` third field) that are shared between hosts.
NETWORK_FSTYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb",
        "smb2",
        "smb3",
        "smbfs",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "glusterfs",
        "fuse.glusterfs",
        "fuse.sshfs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.juicefs",
        "9p",
        "afs",
        "ocfs2",
        "gfs2",
        "panfs",
        "pvfs2",
        "orangefs",
        "wekafs",
        "davfs",
        "fuse.davfs",
    }
)

MOUNTS_FILE = Path("/proc/mounts")


def _unescape(field: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash in paths as octal escapes.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def parse_mounts(lines: Iterable[str]) -> list[tuple[str, str]]:
    """``(mount point, fstype)`` of each line of a ``/proc/mounts`` table; bad lines ignored."""
    out: list[tuple[str, str]] = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 3:
            out.append((_unescape(fields[1]), fields[2]))
    return out


def fstype_of(path: Path | str, mounts: Iterable[tuple[str, str]]) -> str | None:
    """The file system type of ``path``: the deepest mount point that contains it."""
    target = os.path.abspath(str(path))
    best: tuple[int, str] | None = None
    for point, fstype in mounts:
        inside = point == "/" or target == point or target.startswith(point.rstrip("/") + "/")
        # A later mount on the same point hides an earlier one, hence >= .
        if inside and (best is None or len(point) >= best[0]):
            best = (len(point), fstype)
    return None if best is None else best[1]


def is_network_fstype(fstype: str | None) -> bool:
    """True for a file system shared between hosts (where WAL is unsafe)."""
    if not fstype:
        return False
    return fstype in NETWORK_FSTYPES or fstype.split(".")[0] in NETWORK_FSTYPES


@functools.cache
def _system_mounts() -> tuple[tuple[str, str], ...]:
    try:
        with open(MOUNTS_FILE, encoding="utf-8", errors="replace") as fh:
            return tuple(parse_mounts(fh))
    except OSError:  # not Linux, or /proc not mounted: assume local
        return ()


def is_network_path(path: Path | str, mounts: Iterable[tuple[str, str]] | None = None) -> bool:
    """True when ``path`` (or the folder it would be created in) is on a network file system.

    ``mounts`` is a parsed mounts table (:func:`parse_mounts`); by default this machine's.
    ``MIOCORE_DB_NETWORK=1`` / ``0`` overrides the detection (a FUSE mount of unknown kind).
    """
    forced = env.get("MIOCORE_DB_NETWORK", "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off"):
        return False
    table = _system_mounts() if mounts is None else tuple(mounts)
    return is_network_fstype(fstype_of(path, table))
