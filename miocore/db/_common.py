"""What FindDb and PerfDb share: file locations, device names, provenance, value checks."""

from __future__ import annotations

import functools
import json
import math
import re
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Self, TypeVar

from miocore import env as switches
from miocore.db._sqlite import utc_now_iso
from miocore.db._store import Store
from miocore.db.packed import readable_db_file
from miocore.db.storage import STORAGE_ERRORS, StorageStatus, UserLayer
from miocore.errors import DatabaseError, InvalidArgumentError
from miocore.paths import user_cache_dir

T = TypeVar("T")

USER_DB_ENV = "MIOCORE_USER_DB_PATH"
SYSTEM_DB_ENV = "MIOCORE_SYSTEM_DB_PATH"
LAYERS = ("user", "system")

# Device identities become file names: keep them to characters every file system accepts.
_DEVICE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
# Solver names appear in MIOpen's text format, whose separators are = : ; and ,
_SOLVER_RE = re.compile(r"^[^\s=:;,]+$")


def default_user_dir() -> Path:
    """``$MIOCORE_USER_DB_PATH``, else the platform's per-user cache folder + ``/db``."""
    env = switches.get(USER_DB_ENV).strip()  # or MIOpen's MIOPEN_USER_DB_PATH
    if env:
        return Path(env).expanduser()
    return user_cache_dir() / "db"


def default_system_dir() -> Path:
    """``$MIOCORE_SYSTEM_DB_PATH``, else the package data folder ``miocore/data/db/``."""
    env = switches.get(SYSTEM_DB_ENV).strip()  # or MIOPEN_SYSTEM_DB_PATH
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parent.parent / "data" / "db"


def check_device(device: Any) -> str:
    """Validate a device identity (``cpu_x86_64_2``, ``sm90_132``): it names a file."""
    if not isinstance(device, str) or not _DEVICE_RE.match(device):
        raise InvalidArgumentError(
            "a device identity is letters, digits, '_', '.' and '-' (e.g. 'sm90_132')",
            field="device",
            value=device,
        )
    return device


def check_layer(layer: Any) -> str:
    """Validate a layer name: ``"user"`` or ``"system"``."""
    if layer not in LAYERS:
        raise InvalidArgumentError(f"expected one of {list(LAYERS)}", field="layer", value=layer)
    return layer


def check_solver(name: Any, field: str = "solver") -> str:
    """Validate a solver name: non-empty, no whitespace and none of ``= : ; ,``."""
    if not isinstance(name, str) or not _SOLVER_RE.match(name):
        raise InvalidArgumentError(
            "a solver name is non-empty, without whitespace or any of '=:;,'",
            field=field,
            value=name,
        )
    return name


def check_key(key: Any, field: str = "key") -> str:
    """Validate a FindDb key: it must parse as a problem and be in MIOpen's canonical form
    (an fp32 problem's key may carry the tf32 math mode's suffix, :mod:`miocore.db.mathkeys`)."""
    from miocore.db.mathkeys import split_record_key
    from miocore.problem.conv import ConvProblem  # deferred: keeps `import miocore.db` light
    from miocore.problem.dtypes import DataType

    if not isinstance(key, str):
        raise InvalidArgumentError("a FindDb key is a string", field=field, value=key)
    base, mode = split_record_key(key)
    problem = ConvProblem.from_key(base)
    if mode != "exact" and problem.dtype is not DataType.FLOAT32:
        raise InvalidArgumentError(
            f"the {mode} math mode's suffix belongs to fp32 problems only", field=field, value=key
        )
    canonical = problem.key
    if canonical != base:
        # A non-canonical key could never be hit: every lookup uses ConvProblem.key.
        raise InvalidArgumentError(
            f"not in canonical form; the problem's key is {canonical + key[len(base) :]!r}",
            field=field,
            value=key,
        )
    return key


@functools.lru_cache(maxsize=256)
def parse_algorithm(text: str) -> str:
    """``Algorithm.parse(text).value``, cached: the parse tries every MIOpen name in turn."""
    from miocore.solver.interface import Algorithm

    return Algorithm.parse(text).value


def check_nonneg_float(value: Any, field: str) -> float:
    """A finite float >= 0 (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError("must be a number", field=field, value=value)
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise InvalidArgumentError("must be finite and >= 0", field=field, value=value)
    return value


def check_nonneg_int(value: Any, field: str) -> int:
    """An int >= 0 (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError("must be an integer >= 0", field=field, value=value)
    return value


def freeze_provenance(value: Any) -> Mapping[str, str]:
    """A read-only ``str -> str`` mapping; int, float and bool values are turned into text."""
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            "must be a mapping of str to str", field="provenance", value=value
        )
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise InvalidArgumentError("keys must be str", field="provenance", value=k)
        if isinstance(v, (bool, int, float)):
            v = str(v)
        if not isinstance(v, str):
            raise InvalidArgumentError("values must be str", field=f"provenance[{k!r}]", value=v)
        out[k] = v
    return MappingProxyType(out)


def provenance_json(value: Mapping[str, str]) -> str:
    """Stable JSON text of a provenance mapping (what the database stores; never a pickle)."""
    return json.dumps(dict(value), sort_keys=True, separators=(",", ":"))


def provenance_from_json(text: str | None) -> Mapping[str, str]:
    """Inverse of :func:`provenance_json`; a damaged value reads as empty rather than failing."""
    if not text:
        return MappingProxyType({})
    try:
        data = json.loads(text)
        return freeze_provenance(data)
    except (ValueError, InvalidArgumentError):
        return MappingProxyType({})


@functools.cache  # reading distribution metadata costs milliseconds; it cannot change
def miocore_version() -> str:
    """The installed miocore distribution's version, ``"unknown"`` when not installed."""
    from importlib import metadata  # when a record is written: a FindDb hit never asks

    try:
        return metadata.version("miocore")
    except metadata.PackageNotFoundError:
        return "unknown"


#: The provenance field of a FindDb entry holding the revision of the solver that wrote it.
SOLVER_REVISION = "solver_revision"


def recorded_revision(provenance: Any) -> int:
    """The solver revision an entry's provenance names (0 where it names none or a bad one:
    entries written before solvers had revisions, MIOpen's imported text)."""
    try:
        return int(provenance.get(SOLVER_REVISION, 0))
    except (TypeError, ValueError, AttributeError):
        return 0


def make_provenance(
    device: str,
    *,
    plugin: str | None = None,
    plugin_version: str | None = None,
    **extra: str,
) -> dict[str, str]:
    """Provenance of a record written now: miocore version, device, UTC time, plugin.

    ``plugin`` is the solver's plugin distribution and ``plugin_version`` its version, as the
    registry knows them; ``extra`` adds anything else (``source="import"``, a file name, ...).
    """
    out = {"miocore": miocore_version(), "device": device, "written_at": utc_now_iso()}
    if plugin is not None:
        out["plugin"] = plugin
    if plugin_version is not None:
        out["plugin_version"] = plugin_version
    out.update(extra)
    return out


def complete_provenance(value: Mapping[str, str], device: str) -> Mapping[str, str]:
    """``value`` with miocore version, device and written_at filled in when missing."""
    if "miocore" in value and "device" in value and "written_at" in value:
        return value
    return freeze_provenance({**make_provenance(device), **value})


def make_stores(device: str, user_dir: Path | None, system_dir: Path | None) -> tuple[Store, Store]:
    """The user and system :class:`Store` of ``device`` (``<dir>/<device>.db``)."""
    device = check_device(device)
    user = Path(user_dir) if user_dir is not None else default_user_dir()
    system = Path(system_dir) if system_dir is not None else default_system_dir()
    return (
        Store(user / f"{device}.db", writable=True),
        Store(_system_file(system / f"{device}.db"), writable=False),
    )


def _system_file(path: Path) -> Path:
    """The system layer's file: ``path``, or its packed twin expanded (:mod:`miocore.db.packed`).

    One that cannot be expanded is warned about and the layer reads as empty, as a damaged
    system file is."""
    try:
        return readable_db_file(path)
    except DatabaseError as exc:
        from miocore.db._sqlite import warn_database

        warn_database(f"system database {path}: {exc} (reinstall miocore or clear the cache)")
        return path


class LayeredDb:
    """A database of one device: a writable user layer over a read-only system layer.

    The part FindDb and PerfDb share: where the two files are, reading a layer, closing them.
    Each layer is one SQLite file, ``<dir>/<device>.db``. No storage fault of either layer
    raises: the user layer degrades to memory (:mod:`miocore.db.storage`, :attr:`status`),
    an unreadable system layer reads as empty with one warning.
    """

    def __init__(
        self, device: str, *, user_dir: Path | None = None, system_dir: Path | None = None
    ) -> None:
        user, self._system = make_stores(device, user_dir, system_dir)
        self.device = device
        self._user = UserLayer(user, f"miocore databases of {device!r}")
        self._system_warned = False
        self._touched: set[str] = set()  # keys read since the last write (size cap's LRU)

    @classmethod
    def sharing(cls, other: LayeredDb) -> Self:
        """A database of this kind over ``other``'s files, sharing its user layer: one
        connection, one in-memory fallback and one warning for both (a handle's FindDb and
        PerfDb live in the same file)."""
        db = cls.__new__(cls)
        db.device = other.device
        db._user, db._system = other._user, other._system
        db._system_warned = False
        db._touched = set()
        return db

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.device!r}, user={str(self.user_path)!r})"

    @property
    def user_path(self) -> Path:
        """The user layer's file (may not exist yet)."""
        return self._user.path

    @property
    def system_path(self) -> Path:
        """The system layer's file (may not exist)."""
        return self._system.path

    @property
    def status(self) -> StorageStatus:
        """The user layer's state: ``ok``, or ``degraded`` with the cause and the path."""
        return self._user.status

    def probe(self) -> StorageStatus:
        """Try the user file now (read, empty write transaction; never creates it); the status."""
        return self._user.probe()

    @property
    def journal_mode(self) -> str:
        """``"wal"``, or ``"delete"`` (rollback journal) when the user layer is on a network FS."""
        return self._user.store.journal_mode

    def _read(self, layer: str, fn: Callable[[sqlite3.Connection], T], default: T) -> T:
        """``fn`` on one layer's file (the user layer's memory is read by the caller)."""
        if check_layer(layer) == "user":
            return self._user.read_file(fn, default)
        try:
            return self._system.read(fn, default)
        except STORAGE_ERRORS as exc:
            if not self._system_warned:
                self._system_warned = True
                from miocore.db._sqlite import warn_database

                warn_database(
                    f"system database {self.system_path} cannot be read ({exc}); reading it as "
                    "empty (reinstall miocore or fix MIOCORE_SYSTEM_DB_PATH)"
                )
            return default

    def _read_memory(self, fn: Callable[[sqlite3.Connection], T], default: T) -> T:
        """``fn`` on the user layer's in-memory records (``default`` while the file works)."""
        return self._user.read_memory(fn, default)

    def close(self) -> None:
        """Close both files (any later call reopens them; memory records are kept)."""
        self._user.store.close()
        self._system.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
