"""``winograd.fused``: Winograd ``F(m x m, 3 x 3)`` on the CPU with compiled tile transforms.

``winograd.rxs`` (numpy) covers every filter, stride and group; its gathers, Kronecker-GEMM
transforms and scatters are single-threaded memory passes that took about half its time on
ResNet-50's 3x3 layers, so on two threads it lost to oneDNN's direct convolution there
(0.55-0.69). This solver takes the common case only (3x3, stride 1, dilation 1, one group,
float32, forward and backward data) and runs it as three steps per chunk of tiles: the input
transform straight from the caller's NHWC tensor into the GEMM operand
(:mod:`miocore_winograd.fused_kernels`, vectorised over channels, on the calling thread), one
strided-batch GEMM of ``alpha^2`` products through :func:`miocore.backends.cpu_gemm.matmul`, and
the output transform straight into the caller's NHWC output. NCHW tensors are staged through
an NHWC copy in the workspace. Backward data is the forward correlation of ``dy`` (padded by
``2 - pad``) with the flipped filter, channels swapped.

Perf config ``{"tile": m, "block": tiles per chunk}``, ``m`` in 2 and 4 (:data:`BLOCKS`).
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    DataType,
    Direction,
    ExecutionContext,
    InvalidArgumentError,
    InvokeParams,
    PerfConfig,
    TunableSolver,
    not_applicable,
)
from miocore_winograd.configs import TileBlockConfigs
from miocore_winograd.plans import Layout

if TYPE_CHECKING:
    import numpy as np

#: Output tile sizes per axis: F(2,3) and F(4,3).
TILES: tuple[int, ...] = (2, 4)
#: Tiles per chunk the tuner tries: -1 the default chunk (:data:`CHUNK_BYTES`), 0 every tile in
#: one chunk, else that many tiles.
BLOCKS: tuple[int, ...] = (-1, 0, 128, 512, 2048)
#: Bytes of transformed tiles (the GEMM's two operands of a chunk) the default chunk holds:
#: big chunks make long GEMMs and few parallel regions, small ones stay in the last-level
#: cache (measured on ResNet-50's 3x3 layers, 2 threads: 512 tiles of 64 channels, ~9 MB).
CHUNK_BYTES = 12 * 1024 * 1024
#: The default tile: F(2,3). F(4,3) is 1.2-1.9x faster on images of 28 and more per side
#: (ResNet-50's 3x3 layers, 2 threads), but its float32 error, 2.5-3e-6 on those layers with
#: the balanced points, is 11x the plain GEMM path's, and find's default accuracy policy keeps
#: a transforming solver only within 2x of it (F(2,3): about 1.5x). Tuning tries F(4,3) too,
#: for callers whose accuracy policy accepts it.
DEFAULT_TILE = 2
#: Float32 error per tile (max abs error / max abs reference) at a reduction of 16 channels,
#: growing with the square root of the reduction (as ``winograd.rxs``'s bound).
FP32_ERROR_BY_TILE = {2: 2e-6, 4: 3e-5}
#: Cost model: the batched GEMM at this fraction of the CPU's peak, the transforms streaming
#: the tensors and the transformed tiles at memory speed, and a fixed cost per chunk (two
#: compiled passes and a GEMM call) and per call.
GEMM_EFFICIENCY = 0.6
CHUNK_OVERHEAD_MS = 0.03
CALL_OVERHEAD_MS = 0.02


class _Plan:
    """Geometry and workspace of one problem under one config."""

    def __init__(self, problem: ConvProblem, tile: int, block: int) -> None:
        p = problem
        self.backward = p.direction is Direction.BACKWARD_DATA
        self.m = tile
        self.alpha = tile + 2
        pads = tuple(p.conv.pads)
        # The correlation this plan runs: src (N, sh, sw, cin) -> dst (N, dh, dw, kout).
        if self.backward:
            self.cin, self.kout = p.k, p.c
            self.src_hw = tuple(p.out_spatial)
            self.dst_hw = tuple(p.in_spatial)
            self.pads = tuple(2 - q for q in pads)
        else:
            self.cin, self.kout = p.c, p.k
            self.src_hw = tuple(p.in_spatial)
            self.dst_hw = tuple(p.out_spatial)
            self.pads = pads
        self.n = p.n
        self.tiles_hw = tuple(-(-d // tile) for d in self.dst_hw)
        self.tiles = self.n * self.tiles_hw[0] * self.tiles_hw[1]
        a2 = self.alpha * self.alpha
        per_tile = 4 * a2 * (self.cin + self.kout)
        chunk = block if block > 0 else self.tiles if block == 0 else CHUNK_BYTES // per_tile
        self.block = max(1, min(self.tiles, max(64, chunk) if block < 0 else chunk))
        n, (sh, sw), (dh, dw) = self.n, self.src_hw, self.dst_hw
        self.shapes = {
            "u": (a2, p.k, p.c),
            "v": (a2 * self.block * self.cin,),
            "mm": (a2 * self.block * self.kout,),
            "w": (p.k * p.c * 9,),
            "src": (n, sh, sw, self.cin),
            "dst": (n, dh, dw, self.kout),
        }
        self.layout = Layout()
        for name, shape in self.shapes.items():
            self.layout.add(name, math.prod(shape))
        self.workspace_bytes = self.layout.total
        self.gemm_flops = 2 * a2 * self.tiles * self.cin * self.kout
        self.filter_flops = 2 * a2 * 9 * p.k * p.c
        self.chunks = -(-self.tiles // self.block)
        elems = (
            n * (sh * sw * self.cin + dh * dw * self.kout)
            + 2 * a2 * self.tiles * (self.cin + self.kout)
            + a2 * p.k * p.c
        )
        self.stream_bytes = 4 * elems

    def view(self, workspace: np.ndarray, name: str) -> np.ndarray:
        """The float32 region ``name`` of the workspace, shaped."""
        return self.layout.view(workspace, name, self.shapes[name])

    def predicted_ms(self, ctx: ExecutionContext, dtype: DataType) -> float:
        """GEMM at :data:`GEMM_EFFICIENCY` of the peak, the streamed bytes, fixed costs."""
        gemm = ctx.roofline_ms(self.gemm_flops + self.filter_flops, 0, dtype, GEMM_EFFICIENCY)
        stream = ctx.roofline_ms(0, self.stream_bytes, dtype)
        return gemm + stream + CHUNK_OVERHEAD_MS * self.chunks + CALL_OVERHEAD_MS


@functools.lru_cache(maxsize=256)
def _plan(problem: ConvProblem, tile: int, block: int) -> _Plan:
    return _Plan(problem, tile, block)


@functools.cache
def _filter_matrix(tile: int, flipped: bool) -> np.ndarray:
    """``G (x) G`` of ``F(tile, 3)`` (``alpha^2 x 9``), its taps reversed for backward data."""
    import numpy as np

    from miocore_winograd.transforms import BALANCED_POINTS, to_array, toom_cook

    g = to_array(toom_cook(tile, 3, BALANCED_POINTS)[1])
    gg = np.kron(g, g).astype(np.float32)
    out = np.ascontiguousarray(gg[:, ::-1] if flipped else gg)
    out.flags.writeable = False
    return out


class _FusedInvoker:
    """Runs one plan on the caller's arrays: filter transform, then per chunk of tiles the
    input transform, the batched GEMM and the output transform."""

    def __init__(self, plan: _Plan) -> None:
        from miocore.backends.cpu_generated import choose_wait_policy

        choose_wait_policy()  # before numba starts its OpenMP threads
        from miocore_winograd.fused_kernels import input_kernel, output_kernel

        self.plan = plan
        self.to_tiles = input_kernel(plan.m, 3)
        self.from_tiles = output_kernel(plan.m, 3)
        self.gg = _filter_matrix(plan.m, plan.backward)

    def __call__(self, handle: Any, params: InvokeParams) -> None:
        import numba

        from miocore.backends.cpu_gemm import gemms_on_openmp

        if gemms_on_openmp():  # the GEMMs run on the same threads
            self._run(params)
            return
        # The GEMMs run on OpenBLAS's pool: the transforms stay on the calling thread. An
        # OpenMP worker still spinning after a two-thread transform held the core the BLAS
        # worker needed, for a scheduler tick per chunk (ResNet-50's l3 3x3 layer, batch 8:
        # 8-11 ms against 3.7 with one-thread transforms, where PyTorch's libgomp, which numba
        # then shares, spins; docs/performance-cpu-winograd.md).
        threads = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            self._run(params)
        finally:
            numba.set_num_threads(threads)

    def _run(self, params: InvokeParams) -> None:
        import numpy as np

        from miocore.backends.cpu import workspace_view
        from miocore.backends.cpu_gemm import matmul

        plan = self.plan
        ws = workspace_view(params.workspace, plan.workspace_bytes)
        src_arr, dst_arr = (params.y, params.x) if plan.backward else (params.x, params.y)
        weights = self._weights(params.w, ws)
        a2 = plan.alpha * plan.alpha
        src = src_arr.transpose(0, 2, 3, 1)
        if not (src.dtype == np.float32 and src.flags.c_contiguous):
            staged = plan.view(ws, "src")
            np.copyto(staged, src, casting="unsafe")
            src = staged
        dst = dst_arr.transpose(0, 2, 3, 1)
        direct = dst.dtype == np.float32 and dst.flags.c_contiguous
        out = dst if direct else plan.view(ws, "dst")
        th, tw = plan.tiles_hw
        ph, pw = plan.pads
        v_all, mm_all = plan.view(ws, "v"), plan.view(ws, "mm")
        for t0 in range(0, plan.tiles, plan.block):
            count = min(plan.block, plan.tiles - t0)
            v = v_all[: a2 * count * plan.cin].reshape(a2, count, plan.cin)
            mm = mm_all[: a2 * count * plan.kout].reshape(a2, count, plan.kout)
            self.to_tiles(src, v, (th, tw, ph, pw, t0, count))
            matmul(v, weights, mm)
            self.from_tiles(mm, out, (th, tw, t0, count))
        if not direct:
            np.copyto(dst, out, casting="unsafe")

    def _weights(self, w: np.ndarray, ws: np.ndarray) -> np.ndarray:
        """The transformed filter as the GEMM's ``(alpha^2, cin, kout)`` operand (a view).

        Filters stored KRSC (channels-last) are transformed per output channel into
        ``(K, alpha^2, C)``, KCRS ones in one product into ``(alpha^2, K, C)``; other strides
        and types are copied to KCRS float32 first. Either way the GEMM reads the result in
        place, transposed where the direction needs it.
        """
        import numpy as np

        from miocore.backends.cpu_gemm import matmul

        plan = self.plan
        a2 = plan.alpha * plan.alpha
        k, c = w.shape[:2]
        u = plan.view(ws, "u")
        krsc = w.transpose(0, 2, 3, 1)
        if w.dtype == np.float32 and krsc.flags.c_contiguous:
            per_k = u.reshape(k, a2, c)
            matmul(self.gg, krsc.reshape(k, 9, c), per_k)
            return per_k.transpose(1, 0, 2) if plan.backward else per_k.transpose(1, 2, 0)
        if not (w.dtype == np.float32 and w.flags.c_contiguous):
            staged = plan.view(ws, "w").reshape(w.shape)
            np.copyto(staged, w, casting="unsafe")
            w = staged
        matmul(self.gg, w.reshape(k * c, 9).T, u.reshape(a2, k * c))
        return u if plan.backward else u.transpose(0, 2, 1)


class WinogradFused(TileBlockConfigs, TunableSolver):
    """Winograd ``F(m x m, 3 x 3)``, ``m`` 2 or 4, for 2-D 3x3 stride-1 undilated
    convolutions of one group in float32, forward and backward data, on the CPU: compiled
    transforms (numba) around one strided-batch GEMM per chunk of tiles.

    Perf config: ``{"tile": m, "block": tiles per chunk (0: all)}``.
    """

    name = "winograd.fused"
    numerical_notes = frozenset({"winograd"})
    algorithm = Algorithm.WINOGRAD
    is_dynamic = True
    tiles = TILES
    blocks = BLOCKS
    backends = ("cpu",)

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """CPU, float32, 2-D, 3x3, stride 1, dilation 1, one group, forward or backward data
        (backward data: pads of at most 2), NCHW or NHWC."""
        p = problem
        if ctx.backend not in self.backends:
            return not_applicable(f"runs on the CPU backend only, not {ctx.backend!r}")
        if p.dtype is not DataType.FLOAT32:
            return not_applicable(f"dtype {p.dtype.value}: float32 only")
        if p.spatial_dims != 2:
            return not_applicable(f"{p.spatial_dims}-D problem; 2-D only")
        if tuple(p.filter_spatial) != (3, 3):
            return not_applicable(f"filter {tuple(p.filter_spatial)}; 3x3 only")
        if any(s != 1 for s in p.conv.strides) or any(d != 1 for d in p.conv.dilations):
            return not_applicable(f"stride {p.conv.strides}, dilation {p.conv.dilations}: 1 only")
        if p.groups != 1:
            return not_applicable(f"groups {p.groups}: one group only")
        if p.direction is Direction.BACKWARD_WEIGHTS:
            return not_applicable("backward weights is not covered (winograd.rxs has it)")
        if p.direction is Direction.BACKWARD_DATA and any(q > 2 for q in p.conv.pads):
            return not_applicable(f"backward data with pads {p.conv.pads} > 2")
        if p.x.layout not in ("NCHW", "NHWC") or p.y.layout not in ("NCHW", "NHWC"):
            return not_applicable(f"layouts {p.x.layout}/{p.y.layout}: NCHW or NHWC only")
        return APPLICABLE

    def compiles_for(self, ctx: ExecutionContext, problem: ConvProblem) -> bool:
        """Whether the first run compiles the transforms of the default tile (10-30 s each,
        once per machine): neither this process nor numba's disk cache holds them."""
        from miocore.backends.cpu_generated import generated_ready
        from miocore_winograd.fused_kernels import input_spec, output_spec

        if not self.is_applicable(ctx, problem):
            return False
        tile = int(self.default_perf_config(ctx, problem)["tile"])
        return not all(generated_ready(*spec(tile, 3)) for spec in (input_spec, output_spec))

    # -- perf configs -----------------------------------------------------------------------

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """:data:`DEFAULT_TILE`, chunks of :data:`CHUNK_BYTES`."""
        return PerfConfig(tile=DEFAULT_TILE, block=-1)

    def find_configs(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """F(4,3) at the default chunk: a normal find measures it once F(2,3) comes near the
        best, and keeps it where the caller's accuracy policy accepts its error (``fast``);
        ``default`` leaves it out (:data:`DEFAULT_TILE`)."""
        return [PerfConfig(tile=4, block=-1)]

    def expected_error(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> float | None:
        """The tile's float32 bound, growing with the square root of the reduction."""
        tile, _ = self._config(ctx, problem, perf_config)
        reduction = problem.k if problem.direction is Direction.BACKWARD_DATA else problem.c
        return FP32_ERROR_BY_TILE[tile] * max(1.0, math.sqrt(reduction / 16))

    # -- solution ---------------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Transformed filter, one chunk's two GEMM operands, staged float32 copies."""
        tile, block = self._config(ctx, problem, perf_config)
        return _plan(problem, tile, block).workspace_bytes

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """Plan once; the invoker loads the compiled transforms of the tile."""
        answer = self.is_applicable(ctx, problem)
        if not answer:
            raise InvalidArgumentError(answer.reason, field="problem", value=problem.key)
        tile, block = self._config(ctx, problem, perf_config)
        plan = _plan(problem, tile, block)
        invoker = _FusedInvoker(plan)
        return ConvSolution(
            solver=self.name,
            workspace_size=plan.workspace_bytes,
            invoker_factory=lambda _k: invoker,
            perf_config=PerfConfig(tile=tile, block=block),
        )

    def predicted_ms(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The default config's cost model (:meth:`_Plan.predicted_ms`)."""
        tile, block = self._config(ctx, problem, None)
        return _plan(problem, tile, block).predicted_ms(ctx, problem.dtype)


__all__ = ["WinogradFused"]
