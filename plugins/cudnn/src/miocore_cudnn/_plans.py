"""One cuDNN operation graph per problem, its engine configurations and their built plans.

For a problem (and the handle's math mode) :class:`ProblemPlans` builds the frontend graph
once: the three tensors with the descriptors' lengths and strides (so NCHW, NHWC and any
packed stride order reach cuDNN as they are), one ``conv_fprop`` / ``conv_dgrad`` /
``conv_wgrad`` node, fp32 compute. It then asks cuDNN's heuristics (modes A and FALLBACK;
``MIOCORE_CUDNN_HEURISTICS`` names others, such as B) for engine configurations and reads
each one's name, cuDNN's own ``eng<id>_k<knob>=<value>`` tag: the engine id picks the solver
(``cudnn.eng<id>``), the knob choices become its ``PerfConfig`` (``{"k2": 1, "k13": 0}``, the
keys being cuDNN's backend knob type numbers).

Numerics are filtered before anything is built: engines with the DOWN_CONVERT_INPUTS note
never; REDUCED_PRECISION_REDUCTION ones are refused by the main graph and built in a second
graph that allows them, marked ``reduced`` (the solver's ``notes_for`` then names them, for
the accuracy policies; ``MIOCORE_CUDNN_REDUCED_PRECISION=0`` keeps them out); and for fp32 in
the ``"exact"`` math mode no
TENSOR_CORE (TF32), as PyTorch does with ``allow_tf32=False``. Engines that compile at run
time (behaviour note RUNTIME_COMPILATION) take part unless ``MIOCORE_CUDNN_RUNTIME_COMPILED=0``:
they are the fast depthwise engines PyTorch picks, and their build costs 10-260 ms a problem
on an H200, so DYNAMIC_HYBRID find treats them as compiles (measured where the learned
estimate puts them near the best ready candidate; ``=1`` measures them in every find).

Plans are built on first use (``build_plan_at_index``) and kept with their workspace size;
:func:`plans_for` keeps the graphs of the last :data:`CACHE_SIZE` problems.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from miocore import ConvProblem, DataType, Direction, InvalidEnvironmentError, PerfConfig
from miocore_cudnn._loader import CudnnHandle

#: Problems whose graphs and plans stay cached (least recently used dropped first).
CACHE_SIZE = 256
#: Environment switch for engines needing run-time compilation (on unless set to 0/false).
ENV_RUNTIME_COMPILED = "MIOCORE_CUDNN_RUNTIME_COMPILED"
#: Lets engines that reduce in a precision below fp32 in (PyTorch lets them; find's accuracy
#: check still measures each against its bound).
ENV_REDUCED_PRECISION = "MIOCORE_CUDNN_REDUCED_PRECISION"
#: cuDNN's heuristics modes asked for engine configurations, in order (comma-separated names
#: of ``cudnn.heur_mode``: A, B, FALLBACK).
ENV_HEURISTICS = "MIOCORE_CUDNN_HEURISTICS"
#: The modes asked when the variable is unset: mode B (cuDNN's slower, more thorough
#: heuristic) cost 35 ms a problem of EfficientNet-B0 on an H200 against 4.6 for A and
#: FALLBACK, and the choices of a find without it were 1.006x those with it (geomean, 133 of
#: 137 within 5%: docs/performance-gpu-first-find.md). PyTorch asks A and FALLBACK too.
DEFAULT_HEURISTICS = ("A", "FALLBACK")
#: Variant-pack uids of x, w and y in every direction (the direction says which is written).
UID_X, UID_W, UID_Y = 1, 2, 3
#: Engine configurations kept per engine: the heuristics rarely list more.
MAX_CONFIGS_PER_ENGINE = 16

_TAG = re.compile(r"eng(\d+)((?:_k\d+=-?\d+)*)")
_KNOB = re.compile(r"_k(\d+)=(-?\d+)")


class PlanError(Exception):
    """A configuration cannot be built or run for the problem; the message is cuDNN's."""


@dataclass
class EngineConfig:
    """One heuristics answer: its index in the graph's plan list, engine id, knob choices."""

    index: int
    engine: int
    tag: str
    knobs: PerfConfig
    workspace: int | None = None
    error: str | None = None
    #: The graph holding this configuration's plan: the problem's heuristics graph (None),
    #: the graph that lets reduced-precision configurations build, or a one-configuration
    #: graph of its own (a knob variation, see ProblemPlans.expand).
    graph: Any = None
    #: Listed by the heuristics (not a knob variation).
    listed: bool = True
    #: Reduces in a precision below fp32 (cuDNN's REDUCED_PRECISION_REDUCTION note).
    reduced: bool = False
    #: cuDNN compiles its kernel for the problem when the plan is built (RUNTIME_COMPILATION).
    runtime_compiled: bool = False


def parse_tag(tag: str) -> tuple[int, PerfConfig]:
    """``"eng28_k2=1_k13=0"`` -> ``(28, PerfConfig(k2=1, k13=0))``."""
    match = _TAG.search(tag)
    if match is None:
        raise PlanError(f"unexpected cuDNN engine config name {tag!r}")
    knobs = {f"k{k}": int(v) for k, v in _KNOB.findall(match.group(2))}
    return int(match.group(1)), PerfConfig(knobs)


def _dtype(cudnn: Any, dtype: DataType) -> Any:
    return {
        DataType.FLOAT32: cudnn.data_type.FLOAT,
        DataType.FLOAT16: cudnn.data_type.HALF,
        DataType.BFLOAT16: cudnn.data_type.BFLOAT16,
    }[dtype]


def barred_notes(
    cudnn: Any, problem: ConvProblem, math_mode: str, reduced: bool = False
) -> list[Any]:
    """The numerical notes an engine may not carry for ``problem`` in ``math_mode``;
    REDUCED_PRECISION_REDUCTION too unless ``reduced`` (the graph that builds such
    configurations, see :meth:`ProblemPlans.build`)."""
    notes = cudnn.numerical_note
    barred = [notes.DOWN_CONVERT_INPUTS]
    if not reduced:
        barred.append(notes.REDUCED_PRECISION_REDUCTION)
    if problem.dtype is DataType.FLOAT32 and math_mode != "tf32":
        barred.append(notes.TENSOR_CORE)
    return barred


def reduced_precision_allowed() -> bool:
    """Whether configurations that reduce below fp32 take part (``MIOCORE_CUDNN_REDUCED_
    PRECISION``, default on): they carry the ``reduced_precision_accumulation`` note, so
    ``strict`` refuses them and ``default`` measures them against the plain path."""
    return _env_on(ENV_REDUCED_PRECISION, default=True)


def runtime_compiled_mode() -> str:
    """``MIOCORE_CUDNN_RUNTIME_COMPILED``: ``"compile"`` (the default: run-time compiled
    engines take part, and DYNAMIC_HYBRID find treats each as a compile for the problem,
    built and measured only where the learned estimate puts it near the best ready
    candidate), ``"on"`` (``1``: measured in every find, as NORMAL find does), or ``"off"``
    (``0``: left out). docs/performance-gpu-first-find.md has what each costs and picks."""
    value = os.environ.get(ENV_RUNTIME_COMPILED, "").strip().lower()
    if not value or value == "compile":
        return "compile"
    if value in ("1", "true", "yes", "on"):
        return "on"
    if value in ("0", "false", "no", "off"):
        return "off"
    raise InvalidEnvironmentError(
        "expected compile, 1/on or 0/off", field=ENV_RUNTIME_COMPILED, value=value
    )


def runtime_compiled_allowed() -> bool:
    """Whether run-time compiled engines take part (see :func:`runtime_compiled_mode`)."""
    return runtime_compiled_mode() != "off"


def heuristic_modes() -> tuple[str, ...]:
    """The heuristics modes ``MIOCORE_CUDNN_HEURISTICS`` names (default A and FALLBACK).

    Mode B is cuDNN's slower, more thorough heuristic; where a graph has no mode B the
    others are asked alone."""
    value = os.environ.get(ENV_HEURISTICS, "").strip()
    if not value:
        return DEFAULT_HEURISTICS
    names = tuple(part.strip().upper() for part in value.split(",") if part.strip())
    unknown = [n for n in names if n not in ("A", "B", "FALLBACK")]
    if unknown or not names:
        raise InvalidEnvironmentError(
            "expected a comma-separated list of A, B and FALLBACK",
            field=ENV_HEURISTICS,
            value=value,
        )
    return tuple(dict.fromkeys(names))


def _env_on(name: str, default: bool = False) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    return value in ("1", "true", "yes", "on")


def build_graph(
    cudnn: Any,
    handle: CudnnHandle | None,
    problem: ConvProblem,
    lower: bool = True,
    **context: Any,
) -> Any:
    """The validated cuDNN graph of ``problem``, lowered to an operation graph when ``lower``
    (which needs a handle); no plans yet. ``context``: more of ``pygraph``'s arguments."""
    p = problem
    io = _dtype(cudnn, p.dtype)
    f32 = cudnn.data_type.FLOAT
    graph = cudnn.pygraph(
        io_data_type=io,
        intermediate_data_type=f32,
        compute_data_type=f32,
        handle=handle.raw if handle is not None else None,
        **context,
    )

    def tensor(desc: Any, uid: int, name: str) -> Any:
        return graph.tensor(
            name=name, dim=list(desc.lengths), stride=list(desc.strides), data_type=io, uid=uid
        )

    geometry = {
        "padding": list(p.conv.pads),
        "stride": list(p.conv.strides),
        "dilation": list(p.conv.dilations),
        "compute_data_type": f32,
    }
    if p.direction is Direction.FORWARD:
        out_desc, out_uid = p.y, UID_Y
        out = graph.conv_fprop(
            image=tensor(p.x, UID_X, "x"), weight=tensor(p.w, UID_W, "w"), **geometry
        )
    elif p.direction is Direction.BACKWARD_DATA:
        out_desc, out_uid = p.x, UID_X
        out = graph.conv_dgrad(
            loss=tensor(p.y, UID_Y, "dy"), filter=tensor(p.w, UID_W, "w"), **geometry
        )
    else:
        out_desc, out_uid = p.w, UID_W
        out = graph.conv_wgrad(
            image=tensor(p.x, UID_X, "x"), loss=tensor(p.y, UID_Y, "dy"), **geometry
        )
    out.set_output(True)
    out.set_dim(list(out_desc.lengths))
    out.set_stride(list(out_desc.strides))
    out.set_data_type(io)
    out.set_uid(out_uid)
    graph.validate()
    if lower:
        graph.build_operation_graph()
    return graph


class ProblemPlans:
    """The engine configurations cuDNN offers for one problem, built into plans on demand."""

    def __init__(
        self,
        cudnn: Any,
        handle: CudnnHandle,
        problem: ConvProblem,
        math_mode: str,
        modes: tuple[str, ...] | None = None,
    ):
        self.handle = handle
        self.problem = problem
        self._lock = threading.Lock()
        self.graph = build_graph(cudnn, handle, problem)
        self.engine_count = int(self.graph.get_engine_count())
        self._twin: Any = None
        self._reduced_graph: Any = None
        self._transform: dict[str, bool] = {}
        names = modes if modes is not None else heuristic_modes()
        self._modes = [getattr(cudnn.heur_mode, name) for name in names]
        try:
            self.graph.create_execution_plans(self._modes)
        except Exception:  # mode B is not offered for every graph; A and FALLBACK are
            if "B" not in names or len(names) == 1:
                raise
            self._modes = [getattr(cudnn.heur_mode, n) for n in names if n != "B"]
            self.graph.create_execution_plans(self._modes)
        self.cudnn, self.math_mode = cudnn, math_mode
        self.graph.deselect_numeric_notes(barred_notes(cudnn, problem, math_mode))
        self.by_engine: dict[int, list[EngineConfig]] = {}
        #: Engines in the heuristics' order of preference (first appearance).
        self.ranking: list[int] = []
        self._expanded: set[int] = set()
        for index in range(int(self.graph.get_execution_plan_count())):
            config = self._config_at(self.graph, index)
            if config is None or self._listed(config.engine, config.tag):
                continue
            configs = self.by_engine.setdefault(config.engine, [])
            if len(configs) < MAX_CONFIGS_PER_ENGINE:
                configs.append(config)
            if config.engine not in self.ranking:
                self.ranking.append(config.engine)

    def _listed(self, engine: int, tag: str) -> bool:
        return any(c.tag == tag for c in self.by_engine.get(engine, ()))

    def _config_at(self, graph: Any, index: int) -> EngineConfig | None:
        """The configuration at ``index`` of ``graph`` (None where cuDNN cannot name it),
        marked refused when it compiles at run time and that is not allowed."""
        try:
            tag = str(graph.get_plan_name_at_index(index))
            engine, knobs = parse_tag(tag)
        except Exception:
            return None
        config = EngineConfig(
            index=index, engine=engine, tag=tag, knobs=knobs,
            graph=None if graph is self.graph else graph,
        )  # fmt: skip
        try:
            notes = list(graph.get_behavior_notes_for_plan_at_index(index))
        except Exception:  # unknown notes: the build decides
            notes = []
        config.runtime_compiled = self.cudnn.behavior_note.RUNTIME_COMPILATION in notes
        if config.runtime_compiled and not runtime_compiled_allowed():
            config.error = (
                f"{tag} compiles at run time and {ENV_RUNTIME_COMPILED} turns such "
                "engines off; unset it (or set 1) to allow it"
            )
        return config

    def _variant(self, engine: int, recipe: str) -> EngineConfig | None:
        """Engine ``engine`` with the knob settings of ``recipe`` (``"TILE_SIZE=3"``, the
        frontend's knob type names), the rest at the engine's defaults, in a graph of its own
        (its numerical notes filtered as the heuristics graph's). Its PerfConfig is cuDNN's
        tag knobs plus ``via``: the recipe, so a new process can make it again."""
        cudnn = self.cudnn
        try:
            settings = {}
            for item in recipe.split(","):
                name, value = item.split("=")
                settings[getattr(cudnn.knob_type, name)] = int(value)
            graph = build_graph(cudnn, self.handle, self.problem)
            graph.create_execution_plan(engine, settings)
            graph.deselect_numeric_notes(barred_notes(cudnn, self.problem, self.math_mode))
        except Exception:
            return None
        config = self._config_at(graph, 0)
        if config is None or config.engine != engine:
            return None
        config.listed = False
        config.knobs = PerfConfig(dict(config.knobs), via=recipe)
        return config

    def expand(self, engine: int) -> None:
        """Add single-knob variations of ``engine`` (each knob cuDNN reports for it, each
        value of its range, the others at their defaults) until the engine has
        :data:`MAX_CONFIGS_PER_ENGINE` configurations. Once per engine; only engines the
        heuristics offer."""
        with self._lock:
            if engine in self._expanded or engine not in self.by_engine:
                return
            self._expanded.add(engine)
            try:
                knobs = list(self.graph.get_knobs_for_engine(engine))
            except Exception:
                return
        configs = self.by_engine[engine]
        for knob in knobs:
            name = getattr(knob.type, "name", "NOT_SET")
            if name == "NOT_SET" or knob.stride <= 0:
                continue
            for value in range(knob.min_value, knob.max_value + 1, knob.stride)[:8]:
                if len(configs) >= MAX_CONFIGS_PER_ENGINE:
                    return
                config = self._variant(engine, f"{name}={value}")
                if config is not None and not self._listed(engine, config.tag):
                    configs.append(config)

    def build(self, config: EngineConfig) -> int:
        """Build ``config``'s plan (once) and return its workspace bytes; PlanError if cuDNN
        refuses it (numerical notes, shared memory, support check)."""
        with self._lock:
            if config.workspace is None and config.error is None:
                graph = config.graph if config.graph is not None else self.graph
                try:
                    graph.build_plan_at_index(config.index)
                    size = graph.get_workspace_size_plan_at_index(config.index)
                    config.workspace = int(size)
                except Exception as exc:
                    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    barred = "Deselecting" in message
                    if not (barred and self._build_reduced(config)):
                        if barred:
                            message = (
                                "its numerical notes include one of DOWN_CONVERT_INPUTS, "
                                "REDUCED_PRECISION_REDUCTION (unless allowed) or (fp32, exact "
                                "math mode) TENSOR_CORE"
                            )
                        config.error = f"{config.tag}: {message or type(exc).__name__}"
        if config.error is not None:
            raise PlanError(config.error)
        assert config.workspace is not None
        return config.workspace

    def _build_reduced(self, config: EngineConfig) -> bool:
        """Build a listed configuration the main graph refused for its notes in the graph
        that allows REDUCED_PRECISION_REDUCTION, marking it reduced; False where that is not
        allowed or it is refused there too (another barred note). Called under the lock."""
        if not config.listed or not reduced_precision_allowed():
            return False
        try:
            if self._reduced_graph is None:
                graph = build_graph(self.cudnn, self.handle, self.problem)
                graph.create_execution_plans(self._modes)
                barred = barred_notes(self.cudnn, self.problem, self.math_mode, reduced=True)
                graph.deselect_numeric_notes(barred)
                self._reduced_graph = graph
            graph = self._reduced_graph
            for index in range(int(graph.get_execution_plan_count())):
                if graph.get_plan_name_at_index(index) == config.tag:
                    graph.build_plan_at_index(index)
                    config.workspace = int(graph.get_workspace_size_plan_at_index(index))
                    config.graph, config.index, config.reduced = graph, index, True
                    return True
        except Exception:  # refused there too: the caller reports the notes
            return False
        return False

    def offers(self, engine: int) -> str:
        """Why the heuristics offer no configuration of ``engine`` that may be built, or ""
        (nothing is built: a listed one may still be refused by :meth:`build`)."""
        configs = self.by_engine.get(engine)
        if not configs:
            offered = ", ".join(f"eng{e}" for e in self.ranking) or "none"
            return (
                f"cuDNN's heuristics do not offer engine {engine} for this problem "
                f"(offered: {offered}; {self.engine_count} engines exist for its graph)"
            )
        if all(c.error is not None for c in configs):
            return "; ".join(dict.fromkeys(str(c.error) for c in configs))
        return ""

    def compiles(self, engine: int) -> bool:
        """Whether ``engine``'s first usable listed configuration (its likely default) is
        compiled for this problem when built; nothing is built to tell."""
        for config in self.by_engine.get(engine, ()):
            if config.error is None:
                return config.runtime_compiled
        return False

    def default(self, engine: int) -> tuple[EngineConfig | None, str]:
        """The first configuration of ``engine`` (in the heuristics' order) that builds, or
        ``(None, reason)``."""
        reason = self.offers(engine)
        if reason:
            return None, reason
        configs = self.by_engine[engine]
        errors = []
        for config in configs:
            try:
                self.build(config)
            except PlanError as exc:
                errors.append(str(exc))
                continue
            return config, ""
        return None, "cuDNN refuses every configuration of this engine: " + "; ".join(errors)

    def find(self, engine: int, knobs: PerfConfig) -> EngineConfig | None:
        """The configuration of ``engine`` with exactly these knob choices: a listed one, or
        a variation remade from its ``via`` recipe when cuDNN still names it the same."""
        for config in self.by_engine.get(engine, ()):
            if config.knobs == knobs:
                return config
        recipe = knobs.get("via")
        if not isinstance(recipe, str) or engine not in self.by_engine:
            return None
        config = self._variant(engine, recipe)
        if config is None or config.knobs != knobs:
            return None
        with self._lock:
            self.by_engine[engine].append(config)
        return config

    def is_transform(self, cudnn: Any, config: EngineConfig) -> bool:
        """Whether cuDNN marks ``config`` FFT or Winograd (numerical notes the Python
        frontend only exposes as a filter: a twin graph deselects them and tries to build
        the same configuration). Asked once per configuration."""
        with self._lock:
            if config.tag in self._transform:
                return self._transform[config.tag]
            notes = cudnn.numerical_note
            transform = [notes.FFT, notes.WINOGRAD, notes.WINOGRAD_TILE_4x4]
            transform += [notes.WINOGRAD_TILE_6x6, notes.WINOGRAD_TILE_13x13]
            try:
                if self._twin is None:
                    twin = build_graph(cudnn, self.handle, self.problem)
                    twin.create_execution_plans(self._modes)
                    twin.deselect_numeric_notes(transform)
                    self._twin = twin
                twin = self._twin
                found = False
                for index in range(int(twin.get_execution_plan_count())):
                    if twin.get_plan_name_at_index(index) == config.tag:
                        twin.build_plan_at_index(index)
                        found = True
                        break
                answer = not found
            except Exception as exc:
                answer = "Deselecting" in str(exc)
            self._transform[config.tag] = answer
            return answer

    def rank(self, engine: int) -> int:
        """Position of ``engine`` in the heuristics' preference (0 = cuDNN's first choice)."""
        return self.ranking.index(engine) if engine in self.ranking else len(self.ranking)


@dataclass
class _Cache:
    entries: OrderedDict = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_cache = _Cache()


def plans_for(
    cudnn: Any, handle: CudnnHandle, device: str, problem: ConvProblem, math_mode: str
) -> ProblemPlans:
    """The cached :class:`ProblemPlans` of ``problem`` on ``device`` in ``math_mode`` (built on
    first use; the least recently used of more than :data:`CACHE_SIZE` are dropped). Raises
    PlanError when cuDNN cannot describe the problem at all."""
    modes = heuristic_modes()  # a bad value is the caller's error, not the problem's
    key = (device, math_mode, problem)
    with _cache.lock:
        found = _cache.entries.get(key)
        if found is not None:
            _cache.entries.move_to_end(key)
    if found is None:
        try:
            found = ProblemPlans(cudnn, handle, problem, math_mode, modes)
        except PlanError:
            raise
        except Exception as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            found = PlanError(f"cuDNN cannot describe this problem as a graph: {text}")
        with _cache.lock:
            _cache.entries[key] = found
            while len(_cache.entries) > CACHE_SIZE:
                _cache.entries.popitem(last=False)
    if isinstance(found, PlanError):
        raise found
    return found


def clear_cache() -> None:
    """Forget every cached graph and plan (tests; a changed environment switch)."""
    with _cache.lock:
        _cache.entries.clear()
