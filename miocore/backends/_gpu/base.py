"""What the CUDA and HIP backends share: the handle's backend interface over a small driver.

A :class:`Driver` (``cuda.CudaDriver``, ``hip.HipDriver``) wraps one vendor binding with a
dozen primitives: allocate, copy, synchronise, events, compile a source to a binary, load a
binary, launch. :class:`GpuBackend` builds everything the handle and the solvers use on top of
them, identically for both vendors:

* arrays: ``check_array`` (PyTorch / CuPy / DLPack / own buffer, checked against the
  descriptor), ``empty``, ``random``, ``from_host``, ``to_host``, workspaces;
* compilation: ``compile(kernels)`` resolves each :class:`~miocore.solver.KernelInfo`'s source in
  the plugin folders declared through ``miocore_kernel_sources``, compiles it for the device's
  architecture through the binary cache (:mod:`miocore.db.kernel_cache`) and returns
  :class:`CompiledKernel` objects; ``precompile`` does many in parallel;
* timing with device events, and ``blend`` (alpha/beta) with the core's utility kernel;
* ``gemm``: the vendor BLAS (cuBLAS, hipBLAS) for solvers that lower to matrix products.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from miocore.backends._gpu.arrays import (
    DeviceTensor,
    GpuArray,
    host_flat,
    logical_from_flat,
    view_of,
    workspace_of,
)
from miocore.backends._gpu.launch import (
    CapturedGraph,
    CompiledKernel,
    KernelArgs,
    channels_last,
    grid_for,
    tensor5_bytes,
)
from miocore.backends._gpu.vendor import DriverCompileFailure
from miocore.db.kernel_cache import CacheKeyParts, KernelCache, cache_disabled, collect_headers
from miocore.errors import (
    CompileError,
    InvalidArgumentError,
    MiocoreError,
)
from miocore.problem.descriptors import TensorDescriptor
from miocore.problem.dtypes import DataType
from miocore.solver.interface import DeviceInfo, KernelInfo

log = logging.getLogger("miocore.gpu")

#: Compile option that selects the element type of a kernel source (see miocore_gpu.h).
DTYPE_OPTIONS = {
    DataType.FLOAT32: "-DMIO_DTYPE_FP32",
    DataType.FLOAT16: "-DMIO_DTYPE_FP16",
    DataType.BFLOAT16: "-DMIO_DTYPE_BF16",
}

#: Namespace of the core's own kernels (``kernels/``, shipped as ``miocore/_kernels``).
CORE_NAMESPACE = "miocore"
#: Clock cycles the spin kernel holds the stream before a timed run (~0.25 ms at 2 GHz): longer
#: than the host needs to enqueue a solution's launches.
SPIN_CYCLES = 500_000


def core_kernel_dir() -> Path:
    """The core's kernel folder: ``miocore/_kernels`` in a wheel, ``kernels/`` in a checkout."""
    package = Path(__file__).resolve().parents[2]
    installed = package / "_kernels"
    if installed.is_dir():
        return installed
    return package.parent / "kernels"


class Driver(Protocol):
    """The primitives one vendor binding provides (``cuda.py`` and ``hip.py``, on the shared
    steps of :class:`~miocore.backends._gpu.vendor.VendorDriver`)."""

    name: str
    index: int

    def device_info(self) -> DeviceInfo: ...
    def alloc(self, nbytes: int) -> int: ...
    def free(self, ptr: int) -> None: ...
    def copy_htod(self, dst: int, src: np.ndarray, stream: Any) -> None: ...
    def copy_dtoh(self, dst: np.ndarray, src: int, stream: Any) -> None: ...
    def memset(self, dst: int, nbytes: int, stream: Any) -> None: ...
    def synchronize(self, stream: Any) -> None: ...
    def make_stream(self, handle: int) -> Any: ...
    def event(self) -> Any: ...
    def record(self, event: Any, stream: Any) -> None: ...
    def elapsed_ms(self, start: Any, end: Any) -> float: ...
    def pointer_device(self, ptr: int) -> int | None: ...
    def target(self) -> str: ...
    def compiler_version(self) -> str: ...
    def compile_source(
        self, source: bytes, name: str, options: Sequence[str], include_dirs: Sequence[Path]
    ) -> tuple[bytes, str]: ...
    def load(self, binary: bytes) -> Any: ...
    def function(self, module: Any, name: str) -> Any: ...
    def launch(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared: int,
        stream: Any,
        params: int,
    ) -> None: ...


# -- the backend -------------------------------------------------------------------------------


def compile_parallel_level() -> int:
    """``MIOCORE_COMPILE_PARALLEL_LEVEL`` (or MIOpen's name): threads compiling at once.

    Default: the CPUs, at most 16. A value below 1 (``-3``) or not a number raises
    :class:`~miocore.InvalidEnvironmentError` naming the variable.
    """
    from miocore import env

    return env.positive_int("MIOCORE_COMPILE_PARALLEL_LEVEL", max(1, min(os.cpu_count() or 1, 16)))


class GpuBackend:
    """The handle's view of one GPU: arrays, compile, launch, timing, BLAS (see module doc)."""

    def __init__(self, driver: Driver, stream: Any = None) -> None:
        self.driver = driver
        self.name = driver.name
        self.index = driver.index
        self.device = driver.device_info()
        self.torch_device = f"cuda:{self.index}"
        self._registry_fn: Callable[[], Any] | None = None
        self._lock = threading.RLock()
        self._modules: dict[str, Any] = {}
        self._functions: dict[tuple[str, str], Any] = {}
        self._failures: dict[str, CompileError] = {}
        self._binaries: dict[str, bytes] = {}
        self._cache: KernelCache | None = None
        self._blas: Any = None
        self._capture_stream: Any = None
        #: Where binaries came from in this process: compiled, disk cache, memory.
        self.stats = {"compiled": 0, "disk_hits": 0, "memory_hits": 0}
        self.stream_handle = 0
        self.stream_object: Any = None
        self.set_stream(stream)

    def __repr__(self) -> str:
        return f"<{self.name} backend {self.device.identity} stream=0x{self.stream_handle:x}>"

    # -- streams -----------------------------------------------------------------------------

    def set_stream(self, stream: Any) -> None:
        """Run on ``stream``: None (the default stream), a raw handle (int), a PyTorch stream,
        a CuPy stream, or any object with ``__cuda_stream__``."""
        self.stream_handle = stream_handle(stream)
        self.stream_object = self.driver.make_stream(self.stream_handle)
        if self._blas is not None:
            self._blas.set_stream(self.stream_handle)

    def synchronize(self) -> None:
        """Wait for everything queued on this backend's stream."""
        self.driver.synchronize(self.stream_object)

    # -- graphs ----------------------------------------------------------------------------

    def capture(self, run: Callable[[], None]) -> CapturedGraph | None:
        """Record the launches ``run`` makes as one graph, without running them.

        None, with nothing recorded kept, when the driver has no graphs, this backend's stream
        is being captured by someone else (a graph the caller records), ``run`` raised, called
        a BLAS binding that a capture does not record (CuPy's), or made at most one launch (a
        replay costs as much as that launch). The caller then runs ``run`` itself, which redoes
        whatever ran during the attempt.
        """
        driver = self.driver
        if not hasattr(driver, "capture_begin") or driver.is_capturing(self.stream_object):
            return None
        handle = self.stream_handle
        # One recording stream per backend: libraries keep per-stream state (cuBLAS its
        # workspace), so a new stream per recording would leave that state behind each time.
        if self._capture_stream is None:
            self._capture_stream = driver.capture_stream()
        stream = self._capture_stream
        graph, nodes, failed = None, 0, False
        blas_calls = getattr(self._blas, "calls", 0)
        try:
            self.set_stream(int(stream))  # BLAS moves too, before the stream records
            driver.capture_begin(stream)
            try:
                run()
            except Exception:
                failed = True
            finally:
                try:
                    graph, nodes = driver.capture_end(stream)
                except Exception:  # the library broke the capture: nothing recorded
                    failed = True
        except Exception:
            failed = True
        finally:
            self.set_stream(handle)
        blas = self._blas
        if getattr(blas, "calls", 0) != blas_calls and not getattr(blas, "records_in_graphs", 0):
            failed = True  # the BLAS ran outside the recording: the graph would miss it
        if graph is not None and (failed or nodes <= 1):
            driver.graph_destroy(graph, None)
        if graph is None or failed or nodes <= 1:
            return None
        return CapturedGraph(self, graph, driver.graph_instantiate(graph), nodes)

    # -- registry binding: where kernel sources live ----------------------------------------------

    def bind_registry(self, registry_fn: Callable[[], Any]) -> None:
        """Take kernel source folders from ``registry_fn().kernel_sources`` (the handle's
        registry, which may change when plugins are disabled). Whoever opens a backend binds
        one (the Handle does); until then only the core's own kernels resolve."""
        self._registry_fn = registry_fn

    def _source_folders(self, namespace: str) -> list[tuple[str, Path, str]]:
        folders = [(CORE_NAMESPACE, core_kernel_dir(), "miocore")]
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
            folders.append((record.name, Path(record.path), info.label))
        return folders

    def resolve_source(self, source: str) -> Path:
        """The file a ``KernelInfo.source`` names: ``"file.cu"`` (searched in every declared
        folder) or ``"namespace/file.cu"``."""
        namespace, _, name = source.rpartition("/")
        folders = self._source_folders(namespace)
        found = []
        for ns, folder, _label in folders:
            if namespace and ns != namespace:
                continue
            candidate = folder / name
            if candidate.is_file():
                found.append(candidate)
        if not found:
            where = ", ".join(f"{ns} ({folder})" for ns, folder, _ in folders)
            raise CompileError(
                f"kernel source not found in any declared folder: {where}. A plugin declares "
                "its folder through the miocore_kernel_sources hook",
                field="KernelInfo.source",
                value=source,
            )
        if len({p.resolve() for p in found}) > 1:
            raise CompileError(
                f"kernel source is ambiguous: {[str(p) for p in found]}; name it as "
                "'namespace/file'",
                field="KernelInfo.source",
                value=source,
            )
        return found[0]

    # -- compilation -----------------------------------------------------------------------

    @property
    def kernel_cache(self) -> KernelCache | None:
        """The on-disk binary cache (None when ``MIOCORE_DISABLE_CACHE`` is set)."""
        if cache_disabled():
            return None
        if self._cache is None:
            self._cache = KernelCache()
        return self._cache

    def _parts(self, info: KernelInfo) -> tuple[CacheKeyParts, Path]:
        path = self.resolve_source(info.source)
        include_dirs = [core_kernel_dir(), path.parent]
        parts = CacheKeyParts(
            backend=self.name,
            source_name=info.source,
            source=path.read_bytes(),
            headers=collect_headers(include_dirs),
            options=tuple(info.options),
            arch=self.driver.target(),
            compiler=self.driver.compiler_version(),
        )
        return parts, path

    def _binary(self, info: KernelInfo) -> tuple[str, bytes]:
        """Compile (or fetch from the caches) the binary of ``info``; return (key, binary)."""
        parts, path = self._parts(info)
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
                binary, kind = self.driver.compile_source(
                    parts.source, path.name, info.options, include_dirs
                )
            except DriverCompileFailure as exc:
                error = CompileError(
                    _compile_message(info, path, self.driver.target(), parts, exc.log_text),
                    field="KernelInfo.source",
                    value=info.source,
                )
                with self._lock:
                    self._failures[key] = error
                raise error from None
            with self._lock:
                self.stats["compiled"] += 1
            if cache is not None:
                cache.put(parts, binary, kind=kind)
        with self._lock:
            self._binaries[key] = binary
        return key, binary

    def binaries_ready(self, kernels: Sequence[KernelInfo]) -> bool:
        """Whether every kernel is built already (in memory or in the binary cache): using
        them costs a load, not a compile (find's DYNAMIC_HYBRID mode asks)."""
        cache = self.kernel_cache
        for info in kernels:
            parts, _ = self._parts(info)
            with self._lock:
                if parts.key in self._binaries:
                    continue
            if cache is None or not cache.contains(parts):
                return False
        return True

    def compile(self, kernels: Sequence[KernelInfo]) -> tuple[CompiledKernel, ...]:
        """Compile and load every kernel of a solution (through the caches)."""
        out = []
        for info in kernels:
            key, binary = self._binary(info)
            with self._lock:
                module = self._modules.get(key)
                if module is None:
                    module = self._modules[key] = self.driver.load(binary)
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
            out.append(CompiledKernel(self, info, function))
        return tuple(out)

    def precompile(self, kernels: Iterable[KernelInfo]) -> dict[str, str]:
        """Compile many kernels in parallel (``MIOCORE_COMPILE_PARALLEL_LEVEL`` threads).

        Binaries land in the caches, so the following ``compile`` calls only load them.
        Failures are remembered and raised again by ``compile``; returned as {source: error}.
        """
        unique: dict[tuple[str, tuple[str, ...]], KernelInfo] = {}
        for info in kernels:
            unique.setdefault((info.source, tuple(info.options)), info)
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
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="miocore-nvrtc") as ex:
                list(ex.map(build, unique.values()))
        return failures

    # -- arrays --------------------------------------------------------------------------------

    def check_array(self, desc: TensorDescriptor, array: Any, field: str) -> Any:
        """Check a caller's tensor against ``desc`` (shape, dtype, strides, device)."""
        return view_of(self, desc, array, field)

    def detach(self, view: Any) -> Any:
        """``view`` without its hold on the caller's tensor: what a cache of checked views
        keeps (a framework must be free to release the tensor; a CUDA graph pool checks it)."""
        if type(view) is not DeviceTensor:
            return view
        return DeviceTensor(view.ptr, view.desc, view.nbytes, None)

    def rebind(self, view: Any, array: Any, ptr: int) -> Any:
        """``view`` (a checked view of a tensor of the same shape, dtype, strides and device
        as ``array``) moved to ``array``'s memory at ``ptr``, without checking again; None
        where that cannot be done (the caller checks in full)."""
        if type(view) is not DeviceTensor:
            return None
        return DeviceTensor(ptr, view.desc, view.nbytes, array)

    def empty(self, desc: TensorDescriptor) -> GpuArray:
        """New uninitialised device memory for ``desc`` (its strides, its element space)."""
        return GpuArray(self, desc.nbytes, desc)

    def from_host(self, desc: TensorDescriptor, values: np.ndarray) -> GpuArray:
        """A device copy of ``values`` (logical order) laid out as ``desc`` says."""
        out = self.empty(desc)
        self.copy_from_host(out, values)
        return out

    def copy_from_host(self, array: GpuArray | DeviceTensor, values: np.ndarray) -> None:
        """Copy ``values`` (logical order) into a device tensor (synchronous)."""
        desc = array.desc
        if desc is None:
            raise InvalidArgumentError("the array has no descriptor", field="array", value=None)
        values = np.asarray(values)
        if values.shape != desc.lengths:
            raise InvalidArgumentError(
                f"expected shape {desc.lengths}", field="values.shape", value=values.shape
            )
        flat = host_flat(desc, values.astype(desc.dtype.numpy, copy=False))
        self.driver.copy_htod(array.ptr, flat, self.stream_object)
        self.driver.synchronize(self.stream_object)

    def to_host(self, array: Any, desc: TensorDescriptor | None = None) -> np.ndarray:
        """Copy a device tensor (own buffer, or any accepted tensor with ``desc``) to numpy."""
        if desc is not None and not isinstance(array, (GpuArray, DeviceTensor)):
            array = self.check_array(desc, array, "array")
        desc = desc or array.desc
        if desc is None:
            flat = np.empty(array.nbytes, np.uint8)
            self.driver.copy_dtoh(flat, array.ptr, self.stream_object)
            self.driver.synchronize(self.stream_object)
            return flat
        flat = np.empty(desc.element_space, desc.dtype.numpy)
        self.driver.copy_dtoh(flat, array.ptr, self.stream_object)
        self.driver.synchronize(self.stream_object)
        return np.array(logical_from_flat(desc, flat))

    def to_host_leading(self, array: Any, desc: TensorDescriptor, count: int) -> np.ndarray:
        """The first ``count`` entries along the outermost logical dimension of a device
        tensor laid out as ``desc``, copied to numpy: only the memory they span travels (the
        outermost dimension is N or K, outermost in memory in every layout)."""
        view = (
            array
            if isinstance(array, (GpuArray, DeviceTensor))
            else self.check_array(desc, array, "array")
        )
        lengths = (min(count, desc.lengths[0]), *desc.lengths[1:])
        sub = TensorDescriptor(desc.dtype, lengths, strides=desc.strides)
        flat = np.empty(sub.element_space, desc.dtype.numpy)
        self.driver.copy_dtoh(flat, view.ptr, self.stream_object)
        self.driver.synchronize(self.stream_object)
        return np.array(logical_from_flat(sub, flat))

    def fill(self, array: Any, desc: TensorDescriptor, value: float) -> None:
        """Set every element of a device tensor laid out as ``desc`` to ``value``, on the
        device (the core's ``miocore_fill``)."""
        view = (
            array
            if isinstance(array, (GpuArray, DeviceTensor))
            else self.check_array(desc, array, "array")
        )
        (kernel,) = self.compile(
            [
                KernelInfo(
                    source=f"{CORE_NAMESPACE}/miocore_utility.cu",
                    kernel_name="miocore_fill",
                    options=(DTYPE_OPTIONS[desc.dtype],),
                    block=(256,),
                )
            ]
        )
        args = KernelArgs(
            [
                ("ptr", view.ptr),
                ("bytes", tensor5_bytes(desc)),
                ("f32", value),
                ("i32", int(channels_last(desc))),
            ]
        )
        kernel.launch(args, grid=(grid_for(desc.element_count, 256, self.device),))

    def random(self, desc: TensorDescriptor, rng: np.random.Generator) -> GpuArray:
        """A device tensor for ``desc`` filled with uniform values in [-1, 1), made on the
        device (the core's ``miocore_fill_random``; its seed drawn from ``rng``)."""
        out = self.empty(desc)
        count = desc.element_space
        if count:
            (kernel,) = self.compile(
                [
                    KernelInfo(
                        source=f"{CORE_NAMESPACE}/miocore_utility.cu",
                        kernel_name="miocore_fill_random",
                        options=(DTYPE_OPTIONS[desc.dtype],),
                        block=(256,),
                    )
                ]
            )
            seed = int(rng.integers(0, 2**32))
            args = KernelArgs(
                [("ptr", out.ptr), ("i64", count), ("i32", seed - (seed >> 31 << 32))]
            )
            kernel.launch(args, grid=(grid_for(count, 256, self.device),))
        return out

    def allocate_workspace(self, nbytes: int) -> GpuArray | None:
        """Untyped device memory of ``nbytes`` (None for zero)."""
        return GpuArray(self, nbytes, None) if nbytes else None

    def check_workspace(self, workspace: Any, needed: int) -> Any:
        """Check a caller's workspace (contiguous device memory, big enough, this device)."""
        return workspace_of(self, workspace, needed)

    # -- timing and alpha/beta -------------------------------------------------------------

    def time_ms(self, run: Callable[[], None]) -> float:
        """Device milliseconds of ``run`` between two events on this backend's stream.

        A spin kernel (:data:`SPIN_CYCLES`) goes first, so ``run``'s launches are queued
        while the GPU is still busy: the events then time the device work alone, and a
        solution of several launches is not charged for the host's launch overhead (which
        ``immediate`` and ``run_solution`` add once per call, whatever solver runs)."""
        driver = self.driver
        start, end = self._events()
        spin = self._spin()
        if spin is not None:
            spin.launch(self._spin_args, grid=(1,), block=(1,))
        driver.record(start, self.stream_object)
        run()
        driver.record(end, self.stream_object)
        return driver.elapsed_ms(start, end)

    def _spin(self) -> CompiledKernel | None:
        spin = getattr(self, "_spin_kernel", False)
        if spin is False:
            try:
                (spin,) = self.compile(
                    [
                        KernelInfo(
                            source=f"{CORE_NAMESPACE}/miocore_utility.cu",
                            kernel_name="miocore_spin",
                            options=(DTYPE_OPTIONS[DataType.FLOAT32],),
                        )
                    ]
                )
            except MiocoreError:  # timing still works, only with launch overhead included
                spin = None
            self._spin_kernel = spin
            self._spin_args = KernelArgs([("i64", SPIN_CYCLES)])
        return spin

    def _events(self) -> tuple[Any, Any]:
        events = getattr(self, "_event_pair", None)
        if events is None:
            events = self._event_pair = (self.driver.event(), self.driver.event())
        return events

    def blend(self, out: Any, result: Any, alpha: float, beta: float) -> None:
        """``out = alpha * result + beta * out`` in float32, with the core's utility kernel."""
        desc = out.desc
        (kernel,) = self.compile(
            [
                KernelInfo(
                    source=f"{CORE_NAMESPACE}/miocore_utility.cu",
                    kernel_name="miocore_blend",
                    options=(DTYPE_OPTIONS[desc.dtype],),
                    block=(256,),
                )
            ]
        )
        args = KernelArgs(
            [
                ("ptr", out.ptr),
                ("ptr", result.ptr),
                ("bytes", tensor5_bytes(desc)),
                ("f32", alpha),
                ("f32", beta),
                ("i32", int(channels_last(desc))),
            ]
        )
        kernel.launch(args, grid=(grid_for(desc.element_count, 256, self.device),))

    # -- BLAS ------------------------------------------------------------------------------

    @property
    def blas(self) -> Any:
        """The vendor BLAS of this backend, or None where its binding is not installed."""
        if self._blas is None:
            self._blas = self.driver.open_blas()  # type: ignore[attr-defined]
            if self._blas is not None:
                self._blas.set_stream(self.stream_handle)
        return self._blas or None


def stream_handle(stream: Any) -> int:
    """The raw stream handle of ``stream`` (see :meth:`GpuBackend.set_stream`)."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise InvalidArgumentError("expected a stream", field="stream", value=stream)
    if isinstance(stream, int):
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        value = protocol() if callable(protocol) else protocol
        return int(value[1])
    for attribute in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    raise InvalidArgumentError(
        "expected a stream: an int handle, a torch.cuda.Stream, a cupy Stream or an object "
        "with __cuda_stream__",
        field="stream",
        value=type(stream).__name__,
    )


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
