"""``cudnn.eng<id>``: cuDNN's convolution engines as miocore solvers, one per engine id.

Every solver answers for one cuDNN engine (its global index in cuDNN's engine list for a
convolution graph). Its ``PerfConfig`` holds the engine's knob choices in cuDNN's own
notation (``{"k2": 1, "k13": 0}`` for the config cuDNN names ``eng28_k2=1_k13=0``): the
default is the choice of cuDNN's heuristics, the space every configuration of that engine
the heuristics list (modes A and FALLBACK). A FindDb record therefore names engine and knobs,
and a new process rebuilds exactly that configuration.
"""

from __future__ import annotations

import math
from typing import Any

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    DataType,
    ExecutionContext,
    InvokeParams,
    NotApplicableError,
    PerfConfig,
    TunableSolver,
    not_applicable,
)
from miocore.solver.numerics import NumericalNote
from miocore_cudnn import _loader
from miocore_cudnn._plans import (
    UID_W,
    UID_X,
    UID_Y,
    EngineConfig,
    PlanError,
    ProblemPlans,
    plans_for,
    runtime_compiled_mode,
)

#: Engine ids registered: ``cudnn.eng0`` .. ``cudnn.eng{MAX_ENGINE_ID}``. cuDNN 9's
#: convolution graphs report some 60-70 engines (``get_engine_count``); the margin keeps the
#: names stable when a release adds a few. An engine beyond it is never offered.
MAX_ENGINE_ID = 99
#: Estimated fraction of peak of cuDNN's first choice, per data type and math mode: its
#: tensor-core engines reach 0.6-0.8 of the fp16 rate on ResNet layers (issue 12's
#: measurements put cuDNN's whole-network convolutions there), exact fp32 runs on the
#: CUDA cores, where cuDNN's best reaches about half of that rate.
WTI_FIRST_CHOICE = {
    (DataType.FLOAT16, "exact"): 0.7,
    (DataType.BFLOAT16, "exact"): 0.7,
    (DataType.FLOAT32, "exact"): 0.5,
    (DataType.FLOAT32, "tf32"): 0.6,
}
#: Estimated fraction of peak (the memory roofline: these layers are memory-bound) of cuDNN's
#: first choice on a depthwise problem. Measured on an H100 in fp16, NHWC, batch 32, with the
#: engines this plugin allows by default: 0.22 (3x3, 16 channels, 112²), 0.17 (5x5 stride 2,
#: 72 channels, 56²), 0.012 (7x7, 96 channels, 56²); miocore's own depthwise kernel measured
#: 0.39, 0.14 and 0.027 on the same layers (docs/performance.md). At 0.7 the default find left
#: the own kernel out, uncompiled, wherever cuDNN applied.
WTI_DEPTHWISE = 0.15
#: Each step down cuDNN's heuristics ranking lowers the estimate by this factor.
WTI_RANK_DECAY = 0.9
#: Floor of the estimate for engines far down the ranking.
WTI_FLOOR = 0.05


#: Unit roundoff of the element types a transform's operands are rounded to.
_UNIT_ROUNDOFF = {
    DataType.FLOAT32: 2.0**-24,
    DataType.FLOAT16: 2.0**-11,
    DataType.BFLOAT16: 2.0**-8,
}
#: Error growth of a half-type Winograd transform (F(2,3)-sized tiles, as cuDNN's are).
_HALF_GROWTH = 16.0


def _transform_bound(problem: ConvProblem) -> float:
    """Relative error bound of an FFT / Winograd engine: the transforms mix a tile (or an
    image) and sum over the channels per group and taps, so rounding grows like a random
    walk over that reduction. fp32: as miocore's own FFT bound (at least 2e-5); half types:
    the tile's growth times the unit roundoff (operands are rounded after the transform)."""
    reduction = max(1, problem.c // problem.groups) * math.prod(problem.filter_spatial)
    if problem.dtype is DataType.FLOAT32:
        return max(2e-5, 1e-6 * math.sqrt(reduction))
    unit = _UNIT_ROUNDOFF[problem.dtype]
    return _HALF_GROWTH * unit * max(1.0, math.sqrt(reduction / 16))


#: The notes of a configuration that reduces below fp32.
REDUCED_NOTES = frozenset({NumericalNote.REDUCED_PRECISION_ACCUMULATION.value})

#: Listed configurations of one engine a normal find measures (when the engine comes near
#: the best): the heuristics rarely list more per engine.
FIND_CONFIGS = 8


class CudnnEngineSolver(TunableSolver):
    """One cuDNN engine (set ``engine`` in a subclass, see :func:`engine_solver`)."""

    engine: int = -1
    algorithm = Algorithm.IMPLICIT_GEMM
    backends = frozenset({"cuda"})
    #: Nothing is compiled per problem by miocore (cuDNN's run-time compiled engines are left
    #: out unless allowed), so DYNAMIC_HYBRID find benchmarks these.
    is_dynamic = True
    #: Applicability is the heuristics' list; the default setting and its workspace are known
    #: once cuDNN builds the plan (13-130 ms for a run-time compiled engine), which find asks
    #: for only for the engines it measures.
    deferred_setup = True

    # -- the problem's plans ---------------------------------------------------------------

    def _plans(self, ctx: ExecutionContext, problem: ConvProblem) -> tuple[Any, ProblemPlans]:
        """(cudnn module, the problem's plans); PlanError naming why they cannot be had."""
        if ctx.backend != "cuda":
            # The core's own wording when it filters by backend, so find passes it on as is.
            raise PlanError(f"runs on cuda, not {ctx.backend}")
        cudnn, reason = _loader.frontend()
        if cudnn is None:
            raise PlanError(reason)
        handle, reason = _loader.handle_for(ctx.device.identity)
        if handle is None:
            raise PlanError(reason)
        if problem.spatial_dims not in (2, 3):
            raise PlanError(f"{problem.spatial_dims}-D problem: cuDNN engines take 2-D and 3-D")
        return cudnn, plans_for(cudnn, handle, ctx.device.identity, problem, ctx.math_mode)

    def _config(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None
    ) -> tuple[Any, ProblemPlans, EngineConfig]:
        """The configuration to build: ``perf_config``'s, else the default. PlanError if none."""
        cudnn, plans = self._plans(ctx, problem)
        if perf_config is None:
            config, reason = plans.default(self.engine)
            if config is None:
                raise PlanError(reason)
            return cudnn, plans, config
        config = plans.find(self.engine, PerfConfig(perf_config))
        if config is None:
            listed = [dict(c.knobs) for c in plans.by_engine.get(self.engine, ())]
            raise PlanError(
                f"cuDNN lists no configuration of engine {self.engine} with knobs "
                f"{dict(perf_config)} for this problem (listed: {listed})"
            )
        plans.build(config)
        return cudnn, plans, config

    # -- the solver contract ---------------------------------------------------------------

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """Where cuDNN loads on the cuda backend and its heuristics offer this engine with a
        configuration that is not turned off. Whether one builds (and its numerics are
        allowed) is learnt from :meth:`default_perf_config` (``deferred_setup``)."""
        try:
            _, plans = self._plans(ctx, problem)
        except PlanError as exc:
            return not_applicable(str(exc))
        reason = plans.offers(self.engine)
        return not_applicable(reason) if reason else APPLICABLE

    def compiles_for(self, ctx: ExecutionContext, problem: ConvProblem) -> bool:
        """Whether cuDNN compiles this engine's kernel for ``problem`` (a run-time compiled
        engine: 10-260 ms per problem on an H200), so DYNAMIC_HYBRID find measures it only
        where the learned estimate puts it near the best ready candidate (the default,
        ``MIOCORE_CUDNN_RUNTIME_COMPILED=compile``). False with ``=1``: measured in every
        find."""
        if runtime_compiled_mode() != "compile":
            return False
        try:
            _, plans = self._plans(ctx, problem)
        except PlanError:
            return False
        return plans.compiles(self.engine)

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """Every configuration of this engine cuDNN's heuristics list, in their order, then
        single-knob variations of the engine's defaults (each knob cuDNN reports for the
        engine over its range), up to 16 in all; empty where cuDNN is not available or does
        not offer the engine."""
        try:
            _, plans = self._plans(ctx, problem)
        except PlanError:
            return []
        plans.expand(self.engine)
        return [c.knobs for c in plans.by_engine.get(self.engine, ())]

    def find_configs(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """Every configuration of this engine cuDNN's heuristics list for the problem (up to
        :data:`FIND_CONFIGS`), the candidates PyTorch's benchmark mode times too; not the
        single-knob variations, which only tuning tries."""
        try:
            _, plans = self._plans(ctx, problem)
        except PlanError:
            return []
        listed = [c for c in plans.by_engine.get(self.engine, ()) if c.listed]
        return [c.knobs for c in listed[:FIND_CONFIGS]]

    def notes_for(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> frozenset[str]:
        """``reduced_precision_accumulation`` for a configuration cuDNN marks
        REDUCED_PRECISION_REDUCTION, none otherwise (the others accumulate in fp32; FFT and
        Winograd ones declare an error bound, :meth:`expected_error`)."""
        try:
            _, _, config = self._config(ctx, problem, perf_config)
        except PlanError:
            return frozenset()
        return REDUCED_NOTES if config.reduced else frozenset()

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The heuristics' first configuration of this engine that builds."""
        try:
            _, _, config = self._config(ctx, problem, None)
        except PlanError as exc:
            raise NotApplicableError(str(exc), field="solver", value=self.name) from None
        return config.knobs

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """Listed for this problem and built by cuDNN (a stale record may name neither)."""
        try:
            self._config(ctx, problem, config)
        except PlanError:
            return False
        return True

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """The built plan's own workspace need."""
        try:
            _, _, config = self._config(ctx, problem, perf_config)
        except PlanError as exc:
            raise NotApplicableError(str(exc), field="solver", value=self.name) from None
        assert config.workspace is not None
        return config.workspace

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """:data:`WTI_FIRST_CHOICE` for cuDNN's first choice (:data:`WTI_DEPTHWISE` on a
        depthwise problem), lowered by :data:`WTI_RANK_DECAY` per step down the heuristics'
        ranking."""
        mode = ctx.math_mode if problem.dtype is DataType.FLOAT32 else "exact"
        base = WTI_FIRST_CHOICE.get((problem.dtype, mode), 0.5)
        if problem.is_depthwise:
            base = WTI_DEPTHWISE
        try:
            _, plans = self._plans(ctx, problem)
        except PlanError:
            return base
        return max(WTI_FLOOR, base * WTI_RANK_DECAY ** plans.rank(self.engine))

    def expected_error(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> float | None:
        """A bound for FFT / Winograd configurations (cuDNN's numerical notes say which);
        None for the others, which accumulate in fp32."""
        try:
            cudnn, plans, config = self._config(ctx, problem, perf_config)
        except PlanError:
            return None
        return _transform_bound(problem) if plans.is_transform(cudnn, config) else None

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The built plan and an invoker that executes it on the handle's stream."""
        try:
            _, plans, config = self._config(ctx, problem, perf_config)
        except PlanError as exc:
            raise NotApplicableError(str(exc), field="solver", value=self.name) from None
        graph = config.graph if config.graph is not None else plans.graph
        index, cudnn_handle = config.index, plans.handle

        def factory(compiled: Any) -> Any:
            return CudnnInvoker(graph, index, cudnn_handle)

        assert config.workspace is not None
        return ConvSolution(
            solver=self.name,
            workspace_size=config.workspace,
            invoker_factory=factory,
            perf_config=config.knobs,
        )


class CudnnInvoker:
    """Runs one built plan: binds the cuDNN handle to the caller's stream (when it changed)
    and makes one ``execute`` call with the three device pointers and the workspace.

    While the stream is being captured the call is made in CUDA's relaxed capture mode: some
    engines make a call during ``execute`` that a capture in the global or thread-local mode
    refuses (engine 25 of a transposed convolution, cuDNN 9.19 on an H100: PyTorch's
    ``torch.cuda.graph`` then fails), while the graph recorded in relaxed mode replays the
    right result. ``at`` takes the addresses alone (a prepared run's per-call path).

    ``execute`` costs 11-35 µs of host time per call on an H100 host (docs/performance.md),
    more than a graph launch, so a prepared run records even this one launch per address triple
    it sees twice (``replay_pays``).
    """

    __slots__ = ("_execute", "graph", "handle", "index")
    replay_pays = True

    def __init__(self, graph: Any, index: int, handle: _loader.CudnnHandle) -> None:
        self.graph, self.index, self.handle = graph, index, handle
        # The binding's own entry point: a {uid: pointer} dict, no per-call wrapping.
        self._execute = graph._execute_plan_at_index

    def __call__(self, handle: Any, ip: InvokeParams) -> None:
        workspace = ip.workspace.ptr if ip.workspace is not None else 0
        self.at(handle, ip.x.ptr, ip.w.ptr, ip.y.ptr, workspace)

    def at(self, handle: Any, x: int, w: int, y: int, workspace: int) -> None:
        """Execute on the canonical problem's x, w and y at these device addresses."""
        cudnn_handle = self.handle
        backend = handle.backend
        stream = backend.stream_handle
        if stream != cudnn_handle.stream:
            cudnn_handle.bind(stream)
        pointers = {UID_X: x, UID_W: w, UID_Y: y}
        driver = backend.driver
        if driver.is_capturing(backend.stream_object):
            with driver.relaxed_capture():
                self._execute(pointers, workspace, self.index, cudnn_handle.raw)
        else:
            self._execute(pointers, workspace, self.index, cudnn_handle.raw)


def engine_solver(engine: int) -> CudnnEngineSolver:
    """The solver of cuDNN engine ``engine``: a class of its own named ``cudnn.eng<engine>``
    (names are class attributes for the registry and the contract suite)."""
    cls = type(
        f"CudnnEngine{engine}Solver",
        (CudnnEngineSolver,),
        {
            "name": f"cudnn.eng{engine}",
            "engine": engine,
            "__doc__": f"cuDNN engine {engine} (its global index for a convolution graph).",
        },
    )
    return cls()


#: One solver per engine id, 0 .. MAX_ENGINE_ID.
SOLVERS: tuple[CudnnEngineSolver, ...] = tuple(engine_solver(e) for e in range(MAX_ENGINE_ID + 1))
