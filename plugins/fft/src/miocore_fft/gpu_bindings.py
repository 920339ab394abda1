"""The vendor FFT libraries behind ``fft.gpu_rfft`` (:mod:`miocore_fft.gpu`).

cuFFT through CuPy (:class:`_CupyFft`) and hipFFT through hip-python (:class:`_HipFft`), each
with the same small interface (``prepare``, ``transform``, ``plan_bytes``); :func:`fft_driver`
picks one for a backend, :func:`binding_missing` says why a binding cannot be imported, and
:class:`FftBindingError` is raised when a binding fails or is missing.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Sequence
from typing import Any

from miocore import MiocoreError, NotApplicableError


class FftBindingError(MiocoreError):
    """The vendor FFT binding (CuPy for cuFFT, hip-python for hipFFT) failed or is missing."""


@functools.cache
def binding_missing(backend: str) -> str | None:
    """Why the FFT binding of ``backend`` cannot be imported, or None when it can."""
    if backend == "cuda":
        if importlib.util.find_spec("cupy") is None:
            return "CuPy (cuFFT) is not installed: pip install 'miocore-fft[cuda]'"
        return None
    if backend == "hip":
        try:
            found = importlib.util.find_spec("hip.hipfft") is not None
        except ModuleNotFoundError:
            found = False
        return None if found else "hip-python's hipfft is not installed: pip install hip-python"
    return f"no FFT binding for backend {backend!r}"


# -- FFT library drivers --------------------------------------------------------------------


class _CupyFft:
    """cuFFT through CuPy: ``cupy.cuda.cufft.PlanNd`` plans over raw pointers wrapped as CuPy
    arrays without copies, run on the handle's stream (``cupy.cuda.ExternalStream``)."""

    def __init__(self, device_index: int, lengths: tuple[int, ...]) -> None:
        try:
            import cupy
            from cupy.cuda import cufft
        except ImportError as exc:
            raise FftBindingError(
                f"CuPy is needed for cuFFT: {exc}", field="binding", value="cupy"
            ) from exc
        self.cupy, self.cufft = cupy, cufft
        self.device = cupy.cuda.Device(device_index)
        self.lengths = lengths
        self.half = (*lengths[:-1], lengths[-1] // 2 + 1)
        self._plans: dict[tuple[str, int], Any] = {}

    def _plan(self, kind: str, batch: int) -> Any:
        key = (kind, batch)
        found = self._plans.get(key)
        if found is None:
            cufft = self.cufft
            r2c = kind == "r2c"
            # inembed / onembed None: packed batches (idist = prod(L), odist = bins).
            found = cufft.PlanNd(
                list(self.lengths),
                None,
                1,
                math.prod(self.lengths if r2c else self.half),
                None,
                1,
                math.prod(self.half if r2c else self.lengths),
                cufft.CUFFT_R2C if r2c else cufft.CUFFT_C2R,
                batch,
                "C",
                -1,
                self.half[-1] if r2c else self.lengths[-1],
            )
            self._plans[key] = found
        return found

    def plan_bytes(self) -> int:
        """Bytes of the plans' work areas (CuPy's pool: outside the caller's workspace)."""
        total = 0
        for plan in self._plans.values():
            area = getattr(plan, "work_area", None)
            total += int(getattr(getattr(area, "mem", None), "size", 0) or 0)
        return total

    def _wrap(self, ptr: int, shape: tuple[int, ...], dtype: Any, owner: Any) -> Any:
        import numpy as np

        cupy = self.cupy
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        memory = cupy.cuda.UnownedMemory(ptr, nbytes, owner, self.device.id)
        return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0))

    def prepare(self, batches: Sequence[int], inverse_batch: int) -> None:
        """Create every plan up front (outside the timed calls)."""
        with self.device:
            for b in batches:
                self._plan("r2c", b)
            self._plan("c2r", inverse_batch)

    def transform(self, kind: str, src: int, dst: int, batch: int, stream: int, owner: Any) -> None:
        """One batched R2C (``kind="r2c"``) or C2R transform from ``src`` to ``dst``."""
        import numpy as np

        cupy = self.cupy
        r2c = kind == "r2c"
        real = (batch, *self.lengths)
        spec = (batch, *self.half)
        with self.device, cupy.cuda.ExternalStream(stream):
            plan = self._plan(kind, batch)
            if r2c:
                a = self._wrap(src, real, np.float32, owner)
                out = self._wrap(dst, spec, np.complex64, owner)
                plan.fft(a, out, self.cufft.CUFFT_FORWARD)
            else:
                a = self._wrap(src, spec, np.complex64, owner)
                out = self._wrap(dst, real, np.float32, owner)
                plan.fft(a, out, self.cufft.CUFFT_INVERSE)


def _hip_value(result: Any, call: str) -> Any:
    """hip-python returns ``(status, value...)`` tuples; raise on a bad status, return the
    value. UNVERIFIED on an AMD GPU (none was available): written from hip-python 7.2's
    docstrings."""
    values = result if isinstance(result, tuple) else (result,)
    rest = []
    for v in values:
        if type(v).__name__.startswith("hipfftResult"):
            if int(getattr(v, "value", v)) != 0:
                raise FftBindingError(f"{call} failed: {v}", field="call", value=call)
        else:
            rest.append(v)
    return rest[0] if rest else None


class _HipFft:
    """hipFFT through hip-python (``hip.hipfft``): ``hipfftPlanMany`` plans on raw pointers.
    UNVERIFIED: no AMD GPU was available; the host side is not exercised by any test."""

    def __init__(self, device_index: int, lengths: tuple[int, ...]) -> None:
        try:
            from hip import hipfft
        except ImportError as exc:
            raise FftBindingError(
                f"hip-python's hipfft is needed for hipFFT: {exc}", field="binding", value="hip"
            ) from exc
        self.hipfft = hipfft
        self.lengths = lengths
        self._plans: dict[tuple[str, int], Any] = {}

    def _plan(self, kind: str, batch: int) -> Any:
        import numpy as np

        key = (kind, batch)
        found = self._plans.get(key)
        if found is None:
            h = self.hipfft
            kind_enum = h.hipfftType.HIPFFT_R2C if kind == "r2c" else h.hipfftType.HIPFFT_C2R
            n = np.array(self.lengths, dtype=np.int32)
            found = _hip_value(
                h.hipfftPlanMany(len(self.lengths), n, None, 1, 0, None, 1, 0, kind_enum, batch),
                "hipfftPlanMany",
            )
            self._plans[key] = found
        return found

    def plan_bytes(self) -> int:
        """hipFFT allocates its plans' work areas itself; not known here."""
        return 0

    def prepare(self, batches: Sequence[int], inverse_batch: int) -> None:
        """Create every plan up front."""
        for b in batches:
            self._plan("r2c", b)
        self._plan("c2r", inverse_batch)

    def transform(self, kind: str, src: int, dst: int, batch: int, stream: int, owner: Any) -> None:
        """One batched R2C or C2R transform on ``stream``."""
        h = self.hipfft
        plan = self._plan(kind, batch)
        _hip_value(h.hipfftSetStream(plan, stream), "hipfftSetStream")
        if kind == "r2c":
            _hip_value(h.hipfftExecR2C(plan, src, dst), "hipfftExecR2C")
        else:
            _hip_value(h.hipfftExecC2R(plan, src, dst), "hipfftExecC2R")


def fft_driver(backend: Any, lengths: tuple[int, ...]) -> Any:
    index = int(getattr(backend.driver, "index", 0))
    if backend.name == "cuda":
        return _CupyFft(index, lengths)
    if backend.name == "hip":
        return _HipFft(index, lengths)
    raise NotApplicableError(
        "fft.gpu_rfft runs on cuda or hip backends", field="backend", value=backend.name
    )
