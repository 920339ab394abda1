"""System databases shipped packed: ``<device>.db.xz`` beside, or instead of, ``<device>.db``.

A tuned system database is mostly repeated text (keys, solver names, provenance) and packs
fifteen- to twentyfold with xz, so the package data, the wheel and the repository carry the
packed file. The first process that reads it expands it once into miocore's cache folder,
``<cache>/system-db/<id>/<device>.db`` (``<id>`` names the packed file's path, size and
modification time, so an upgrade expands afresh), writing a draft and renaming it into place so
that concurrent processes never see half a file; later processes open the expanded copy
directly. A plain ``<device>.db`` always wins over a packed twin.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import threading
from pathlib import Path

from miocore.errors import DatabaseError
from miocore.paths import user_cache_dir

#: The packed twin of ``<device>.db`` is ``<device>.db`` + this suffix.
PACKED_SUFFIX = ".xz"
# One expansion at a time within a process (threads opening the same device at once).
_lock = threading.Lock()


def packed_twin(path: Path) -> Path:
    """``<device>.db.xz`` for ``<device>.db``."""
    return path.with_name(path.name + PACKED_SUFFIX)


def device_of(path: Path | str) -> str:
    """The device identity a database file is named for: ``sm90_132`` of ``sm90_132.db`` and
    of ``sm90_132.db.xz``."""
    name = Path(path).name
    name = name.removesuffix(PACKED_SUFFIX)
    return name.removesuffix(".db") if name.endswith(".db") else Path(name).stem


def expanded_path(packed: Path) -> Path:
    """Where ``packed`` is (or will be) expanded: one folder per packed file's identity."""
    st = packed.stat()
    ident = f"{packed.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()
    folder = hashlib.sha256(ident).hexdigest()[:16]
    return user_cache_dir() / "system-db" / folder / packed.name[: -len(PACKED_SUFFIX)]


def readable_db_file(path: Path) -> Path:
    """The SQLite file to read for the database ``path`` (``<folder>/<device>.db``).

    ``path`` itself when it exists (or has no packed twin: the caller then finds nothing);
    else its packed twin expanded into the cache. ``path`` may also name the packed file.
    Raises :class:`~miocore.errors.DatabaseError` when the packed file cannot be expanded
    (damaged, or the cache folder not writable).
    """
    path = Path(path)
    if path.name.endswith(PACKED_SUFFIX):
        packed = path
    else:
        if path.exists():
            return path
        packed = packed_twin(path)
        if not packed.is_file():
            return path
    try:
        target = expanded_path(packed)
        if target.is_file():
            return target
        with _lock:
            if not target.is_file():
                _expand(packed, target)
    except (OSError, lzma.LZMAError, EOFError) as exc:
        raise DatabaseError(
            f"packed database cannot be expanded into the cache folder: {exc}",
            field="path",
            value=str(packed),
        ) from exc
    return target


def _expand(packed: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    draft = target.with_name(f".{target.name}.draft-{os.getpid()}-{threading.get_ident()}")
    try:
        with lzma.open(packed, "rb") as src, open(draft, "wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(draft, target)  # atomic: a reader sees no file or the whole file
    finally:
        draft.unlink(missing_ok=True)
    # Expansions of older packed files stay: another installation may still read one.


def pack(source: Path, dest: Path | None = None) -> Path:
    """Write ``source`` (a SQLite database) packed as ``source.xz`` (or ``dest``); returns it.

    Written to a draft and renamed into place, so a packed file is never half written.
    """
    source = Path(source)
    dest = Path(dest) if dest is not None else packed_twin(source)
    draft = dest.with_name(f".{dest.name}.draft-{os.getpid()}")
    try:
        preset = 9 | lzma.PRESET_EXTREME
        with open(source, "rb") as src, lzma.open(draft, "wb", preset=preset) as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
        os.replace(draft, dest)
    finally:
        draft.unlink(missing_ok=True)
    return dest
