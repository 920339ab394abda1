"""Kernel compilation for :class:`~miocore.backends._gpu.base.GpuBackend`: from a
:class:`~miocore.solver.KernelInfo` to a loaded :class:`CompiledKernel`.

:class:`KernelCompiler` (mixed into ``GpuBackend``) resolves a kernel's source in the core's
folder and the plugin folders declared through ``miocore_kernel_sources`` (``bind_registry``),
builds its binary through the memory and disk caches (:mod:`miocore.db.kernel_cache`) or the
driver's compiler (or the folder's own :class:`~miocore.KernelBuilder`, such as Triton's,
whose image and launch facts are cached as one binary), loads it (``compile``), checks
whether binaries are built already (``binaries_ready``) and compiles many in parallel
(``precompile``, :func:`compile_parallel_level` threads). Also here: the compile option of
each data type (:data:`DTYPE_OPTIONS`), the core's kernel namespace and folder, and the
message of a failed compile (source with line numbers, compiler log).
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from miocore.backends._gpu.launch import CompiledKernel
from miocore.backends._gpu.vendor import DriverCompileFailure
from miocore.db.kernel_cache import (
    CacheKeyParts,
    KernelCache,
    cache_disabled,
    collect_headers,
    header_paths,
)
from miocore.errors import CompileError
from miocore.problem.dtypes import DataType
from miocore.solver.hookspecs import BuiltKernel, KernelBuilder
from miocore.solver.interface import KernelInfo
from miocore.solver.lazy import resolve

if TYPE_CHECKING:
    from miocore.backends._gpu.base import Driver

#: Compile option that selects the element type of a kernel source (see miocore_gpu.h).
DTYPE_OPTIONS = {
    DataType.FLOAT32: "-DMIO_DTYPE_FP32",
    DataType.FLOAT16: "-DMIO_DTYPE_FP16",
    DataType.BFLOAT16: "-DMIO_DTYPE_BF16",
}

#: Namespace of the core's own kernels (``kernels/``, shipped as ``miocore/_kernels``).
CORE_NAMESPACE = "miocore"


@functools.cache
def core_kernel_dir() -> Path:
    """The core's kernel folder: ``miocore/_kernels`` in a wheel, ``kernels/`` in a checkout
    (fixed for the process: where the package was imported from)."""
    package = Path(__file__).resolve().parents[2]
    installed = package / "_kernels"
    if installed.is_dir():
        return installed
    return package.parent / "kernels"


def compile_parallel_level() -> int:
    """``MIOCORE_COMPILE_PARALLEL_LEVEL`` (or MIOpen's name): threads compiling at once.

    Default: the CPUs, at most 16. A value below 1 (``-3``) or not a number raises
    :class:`~miocore.InvalidEnvironmentError` naming the variable.
    """
    from miocore import env

    return env.positive_int("MIOCORE_COMPILE_PARALLEL_LEVEL", max(1, min(os.cpu_count() or 1, 16)))


class KernelCompiler:
    """Source resolution, binary caches and compilation of :class:`GpuBackend` (a mixin: the
    backend's ``__init__`` sets the state below)."""

    name: str
    driver: Driver
    _registry_fn: Callable[[], Any] | None
    _lock: threading.RLock
    _modules: dict[str, Any]
    _functions: dict[tuple[str, str], Any]
    _failures: dict[str, CompileError]
    _binaries: dict[str, bytes]
    _cache: KernelCache | None
    _parts_memo: dict[tuple[Any, ...], tuple[Any, ...]]
    #: Keys seen in the binary cache (binaries_ready asks at every find; an entry evicted
    #: since only costs that find a compile).
    _on_disk: set[str]
    stats: dict[str, int]

    # -- registry binding: where kernel sources live ----------------------------------------------

    def bind_registry(self, registry_fn: Callable[[], Any]) -> None:
        """Take kernel source folders from ``registry_fn().kernel_sources`` (the handle's
        registry, which may change when plugins are disabled). Whoever opens a backend binds
        one (the Handle does); until then only the core's own kernels resolve."""
        self._registry_fn = registry_fn

    def _source_folders(self, namespace: str) -> list[_Folder]:
        folders = [_Folder(CORE_NAMESPACE, core_kernel_dir(), "miocore", None)]
        if namespace == CORE_NAMESPACE:
            return folders
        if self._registry_fn is None:
            raise CompileError(
                "this backend has no registry bound, so plugin kernel sources cannot be found; "
                "open it through miocore.Handle or call backend.bind_registry(lambda: registry)",
                field="registry",
                value=None,
            )
        for info, record in getattr(self._registry_fn(), "kernel_sources", ()):
            builder = getattr(record, "builder", None)
            folders.append(_Folder(record.name, Path(record.path), info.label, builder))
        return folders

    def resolve_source(self, source: str) -> Path:
        """The file a ``KernelInfo.source`` names: ``"file.cu"`` (searched in every declared
        folder) or ``"namespace/file.cu"``."""
        return self._resolve(source)[0]

    def _resolve(self, source: str) -> tuple[Path, _Folder]:
        namespace, _, name = source.rpartition("/")
        folders = self._source_folders(namespace)
        found = []
        for folder in folders:
            if namespace and folder.namespace != namespace:
                continue
            candidate = folder.path / name
            if candidate.is_file():
                found.append((candidate, folder))
        if not found:
            where = ", ".join(f"{f.namespace} ({f.path})" for f in folders)
            raise CompileError(
                f"kernel source not found in any declared folder: {where}. A plugin declares "
                "its folder through the miocore_kernel_sources hook",
                field="KernelInfo.source",
                value=source,
            )
        if len({p.resolve() for p, _ in found}) > 1:
            raise CompileError(
                f"kernel source is ambiguous: {[str(p) for p, _ in found]}; name it as "
                "'namespace/file'",
                field="KernelInfo.source",
                value=source,
            )
        return found[0]

    def _builder(self, folder: _Folder) -> KernelBuilder | None:
        """The folder's own compiler (imported on first use), or None for the driver's."""
        spec = folder.builder
        if spec is None or not isinstance(spec, str):
            return spec
        with self._lock:
            found = _BUILDERS.get(spec)
        if found is None:
            try:
                found = resolve(spec)
            except Exception as exc:
                raise CompileError(
                    f"the kernel builder of plugin {folder.label} cannot be imported "
                    f"({type(exc).__name__}: {exc})",
                    field="KernelSourceRecord.builder",
                    value=spec,
                ) from None
            with self._lock:
                _BUILDERS[spec] = found
        return found

    # -- compilation -----------------------------------------------------------------------

    @property
    def kernel_cache(self) -> KernelCache | None:
        """The on-disk binary cache (None when ``MIOCORE_DISABLE_CACHE`` is set)."""
        if cache_disabled():
            return None
        if self._cache is None:
            self._cache = KernelCache()
        return self._cache

    def _parts(self, info: KernelInfo) -> tuple[CacheKeyParts, Path, KernelBuilder | None]:
        """What ``info``'s binary depends on, its source file and its builder (None: the
        driver's compiler). Remembered per source, options and declared folders while none
        of the files it read changed (their sizes and modification times, and the folders'
        for a header added or removed): every find asks for each candidate's kernels, and
        reading and hashing them costs a millisecond."""
        namespace = info.source.rpartition("/")[0]
        folders = tuple(str(f.path) for f in self._source_folders(namespace))
        memo_key = (info.source, info.kernel_name, tuple(info.options), folders)
        memo = self._parts_memo
        found = memo.get(memo_key)
        if found is not None and _stamp(found[2]) == found[3]:
            return found[0], found[1], found[4]
        parts, path, builder = self._read_parts(info)
        include_dirs = [core_kernel_dir(), path.parent]
        watched = (path, *include_dirs, *header_paths(include_dirs))
        stamp = _stamp(watched)
        with self._lock:
            if len(memo) >= _PARTS_MEMO:
                memo.clear()
            memo[memo_key] = (parts, path, watched, stamp, builder)
        return parts, path, builder

    def _read_parts(self, info: KernelInfo) -> tuple[CacheKeyParts, Path, KernelBuilder | None]:
        path, folder = self._resolve(info.source)
        builder = self._builder(folder)
        include_dirs = [core_kernel_dir(), path.parent]
        parts = CacheKeyParts(
            backend=self.name,
            # a driver compiles the whole source (every kernel in one module), a builder the
            # one kernel named: then the name is part of what the binary is
            source_name=info.source if builder is None else f"{info.source}:{info.kernel_name}",
            source=path.read_bytes(),
            # a builder's sources include no headers of ours
            headers=() if builder is not None else collect_headers(include_dirs),
            options=tuple(info.options),
            arch=self.driver.target(),
            compiler=builder.version() if builder is not None else self.driver.compiler_version(),
        )
        return parts, path, builder

    def _binary(self, info: KernelInfo) -> tuple[str, bytes]:
        """Compile (or fetch from the caches) the binary of ``info``; return (key, binary).
        A builder's binary is :func:`pack_built`'s container (image and launch facts)."""
        parts, path, builder = self._parts(info)
        key = parts.key
        with self._lock:
            if key in self._failures:
                raise self._failures[key]
            if key in self._binaries:
                self.stats["memory_hits"] += 1
                return key, self._binaries[key]
        cache = self.kernel_cache
        binary = cache.get(parts) if cache is not None else None
        if binary is not None:
            with self._lock:
                self.stats["disk_hits"] += 1
        else:
            include_dirs = [core_kernel_dir(), path.parent]
            try:
                if builder is not None:
                    built = builder.build(
                        path, info.kernel_name, tuple(info.options), self.name, parts.arch
                    )
                    binary, kind = pack_built(built), "built"
                else:
                    binary, kind = self.driver.compile_source(
                        parts.source, path.name, info.options, include_dirs
                    )
            except DriverCompileFailure as exc:
                self._fail(
                    key,
                    _compile_message(info, path, parts.arch, parts, exc.log_text),
                    info.source,
                )
            except Exception as exc:
                if builder is None:
                    raise
                self._fail(
                    key,
                    f"kernel {info.kernel_name!r} from {path} failed to build for {parts.arch} "
                    f"with options {list(info.options)} ({parts.compiler}): "
                    f"{type(exc).__name__}: {exc}",
                    info.source,
                )
            with self._lock:
                self.stats["compiled"] += 1
            if cache is not None:
                cache.put(parts, binary, kind=kind)
        with self._lock:
            self._binaries[key] = binary
        return key, binary

    def _fail(self, key: str, message: str, source: str | None = None) -> NoReturn:
        """Remember and raise the compile failure of ``key``."""
        error = CompileError(message, field="KernelInfo.source", value=source)
        with self._lock:
            self._failures[key] = error
        raise error from None

    def binaries_ready(self, kernels: Sequence[KernelInfo]) -> bool:
        """Whether every kernel is built already (in memory or in the binary cache): using
        them costs a load, not a compile (find's DYNAMIC_HYBRID mode asks)."""
        cache = self.kernel_cache
        for info in kernels:
            parts = self._parts(info)[0]
            key = parts.key
            with self._lock:
                if key in self._binaries or key in self._on_disk:
                    continue
            if cache is None or not cache.contains(parts):
                return False
            with self._lock:
                self._on_disk.add(key)
        return True

    def compile(self, kernels: Sequence[KernelInfo]) -> tuple[CompiledKernel, ...]:
        """Compile and load every kernel of a solution (through the caches)."""
        out = []
        for info in kernels:
            key, binary = self._binary(info)
            meta: dict[str, Any] = {}
            if binary.startswith(_BUILT_MAGIC):
                image, meta = unpack_built(binary)
            else:
                image = binary
            with self._lock:
                module = self._modules.get(key)
                if module is None:
                    module = self._modules[key] = self.driver.load(image)
                function = self._functions.get((key, info.kernel_name))
                if function is None:
                    try:
                        function = self.driver.function(module, info.kernel_name)
                    except Exception as exc:
                        raise CompileError(
                            f"the compiled {info.source} has no kernel of this name ({exc})",
                            field="KernelInfo.kernel_name",
                            value=info.kernel_name,
                        ) from None
                    self._functions[(key, info.kernel_name)] = function
            out.append(CompiledKernel(self, info, function, meta))
        return tuple(out)

    def precompile(self, kernels: Iterable[KernelInfo]) -> dict[str, str]:
        """Compile many kernels in parallel (``MIOCORE_COMPILE_PARALLEL_LEVEL`` threads).

        Binaries land in the caches, so the following ``compile`` calls only load them.
        Failures are remembered and raised again by ``compile``; returned as {source: error}.
        """
        unique: dict[tuple[str, str, tuple[str, ...]], KernelInfo] = {}
        for info in kernels:
            unique.setdefault((info.source, info.kernel_name, tuple(info.options)), info)
        failures: dict[str, str] = {}
        if not unique:
            return failures

        def build(info: KernelInfo) -> None:
            try:
                self._binary(info)
            except CompileError as exc:
                failures[f"{info.source} {' '.join(info.options)}"] = str(exc)

        workers = min(compile_parallel_level(), len(unique))
        if workers == 1:
            for info in unique.values():
                build(info)
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="miocore-nvrtc") as ex:
                list(ex.map(build, unique.values()))
        return failures


#: Kernels whose cache key parts a backend remembers (forgotten all at once past it).
_PARTS_MEMO = 4096

#: Builders named by ``"module:attribute"``, imported once per process.
_BUILDERS: dict[str, Any] = {}

#: First bytes of a builder's binary in the caches: then one line of JSON (the launch facts),
#: then the image. JSON, not pickle: a cache file is never code.
_BUILT_MAGIC = b"MIOCORE-BUILT-1\n"


class _Folder(NamedTuple):
    """One declared kernel folder."""

    namespace: str
    path: Path
    label: str
    builder: Any


def pack_built(built: BuiltKernel) -> bytes:
    """A builder's result as one binary: magic, the launch facts as a JSON line, the image."""
    header = json.dumps(built.meta, sort_keys=True, separators=(",", ":")).encode()
    return _BUILT_MAGIC + header + b"\n" + bytes(built.image)


def unpack_built(binary: bytes) -> tuple[bytes, dict[str, Any]]:
    """The image and launch facts of :func:`pack_built`'s binary."""
    body = binary[len(_BUILT_MAGIC) :]
    header, _, image = body.partition(b"\n")
    meta = json.loads(header)
    if not isinstance(meta, dict):
        raise CompileError("a built kernel's launch facts are not a JSON object", field="binary")
    return image, meta


def _stamp(paths: Sequence[Path]) -> tuple[tuple[int, int] | None, ...]:
    """Size and modification time of each path (None where it is gone)."""
    out: list[tuple[int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_size, st.st_mtime_ns))
    return tuple(out)


def _compile_message(
    info: KernelInfo, path: Path, target: str, parts: CacheKeyParts, log_text: str
) -> str:
    lines = parts.source.decode(errors="replace").splitlines()
    width = len(str(len(lines)))
    numbered = "\n".join(f"{i:>{width}} | {line}" for i, line in enumerate(lines, 1))
    return (
        f"kernel {info.kernel_name!r} from {path} failed to compile for {target} with options "
        f"{list(info.options)} ({parts.compiler})\n--- source ---\n{numbered}\n"
        f"--- compiler log ---\n{log_text.strip()}"
    )
