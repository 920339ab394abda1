"""The steps both vendor drivers take, with only the vendor calls left to ``cuda.py``/``hip.py``.

A vendor binding (cuda.bindings, hip-python) answers every call with an error code, alone or
first in a tuple: :func:`check` unpacks both shapes. :class:`VendorRuntime` initialises a
binding once per process. :class:`VendorDriver` is the :class:`~miocore.backends._gpu.base.Driver`
half that is the same for both vendors (copies that wait, event timing, the runtime-compile
sequence); a subclass supplies the raw calls, named ``_vendor_*``. :class:`StridedGemm` is the
same for the vendor BLAS: argument checks, scalars and call count once, the vendor's entry
point in the subclass.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from miocore.errors import BackendUnavailableError, InvalidArgumentError, MiocoreError
from miocore.problem.dtypes import DataType

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    import numpy as np


class DriverCompileFailure(Exception):
    """Raised by a driver's ``compile_source``: the compiler's log, for a CompileError."""

    def __init__(self, log_text: str) -> None:
        super().__init__(log_text)
        self.log_text = log_text


def check(
    result: Any,
    call: str,
    error: type[MiocoreError],
    describe: Callable[[Any], str] | None = None,
) -> Any:
    """Unpack a binding's ``(error, *values)`` or bare error, raising ``error`` naming
    ``call`` (and the code, spelled by ``describe`` where given) when it is not success.
    Returns None, the one value, or the tuple of values."""
    err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if int(err) != 0:
        name = describe(err) if describe is not None else getattr(err, "name", str(err))
        raise error(f"{call} failed: {name}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


class VendorRuntime:
    """One vendor binding, initialised once per process (thread safe).

    ``init`` makes the binding's init call (raising on failure); ``package`` and ``needs``
    word the errors: what to install, and what machine the backend needs.
    """

    def __init__(
        self,
        device: str,
        package: str,
        import_error: Exception | None,
        init: Callable[[], None],
        runtime: str,
        needs: str,
    ) -> None:
        self.device = device
        self.package = package
        self.import_error = import_error
        self._init = init
        self._runtime = runtime
        self._needs = needs
        self._lock = threading.Lock()
        self._done = False

    def ensure(self) -> None:
        """Initialise the binding, or raise BackendUnavailableError saying why it cannot."""
        if self.import_error is not None:
            raise BackendUnavailableError(
                f"{self.package} is not installed ({self.import_error}); install "
                f"'miocore[{self.device}]'",
                field="device",
                value=self.device,
            )
        with self._lock:
            if self._done:
                return
            try:
                self._init()
            except (RuntimeError, MiocoreError) as exc:
                raise BackendUnavailableError(
                    f"no usable {self._runtime} ({exc}); miocore[{self.device}] needs a machine "
                    f"with {self._needs}",
                    field="device",
                    value=self.device,
                ) from None
            self._done = True


def check_device_index(device: str, index: int, count: int) -> None:
    """Raise BackendUnavailableError unless ``index`` names one of ``count`` devices."""
    if not 0 <= index < count:
        raise BackendUnavailableError(
            f"there are {count} {device.upper()} devices", field="device", value=f"{device}:{index}"
        )


class VendorDriver:
    """The driver steps that are the same for every vendor; subclasses make the calls.

    A subclass sets ``name`` and ``index`` and implements the ``_vendor_*`` methods (each one
    call of its binding) plus the primitives that are single calls anyway (alloc, launch...).
    """

    name: str
    index: int
    #: Whether replaying a graph of one launch costs less host time than the launch itself
    #: (then a prepared run keeps graphs of single-kernel calls too); measured per vendor.
    graph_replay_beats_launch = False

    # -- what a vendor supplies ------------------------------------------------------------

    def synchronize(self, stream: Any) -> None:
        raise NotImplementedError

    def _vendor_copy_htod(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        raise NotImplementedError

    def _vendor_copy_dtoh(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        raise NotImplementedError

    def _vendor_event_wait(self, event: Any) -> None:
        raise NotImplementedError

    def _vendor_event_ms(self, start: Any, end: Any) -> float:
        raise NotImplementedError

    def _vendor_compile_options(self, include_dirs: Sequence[Path]) -> list[str]:
        """Target, language standard and include folders, in the compiler's spelling."""
        raise NotImplementedError

    def _vendor_program(self, source: bytes, name: str) -> Any:
        raise NotImplementedError

    def _vendor_compile(self, program: Any, options: list[str]) -> Any:
        """Compile; return the compiler's status code (not raising on failure)."""
        raise NotImplementedError

    def _vendor_log(self, program: Any) -> bytes:
        raise NotImplementedError

    def _vendor_binary(self, program: Any) -> tuple[bytes, str]:
        """The compiled binary and its kind (``cubin``, ``ptx``, ``hsaco``)."""
        raise NotImplementedError

    def _vendor_destroy(self, program: Any) -> None:
        raise NotImplementedError

    # -- the shared steps ----------------------------------------------------------------------

    def copy_htod(self, dst: int, src: np.ndarray, stream: Any) -> None:
        """Copy host ``src`` to device ``dst``; waits, so ``src`` may be freed on return."""
        import numpy as np

        src = np.ascontiguousarray(src)
        self._vendor_copy_htod(dst, src.ctypes.data, src.nbytes, stream)
        self.synchronize(stream)

    def copy_dtoh(self, dst: np.ndarray, src: int, stream: Any) -> None:
        """Queue a copy of device ``src`` into host ``dst`` (the caller synchronises)."""
        self._vendor_copy_dtoh(dst.ctypes.data, src, dst.nbytes, stream)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two recorded events, once ``end`` has happened."""
        self._vendor_event_wait(end)
        return float(self._vendor_event_ms(start, end))

    def compile_source(
        self, source: bytes, name: str, options: Sequence[str], include_dirs: Sequence[Path]
    ) -> tuple[bytes, str]:
        """Runtime-compile ``source`` for this device: (binary, kind), or
        :class:`DriverCompileFailure` with the compiler's log and the options used."""
        opts = [*self._vendor_compile_options(include_dirs), *options]
        program = self._vendor_program(source, name)
        try:
            status = self._vendor_compile(program, opts)
            log_text = self._vendor_log(program).rstrip(b"\0 ").decode(errors="replace")
            if int(status) != 0:
                raise DriverCompileFailure(
                    f"{getattr(status, 'name', status)} (options: {' '.join(opts)})\n{log_text}"
                )
            return self._vendor_binary(program)
        finally:
            self._vendor_destroy(program)


class StridedGemm:
    """Column-major strided-batched GEMM with fp32 accumulation for every dtype.

    ``gemm(dtype, transa, transb, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc,
    stride_c, batch, beta, c_dtype, tf32)`` computes ``C = op(A) op(B) + beta C`` per batch
    (BLAS terms; C may be float32 while A and B are half types). ``tf32=True`` lets float32
    products use TF32 tensor cores where the vendor has them (only for solvers of the
    ``"tf32"`` math mode). A subclass issues the call (:meth:`_vendor_gemm`).
    """

    def __init__(self) -> None:
        import numpy as np

        self._alpha = np.ones(1, np.float32)
        self._betas = {0.0: np.zeros(1, np.float32), 1.0: np.ones(1, np.float32)}
        #: GEMMs issued so far: a graph recording checks whether any ran during it.
        self.calls = 0

    def set_stream(self, stream: int) -> None:
        raise NotImplementedError

    def gemm(
        self,
        dtype: DataType,
        transa: bool,
        transb: bool,
        m: int,
        n: int,
        k: int,
        a: int,
        lda: int,
        stride_a: int,
        b: int,
        ldb: int,
        stride_b: int,
        c: int,
        ldc: int,
        stride_c: int,
        batch: int = 1,
        beta: float = 0.0,
        c_dtype: DataType | None = None,
        tf32: bool = False,
    ) -> None:
        """``C = op(A) op(B) + beta C`` for each of ``batch`` matrices (beta 0 or 1)."""
        beta_buf = self._betas.get(beta)
        if beta_buf is None:
            raise InvalidArgumentError("beta must be 0 or 1", field="beta", value=beta)
        self.calls += 1
        self._vendor_gemm(
            GemmCall(
                dtype=dtype,
                c_dtype=c_dtype or dtype,
                transa=bool(transa),
                transb=bool(transb),
                dims=(m, n, k),
                alpha=self._alpha.ctypes.data,
                beta=beta_buf.ctypes.data,
                a=(a, lda, stride_a),
                b=(b, ldb, stride_b),
                c=(c, ldc, stride_c),
                batch=batch,
                tf32=tf32,
            )
        )

    def _vendor_gemm(self, call: GemmCall) -> None:
        raise NotImplementedError


class GemmCall:
    """One checked GEMM request: matrices as (address, leading dimension, batch stride in
    elements), scalars as host addresses of float32 values."""

    __slots__ = (
        *("a", "alpha", "b", "batch", "beta", "c", "c_dtype"),
        *("dims", "dtype", "tf32", "transa", "transb"),
    )

    def __init__(
        self,
        *,
        dtype: DataType,
        c_dtype: DataType,
        transa: bool,
        transb: bool,
        dims: tuple[int, int, int],
        alpha: int,
        beta: int,
        a: tuple[int, int, int],
        b: tuple[int, int, int],
        c: tuple[int, int, int],
        batch: int,
        tf32: bool,
    ) -> None:
        self.dtype, self.c_dtype, self.transa, self.transb = dtype, c_dtype, transa, transb
        self.dims, self.alpha, self.beta = dims, alpha, beta
        self.a, self.b, self.c, self.batch, self.tf32 = a, b, c, batch, tf32

    def strided_args(self, codes: dict[DataType, int]) -> tuple[Any, ...]:
        """``m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype,
        ldc, strideC, batch``: the middle of both vendors' ``GemmStridedBatchedEx``."""
        t, tc = codes[self.dtype], codes[self.c_dtype]
        return (
            *self.dims,
            self.alpha,
            self.a[0],
            t,
            *self.a[1:],
            self.b[0],
            t,
            *self.b[1:],
            self.beta,
            self.c[0],
            tc,
            *self.c[1:],
            self.batch,
        )

    def single_args(self, codes: dict[DataType, int], index: int) -> tuple[Any, ...]:
        """``m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc`` of batch
        entry ``index``: the middle of a vendor's ``GemmEx``."""
        t, tc = codes[self.dtype], codes[self.c_dtype]
        size, c_size = self.dtype.itemsize, self.c_dtype.itemsize
        return (
            *self.dims,
            self.alpha,
            self.a[0] + index * self.a[2] * size,
            t,
            self.a[1],
            self.b[0] + index * self.b[2] * size,
            t,
            self.b[1],
            self.beta,
            self.c[0] + index * self.c[2] * c_size,
            tc,
            self.c[1],
        )
