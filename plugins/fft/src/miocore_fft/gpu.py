"""``fft.gpu_rfft``: FFT convolution on GPUs: whole-image real FFTs through the vendor FFT
library (cuFFT through CuPy on NVIDIA, hipFFT through hip-python on AMD), a per-bin complex
channel reduction kernel of our own, and pack / crop kernels (``kernels/fft_conv.cu``).

For a stride-1, undilated, ungrouped problem with input extent ``S``, padding ``p`` and filter
``F`` per spatial dimension, every direction uses the same FFT length per dimension,
``L = smooth(S + 2p)`` (the smallest ``2^a 3^b 5^c 7^d`` at least that: cuFFT's fast radices).
Every operand is placed at offset 0 of a zero-filled ``L``-periodic buffer; the padding becomes
a read offset on the way out, and no product wraps around (the circular correlation covers
indices ``-p .. S+p-1``, all distinct mod ``L``):

* forward:          ``Y[n,k] = sum_c X[n,c] . conj(W[k,c])``,  ``y[o] = r[(o - p) mod L]``
* backward data:    ``DX[n,c] = sum_k DY[n,k] . W[k,c]``,      ``dx[i] = r[(i + p) mod L]``
* backward weights: ``DW[k,c] = sum_n conj(DY[n,k]) . X[n,c]``, ``dw[t] = r[(t - p) mod L]``

(per frequency bin; ``r`` is the unnormalised inverse transform divided by ``prod(L)``).

Pipeline per call (all on the handle's stream): pack operand A (float32, zero-extended) ->
R2C -> pack operand B -> R2C -> ``fft_cmac`` (the reduction) -> C2R -> ``fft_unpack`` (crop,
offset, ``1/prod(L)`` scale, cast, write through the descriptor's strides: NCHW and NHWC
alike). The real staging buffer is reused by all three real arrays; the spectra have their own
regions. Everything lives in the caller's workspace except the FFT plans' own work areas
(allocated once per invoker by the FFT library / CuPy's pool; see :attr:`_Invoker.plan_bytes`).

The FFT library bindings (cuFFT through CuPy, hipFFT through hip-python) are in
:mod:`miocore_fft.gpu_bindings`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    DataType,
    Direction,
    ExecutionContext,
    InvokeParams,
    KernelInfo,
    NotApplicableError,
    PerfConfig,
    Solver,
    WorkspaceError,
    not_applicable,
)
from miocore.backends.gpu_kernels import (
    DTYPE_OPTIONS,
    GPU_BACKENDS,
    KernelArgs,
    channels_last,
    grid_for,
    tensor5_bytes,
)
from miocore.values import frozen

# FftBindingError is re-exported: it was defined here before the bindings moved out.
from miocore_fft.gpu_bindings import FftBindingError as FftBindingError
from miocore_fft.gpu_bindings import binding_missing, fft_driver

KERNEL_DIR = Path(__file__).parent / "kernels"
SOURCE = "fft/fft_conv.cu"
#: Threads per block of every kernel (the reduction: bins per block).
BLOCK = 128
#: Buffers start on 256-byte boundaries (cuFFT and coalesced loads want at least 16).
ALIGN = 256
#: Largest workspace the solver asks for; bigger problems are declined (the untiled spectra
#: grow with ``N*C``, ``K*C`` and ``N*K`` times the padded image).
MAX_WORKSPACE = 8 << 30
#: cuFFT / hipFFT plans take ``int`` sizes: every batch of transforms must stay below this.
MAX_ELEMENTS = 2**31 - 1
#: Longest FFT length per dimension (beyond it the transforms are no longer the point).
MAX_LENGTH = 4096

# Cost model (``wti``). Estimates before device calibration, see README "GPU": cuFFT's
# batched 2-D real transforms are memory bound on Hopper (fraction of the bandwidth below),
# the register-tiled reduction kernel reaches a fraction of the fp32 FMA rate.
#: Fraction of the memory bandwidth the transforms and the pack / crop kernels reach.
BANDWIDTH_EFFICIENCY = 0.6
#: Fraction of the fp32 peak the reduction kernel's complex multiply-adds reach.
CMAC_EFFICIENCY = 0.35
#: Fixed cost of one call: seven launches and the Python driving them, milliseconds.
CALL_OVERHEAD_MS = 0.05


def smooth_length(n: int) -> int:
    """The smallest ``2^a 3^b 5^c 7^d >= n`` (lengths cuFFT and rocFFT transform fastest)."""
    if n < 1:
        raise ValueError(f"FFT length must be positive, got {n}")
    best = 1 << max(0, (n - 1).bit_length())  # a power of two always qualifies
    p7 = 1
    while p7 < best:
        p5 = p7
        while p5 < best:
            p3 = p5
            while p3 < best:
                m = p3
                while m < n:
                    m *= 2
                best = min(best, m)
                p3 *= 3
            p5 *= 5
        p7 *= 7
    return best


def _align(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def _tile(extent: int) -> int:
    """Rows of the reduction tile along one matrix side: 8 for wide sides, down to 1."""
    for t in (8, 4, 2):
        if extent >= t:
            return t
    return 1


@frozen
class MacGeometry:
    """The per-bin reduction ``out[i, j] = sum_r opA(a[i, r]) opB(b[j, r])``: sizes and strides
    (complex elements) in the order of ``MioFftMac`` in ``kernels/fft_conv.cu``."""

    ni: int
    nj: int
    nr: int
    bins: int
    a_i: int
    a_r: int
    b_j: int
    b_r: int
    o_i: int
    o_j: int
    conj_a: int
    conj_b: int

    def to_bytes(self) -> bytes:
        """The struct as the kernel reads it (12 int64)."""
        import numpy as np

        return np.array(dataclasses.astuple(self), dtype=np.int64).tobytes()


@frozen
class FftGpuPlan:
    """Geometry and workspace layout of one problem for ``fft.gpu_rfft``."""

    problem: ConvProblem

    @functools.cached_property
    def nd(self) -> int:
        """Spatial dimensions (2 or 3)."""
        return self.problem.spatial_dims

    @functools.cached_property
    def lengths(self) -> tuple[int, ...]:
        """FFT length per spatial dimension: smooth, covering the padded input."""
        p = self.problem
        return tuple(
            smooth_length(s + 2 * pad) for s, pad in zip(p.in_spatial, p.conv.pads, strict=True)
        )

    @functools.cached_property
    def points(self) -> int:
        """Real samples of one transform."""
        return math.prod(self.lengths)

    @functools.cached_property
    def bins(self) -> int:
        """Complex bins of one real transform's half spectrum."""
        return math.prod(self.lengths[:-1]) * (self.lengths[-1] // 2 + 1)

    @functools.cached_property
    def roles(self) -> tuple[str, str, str]:
        """Tensor fields read as operand A, operand B, and written."""
        d = self.problem.direction
        if d is Direction.FORWARD:
            return ("x", "w", "y")
        if d is Direction.BACKWARD_DATA:
            return ("y", "w", "x")
        return ("y", "x", "w")

    @functools.cached_property
    def batches(self) -> tuple[int, int, int]:
        """Transforms of operand A, operand B and the output (rows of the packed buffers)."""
        p = self.problem
        rows = {"x": p.n * p.c, "w": p.k * p.c, "y": p.n * p.k}
        a, b, o = self.roles
        return rows[a], rows[b], rows[o]

    @functools.cached_property
    def mac(self) -> MacGeometry:
        """The reduction of this direction (see the module docstring)."""
        p, f = self.problem, self.bins
        n, c, k = p.n, p.c, p.k
        d = p.direction
        if d is Direction.FORWARD:  # (N, C) x (K, C) -> (N, K), conj(W)
            return MacGeometry(n, k, c, f, c * f, f, c * f, f, k * f, f, 0, 1)
        if d is Direction.BACKWARD_DATA:  # (N, K) x (K, C) -> (N, C)
            return MacGeometry(n, c, k, f, k * f, f, f, c * f, c * f, f, 0, 0)
        # backward weights: (N, K) x (N, C) -> (K, C), conj(DY), summed over N
        return MacGeometry(k, c, n, f, f, k * f, f, c * f, c * f, f, 1, 0)

    @functools.cached_property
    def tiles(self) -> tuple[int, int]:
        """Register tile (TI, TJ) of the reduction kernel; at most 32 accumulators."""
        ti, tj = _tile(self.mac.ni), _tile(self.mac.nj)
        while ti * tj > 32:
            if ti >= tj:
                ti //= 2
            else:
                tj //= 2
        return ti, tj

    @functools.cached_property
    def offsets(self) -> tuple[int, ...]:
        """Read offset per dimension (mod L) of the written tensor in the inverse transform."""
        d = self.problem.direction
        sign = 1 if d is Direction.BACKWARD_DATA else -1
        return tuple(
            (sign * pad) % length
            for pad, length in zip(self.problem.conv.pads, self.lengths, strict=True)
        )

    @functools.cached_property
    def regions(self) -> dict[str, tuple[int, int]]:
        """``name -> (offset, bytes)`` of the workspace: the real stage (reused by A, B and
        the output) and the three spectra."""
        ba, bb, bo = self.batches
        sizes = {
            "real": 4 * max(ba, bb, bo) * self.points,
            "spec_a": 8 * ba * self.bins,
            "spec_b": 8 * bb * self.bins,
            "spec_out": 8 * bo * self.bins,
        }
        out, offset = {}, 0
        for name, size in sizes.items():
            out[name] = (offset, size)
            offset += _align(size)
        return out

    @functools.cached_property
    def workspace_bytes(self) -> int:
        """Total workspace: the aligned regions."""
        offset, size = self.regions["spec_out"]
        return offset + _align(size)

    def geom_bytes(self) -> bytes:
        """``MioFftGeom``: lengths and read offsets in (D, H, W) order, D = 1 for 2-D."""
        import numpy as np

        pad = 3 - self.nd
        lengths = [1] * pad + list(self.lengths)
        offsets = [0] * pad + list(self.offsets)
        return np.array(lengths + offsets, dtype=np.int64).tobytes()

    # -- cost -------------------------------------------------------------------------------

    @functools.cached_property
    def fft_flops(self) -> float:
        """Real transforms at ``2.5 L log2 L`` flops each (half of ``5 L log2 L``)."""
        return 2.5 * self.points * math.log2(max(self.points, 2)) * sum(self.batches)

    @functools.cached_property
    def cmac_flops(self) -> float:
        """Complex multiply-adds of the reduction, 8 real flops each."""
        m = self.mac
        return 8.0 * m.bins * m.ni * m.nj * m.nr

    @functools.cached_property
    def traffic_bytes(self) -> float:
        """Bytes every pass moves: pack (read tensor, write stage), R2C (read stage, write
        spectrum), the reduction (operand rows re-read once per tile of the other side), C2R,
        crop (read the stage, write the tensor)."""
        p = self.problem
        ba, bb, bo = self.batches
        real, spec = 4 * self.points, 8 * self.bins
        a, b, o = self.roles
        size = p.dtype.itemsize
        tensor = {name: getattr(p, name).element_count * size for name in ("x", "w", "y")}
        ti, tj = self.tiles
        m = self.mac
        pack = tensor[a] + tensor[b] + (ba + bb) * real
        r2c = (ba + bb) * (real + spec)
        cmac = ba * spec * math.ceil(m.nj / tj) + bb * spec * math.ceil(m.ni / ti) + bo * spec
        c2r = bo * (spec + real)
        crop = tensor[o] * (1 + 4 / size)
        return float(pack + r2c + cmac + c2r + crop)

    def predicted_ms(self, ctx: ExecutionContext) -> float:
        """Estimated milliseconds: the traffic at a fraction of the bandwidth, the transforms'
        flops, the reduction's flops at a fraction of fp32 peak, and the launch overhead."""
        dtype = DataType.FLOAT32
        mem = ctx.roofline_ms(0, self.traffic_bytes / BANDWIDTH_EFFICIENCY, dtype)
        fft = ctx.roofline_ms(self.fft_flops, 0, dtype, 0.5)
        cmac = ctx.roofline_ms(self.cmac_flops, 0, dtype, CMAC_EFFICIENCY)
        return mem + fft + cmac + CALL_OVERHEAD_MS


class GpuRfftSolver(Solver):
    """Whole-image real FFTs (cuFFT / hipFFT) with a per-bin complex channel reduction."""

    name = "fft.gpu_rfft"
    numerical_notes = frozenset({"fft"})
    algorithm = Algorithm.FFT
    backends = GPU_BACKENDS
    is_dynamic = False  # the reduction tile is compiled in

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """Stride 1, dilation 1, groups 1, FFT lengths and workspace within limits."""
        p = problem
        if ctx.backend not in GPU_BACKENDS:
            return not_applicable(f"backend {ctx.backend!r}: fft.gpu_rfft runs on GPU backends")
        if any(s != 1 for s in p.conv.strides):
            return not_applicable(
                f"strides {p.conv.strides}: FFT convolution needs stride 1 (a strided output "
                "would discard all but 1/stride of each transform)"
            )
        if any(d != 1 for d in p.conv.dilations):
            return not_applicable(
                f"dilations {p.conv.dilations}: fft.gpu_rfft takes undilated filters "
                "(fft.overlap_save on the CPU folds dilation in)"
            )
        if p.groups != 1:
            return not_applicable(
                f"groups {p.groups}: fft.gpu_rfft reduces over all channels (groups = 1)"
            )
        plan = FftGpuPlan(p)
        if max(plan.lengths) > MAX_LENGTH:
            return not_applicable(f"FFT lengths {plan.lengths} exceed {MAX_LENGTH}")
        ba, bb, bo = plan.batches
        if max(ba, bb, bo) * plan.points > MAX_ELEMENTS:
            return not_applicable(
                f"{max(ba, bb, bo)} transforms of {plan.points} points exceed the FFT "
                "library's 32-bit sizes"
            )
        if plan.workspace_bytes > MAX_WORKSPACE:
            return not_applicable(
                f"workspace {plan.workspace_bytes} bytes exceeds {MAX_WORKSPACE} (untiled "
                "spectra of every image and filter)"
            )
        m = plan.mac
        ti, tj = plan.tiles
        if -(-m.ni // ti) > 65535 or -(-m.nj // tj) > 65535:
            return not_applicable("a reduction side exceeds the grid's y/z limit (65535 tiles)")
        # The FFT binding is checked when the invoker is built (NotApplicableError with the
        # install hint), as gemm.gpu_im2col does for the BLAS: applicability stays a property of
        # the problem, so the offline compile checks (no CuPy in CI) cover these kernels.
        return APPLICABLE

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """The real stage and the three spectra (see :attr:`FftGpuPlan.regions`)."""
        return FftGpuPlan(problem).workspace_bytes

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Ideal time over :meth:`FftGpuPlan.predicted_ms`: transforms and traffic do not
        shrink with the filter, so 1x1 and 3x3 rank low and large filters high."""
        if not self.is_applicable(ctx, problem):
            return -1.0
        return ctx.wti(problem, FftGpuPlan(problem).predicted_ms(ctx))

    def expected_error(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> float | None:
        """Float32: every output mixes a whole padded image through ``2 log2 prod(L)``
        butterfly stages and a reduction of ``R`` spectra (channels, or images for weights),
        so the error relative to the largest output grows like ``eps32 * log2 prod(L) *
        sqrt(R)``; the constant keeps a ~10x margin over what the CPU solver measured (4.2e-7
        at L <= 256). float16 / bfloat16: output rounding dominates (None)."""
        if problem.dtype is not DataType.FLOAT32:
            return None
        plan = FftGpuPlan(problem)
        reduction = plan.mac.nr
        return max(2e-5, 6e-8 * math.log2(plan.points) * math.sqrt(reduction))

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The pack, reduction and crop kernels, and an invoker that drives the FFT library."""
        plan = FftGpuPlan(problem)
        ti, tj = plan.tiles
        dtype_opt = DTYPE_OPTIONS[problem.dtype]
        kernels = (
            KernelInfo(source=SOURCE, kernel_name="fft_pack", options=(dtype_opt,), block=(BLOCK,)),
            KernelInfo(
                source=SOURCE,
                kernel_name="fft_cmac",
                options=(dtype_opt, f"-DMIO_FFT_TI={ti}", f"-DMIO_FFT_TJ={tj}"),
                block=(BLOCK,),
            ),
            KernelInfo(
                source=SOURCE, kernel_name="fft_unpack", options=(dtype_opt,), block=(BLOCK,)
            ),
        )

        def factory(compiled: Sequence[Any]) -> Any:
            pack, cmac, unpack = compiled
            missing = binding_missing(pack.backend.name)
            if missing:
                raise NotApplicableError(missing, field="solver", value=self.name)
            return _Invoker(plan, pack.backend, pack, cmac, unpack)

        return ConvSolution(
            solver=self.name,
            workspace_size=plan.workspace_bytes,
            invoker_factory=factory,
            kernels=kernels,
        )


class _Invoker:
    """Runs one problem: two packs and R2Cs, the reduction, one C2R and the crop."""

    def __init__(self, plan: FftGpuPlan, backend: Any, pack: Any, cmac: Any, unpack: Any) -> None:
        self.plan = plan
        self.pack, self.cmac, self.unpack = pack, cmac, unpack
        p = plan.problem
        device = backend.device
        geom = plan.geom_bytes()
        a, b, o = plan.roles
        self.fft = fft_driver(backend, plan.lengths)
        ba, bb, bo = plan.batches
        self.fft.prepare((ba, bb), bo)
        self.plan_bytes = self.fft.plan_bytes()
        self.pack_a = KernelArgs(
            [("ptr", 0), ("ptr", 0), ("bytes", tensor5_bytes(getattr(p, a))), ("bytes", geom)]
        )
        self.pack_b = KernelArgs(
            [("ptr", 0), ("ptr", 0), ("bytes", tensor5_bytes(getattr(p, b))), ("bytes", geom)]
        )
        self.grid_a = grid_for(ba * plan.points, BLOCK, device)
        self.grid_b = grid_for(bb * plan.points, BLOCK, device)
        out_desc = getattr(p, o)
        self.unpack_args = KernelArgs(
            [
                ("ptr", 0),
                ("ptr", 0),
                ("bytes", tensor5_bytes(out_desc)),
                ("bytes", geom),
                ("i32", int(channels_last(out_desc))),
                ("f32", 1.0 / plan.points),
            ]
        )
        self.grid_out = grid_for(out_desc.element_count, BLOCK, device)
        self.mac_args = KernelArgs(
            [("ptr", 0), ("ptr", 0), ("ptr", 0), ("bytes", plan.mac.to_bytes())]
        )
        ti, tj = plan.tiles
        m = plan.mac
        self.grid_mac = (-(-m.bins // BLOCK), -(-m.ni // ti), -(-m.nj // tj))

    def __call__(self, handle: Any, ip: InvokeParams) -> None:
        plan = self.plan
        if ip.workspace is None:
            raise WorkspaceError(
                f"fft.gpu_rfft needs a workspace of {plan.workspace_bytes} bytes",
                field="workspace",
                value=None,
            )
        ws = ip.workspace.ptr
        regions = plan.regions
        real = ws + regions["real"][0]
        spec_a = ws + regions["spec_a"][0]
        spec_b = ws + regions["spec_b"][0]
        spec_o = ws + regions["spec_out"][0]
        ptrs = {"x": ip.x.ptr, "w": ip.w.ptr, "y": ip.y.ptr}
        a, b, o = plan.roles
        ba, bb, bo = plan.batches
        stream = self.pack.backend.stream_handle
        self.pack_a.set_pointers(ptrs[a], real)
        self.pack.launch(self.pack_a, grid=(self.grid_a,))
        self.fft.transform("r2c", real, spec_a, ba, stream, ip)
        self.pack_b.set_pointers(ptrs[b], real)
        self.pack.launch(self.pack_b, grid=(self.grid_b,))
        self.fft.transform("r2c", real, spec_b, bb, stream, ip)
        self.mac_args.set_pointers(spec_a, spec_b, spec_o)
        self.cmac.launch(self.mac_args, grid=self.grid_mac)
        self.fft.transform("c2r", spec_o, real, bo, stream, ip)
        self.unpack_args.set_pointers(real, ptrs[o])
        self.unpack.launch(self.unpack_args, grid=(self.grid_out,))
