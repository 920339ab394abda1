"""The on-disk binary cache of compiled GPU kernels (MIOpen's ``.ukdb``, CuPy's kernel cache).

Entries are content-addressed: the key is a SHA-256 over the kernel source, every header it may
include, the compile options, the target architecture, the compiler and its version, and the
cache format. Each entry is two files in one folder:

* ``<key>.bin``: the raw binary (cubin, PTX or a HIP code object), exactly as the compiler
  produced it; never pickled;
* ``<key>.json``: a manifest naming what was compiled, with the binary's size and SHA-256.

A read checks the manifest and the binary's hash; an entry that fails the check (a torn write,
a flipped bit, a manifest of another format) is deleted with a warning and treated as a miss, so
the kernel is compiled again. Writes go to a temporary file renamed into place, so concurrent
processes never see half an entry. The cache is bounded: past ``max_bytes`` the least recently
used entries (by manifest modification time; a hit touches it) are evicted.

``MIOCORE_DISABLE_CACHE=1`` turns the cache off (every process compiles), and
``MIOCORE_KERNEL_CACHE_PATH`` moves it (default: the per-user cache folder, ``kernels/``).
``MIOCORE_KERNEL_CACHE_MAX_MB`` sets the bound (default 1024).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from miocore import env
from miocore.errors import InvalidEnvironmentError
from miocore.paths import user_cache_dir
from miocore.values import frozen

log = logging.getLogger("miocore.db.kernel_cache")

#: Bumped whenever the entry format changes; part of every key.
FORMAT = 1
_DEFAULT_MAX_MB = 1024


def cache_disabled() -> bool:
    """Whether ``MIOCORE_DISABLE_CACHE`` turns the binary cache off (1, true, yes, on)."""
    return env.flag("MIOCORE_DISABLE_CACHE", False)


def default_cache_dir() -> Path:
    """``MIOCORE_KERNEL_CACHE_PATH`` or the per-user cache folder's ``kernels/``."""
    override = env.get("MIOCORE_KERNEL_CACHE_PATH", "").strip()
    if override:
        return Path(override).expanduser()
    return user_cache_dir() / "kernels"


def default_max_bytes() -> int:
    """``MIOCORE_KERNEL_CACHE_MAX_MB`` in bytes (default 1024 MiB)."""
    raw = env.get("MIOCORE_KERNEL_CACHE_MAX_MB", "").strip()
    if not raw:
        return _DEFAULT_MAX_MB << 20
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidEnvironmentError(
            "expected a positive number of MiB", field="MIOCORE_KERNEL_CACHE_MAX_MB", value=raw
        )
    return value << 20


@frozen(kw_only=True)
class CacheKeyParts:
    """Everything a compiled binary depends on; :attr:`key` hashes it."""

    backend: str
    source_name: str
    source: bytes
    headers: tuple[tuple[str, bytes], ...]
    options: tuple[str, ...]
    arch: str
    compiler: str

    @functools.cached_property
    def key(self) -> str:
        """Hex SHA-256 of every part, each length-prefixed so no two inputs collide (hashed
        once: the compiler keeps one instance per kernel, and every find asks for it)."""
        digest = hashlib.sha256()

        def feed(item: bytes) -> None:
            digest.update(len(item).to_bytes(8, "little"))
            digest.update(item)

        for text in (f"miocore-kernel-cache/{FORMAT}", self.backend, self.arch, self.compiler):
            feed(text.encode())
        feed(self.source_name.encode())
        feed(self.source)
        feed(str(len(self.headers)).encode())
        for name, content in sorted(self.headers):
            feed(name.encode())
            feed(content)
        feed(str(len(self.options)).encode())
        for option in self.options:
            feed(option.encode())
        return digest.hexdigest()


def collect_headers(folders: Iterable[Path]) -> tuple[tuple[str, bytes], ...]:
    """Every header (``*.h``, ``*.hpp``, ``*.cuh``) directly in ``folders``, as (name, bytes).

    The whole set goes into the key, so a change to any header a kernel might include
    invalidates its entries (a little over-inclusive, never stale).
    """
    out: dict[str, bytes] = {}
    for path in header_paths(folders):
        out.setdefault(f"{path.parent.name}/{path.name}", path.read_bytes())
    return tuple(sorted(out.items()))


def header_paths(folders: Iterable[Path]) -> list[Path]:
    """The header files (``*.h``, ``*.hpp``, ``*.cuh``) directly in ``folders``, in order."""
    return [
        path
        for folder in folders
        if folder.is_dir()
        for path in sorted(folder.iterdir())
        if path.suffix in (".h", ".hpp", ".cuh") and path.is_file()
    ]


class KernelCache:
    """A bounded, integrity-checked, content-addressed folder of compiled kernel binaries.

    Thread-safe within a process; safe across processes (atomic renames, and a reader that
    meets a damaged entry deletes it and recompiles).
    """

    def __init__(self, path: str | Path | None = None, *, max_bytes: int | None = None) -> None:
        self.path = Path(path) if path is not None else default_cache_dir()
        self.max_bytes = max_bytes if max_bytes is not None else default_max_bytes()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.rejected = 0

    def __repr__(self) -> str:
        return f"KernelCache({str(self.path)!r}, max_bytes={self.max_bytes})"

    def _files(self, key: str) -> tuple[Path, Path]:
        return self.path / f"{key}.bin", self.path / f"{key}.json"

    def get(self, parts: CacheKeyParts) -> bytes | None:
        """The cached binary for ``parts``, or None (a miss, or an entry that failed its check)."""
        key = parts.key
        binary_path, manifest_path = self._files(key)
        try:
            manifest = json.loads(manifest_path.read_text())
            binary = binary_path.read_bytes()
        except FileNotFoundError:
            with self._lock:
                self.misses += 1
            return None
        except (OSError, ValueError) as exc:
            self._reject(key, f"unreadable entry: {exc}")
            return None
        problem = _check_entry(manifest, binary, key, parts)
        if problem is not None:
            self._reject(key, problem)
            return None
        with contextlib.suppress(OSError):
            os.utime(manifest_path)  # least recently used goes first on eviction
        with self._lock:
            self.hits += 1
        return binary

    def contains(self, parts: CacheKeyParts) -> bool:
        """Whether an entry for ``parts`` is on disk (not read or checked: ``get`` does that)."""
        binary_path, manifest_path = self._files(parts.key)
        return binary_path.is_file() and manifest_path.is_file()

    def put(self, parts: CacheKeyParts, binary: bytes, *, kind: str) -> None:
        """Store ``binary`` (of ``kind``: ``cubin``, ``ptx``, ``hsaco``) under ``parts``' key."""
        key = parts.key
        manifest = {
            "format": FORMAT,
            "key": key,
            "kind": kind,
            "backend": parts.backend,
            "source": parts.source_name,
            "options": list(parts.options),
            "arch": parts.arch,
            "compiler": parts.compiler,
            "size": len(binary),
            "sha256": hashlib.sha256(binary).hexdigest(),
            "created": time.time(),
        }
        binary_path, manifest_path = self._files(key)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            _atomic_write(binary_path, binary)
            _atomic_write(manifest_path, json.dumps(manifest, indent=1).encode())
        except OSError as exc:  # a read-only or full disk must not fail the compile
            log.warning("kernel cache %s: could not store %s: %s", self.path, key[:12], exc)
            return
        self._evict()

    def _reject(self, key: str, why: str) -> None:
        log.warning("kernel cache %s: entry %s set aside (%s); recompiling", self.path, key, why)
        with self._lock:
            self.rejected += 1
            self.misses += 1
        for path in self._files(key):
            with contextlib.suppress(OSError):
                path.unlink()

    def entries(self) -> list[tuple[str, int, float]]:
        """``(key, bytes, last_used)`` of every entry, oldest first."""
        out = []
        try:
            manifests = list(self.path.glob("*.json"))
        except OSError:
            return []
        for manifest_path in manifests:
            key = manifest_path.stem
            try:
                used = manifest_path.stat().st_mtime
                size = manifest_path.stat().st_size + (self.path / f"{key}.bin").stat().st_size
            except OSError:
                continue
            out.append((key, size, used))
        out.sort(key=lambda e: e[2])
        return out

    def size_bytes(self) -> int:
        """Bytes the cache holds now."""
        return sum(size for _, size, _ in self.entries())

    def _evict(self) -> None:
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        for key, size, _ in entries:
            if total <= self.max_bytes:
                break
            for path in self._files(key):
                with contextlib.suppress(OSError):
                    path.unlink()
            total -= size

    def clear(self) -> int:
        """Delete every entry; return how many there were."""
        entries = self.entries()
        for key, _, _ in entries:
            for path in self._files(key):
                with contextlib.suppress(OSError):
                    path.unlink()
        return len(entries)


def _check_entry(manifest: object, binary: bytes, key: str, parts: CacheKeyParts) -> str | None:
    if not isinstance(manifest, dict):
        return "manifest is not an object"
    if manifest.get("format") != FORMAT:
        return f"format {manifest.get('format')!r}, expected {FORMAT}"
    if manifest.get("key") != key:
        return "manifest names another key"
    if manifest.get("size") != len(binary):
        return f"binary has {len(binary)} bytes, manifest says {manifest.get('size')}"
    if manifest.get("sha256") != hashlib.sha256(binary).hexdigest():
        return "binary does not match its SHA-256"
    if manifest.get("arch") != parts.arch or manifest.get("compiler") != parts.compiler:
        return "architecture or compiler differs"
    return None


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
