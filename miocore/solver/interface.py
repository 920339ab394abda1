"""The solver contract: what a plugin implements so that miocore can find and run it.

A :class:`Solver` is a stateless object. Given an :class:`ExecutionContext` (which device) and a
canonical :class:`~miocore.problem.ConvProblem`, it says whether it applies (and why not), how
much workspace it needs, how good it expects to be (``wti``) and produces a
:class:`ConvSolution`: the kernels to compile (none on the CPU) and an :class:`InvokerFactory`
that turns compiled kernels into an :class:`Invoker`, which runs the solution on the caller's
buffers. Tunable solvers (:class:`TunableSolver`) add a space of :class:`PerfConfig` values.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from enum import StrEnum
from typing import Any, ClassVar, Protocol

from miocore.errors import InvalidArgumentError
from miocore.problem.conv import ConvProblem, Direction
from miocore.problem.dtypes import DataType
from miocore.values import field, frozen


class Algorithm(StrEnum):
    """Algorithm families. Find 1.0 answers with one of these per result."""

    DIRECT = "direct"
    WINOGRAD = "winograd"
    IMPLICIT_GEMM = "implicit_gemm"
    FFT = "fft"
    GEMM = "gemm"

    def miopen_name(self, direction: Direction) -> str:
        """MIOpen's name for this algorithm in ``direction`` (as its text FindDb writes it)."""
        prefix = {"forward": "Fwd", "backward_data": "BwdData", "backward_weights": "BwdWeights"}
        family = {
            "direct": "Direct",
            "winograd": "Winograd",
            "implicit_gemm": "ImplicitGEMM",
            "fft": "FFT",
            "gemm": "GEMM",
        }
        return f"miopenConvolution{prefix[direction.value]}Algo{family[self.value]}"

    @classmethod
    def parse(cls, value: Any, field: str = "algorithm") -> Algorithm:
        """Accept an Algorithm, its value, or a MIOpen algorithm name."""
        if isinstance(value, Algorithm):
            return value
        if isinstance(value, str):
            text = value.strip()
            for a in cls:
                if text.lower() == a.value or any(text == a.miopen_name(d) for d in Direction):
                    return a
        raise InvalidArgumentError(
            f"expected one of {[a.value for a in cls]}", field=field, value=value
        )


@frozen
class Applicability:
    """Answer of :meth:`Solver.is_applicable`: truthy when the solver applies, else the reason."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


APPLICABLE = Applicability(True)


def not_applicable(reason: str) -> Applicability:
    """A negative answer that says why, for ``miocore solvers`` to print."""
    return Applicability(False, reason)


@frozen(kw_only=True)
class Ceilings:
    """The rates a roofline needs: dense multiply-add GFLOP/s per data type, memory GB/s."""

    gflops: Mapping[DataType, float]
    gbps: float


@frozen(kw_only=True)
class DeviceInfo:
    """What solvers may know of the device: identity and the ceilings a roofline needs.

    ``identity`` names the database files (``sm90_132``, ``gfx90a104``, ``cpu_x86_64_2``).
    ``measure_ceilings`` is called once, on first use of :attr:`ceilings` (measuring a CPU
    takes a moment that most calls never need).
    """

    backend: str
    name: str
    arch: str
    compute_units: int
    identity: str
    measure_ceilings: Callable[[], Ceilings] = field(eq=False, repr=False)

    @property
    def ceilings(self) -> Ceilings:
        """Peak rates of this device (measured or known), cached per process."""
        return _cached_ceilings(self.measure_ceilings)

    @property
    def peak_gflops(self) -> Mapping[DataType, float]:
        """Dense multiply-add rate per data type, GFLOP/s."""
        return self.ceilings.gflops

    @property
    def peak_gbps(self) -> float:
        """Memory bandwidth, GB/s."""
        return self.ceilings.gbps


_CEILINGS: dict[Any, Ceilings] = {}


def _cached_ceilings(measure: Callable[[], Ceilings]) -> Ceilings:
    found = _CEILINGS.get(measure)
    if found is None:
        found = _CEILINGS[measure] = measure()
    return found


#: Math modes an :class:`ExecutionContext` (and ``Handle(math_mode=...)``) accepts.
MATH_MODES = ("exact", "tf32")


def _check_math_mode(_instance: Any, _attribute: Any, value: Any) -> None:
    if value not in MATH_MODES:
        raise InvalidArgumentError(
            f"expected one of {', '.join(MATH_MODES)}", field="math_mode", value=value
        )


@frozen(kw_only=True)
class ExecutionContext:
    """Where a solver will run, and under which math mode. Passed to every solver method.

    ``math_mode`` is the arithmetic the caller accepts: ``"exact"`` (the default: every
    solver computes in the problem's element type with at least fp32 accumulation) or
    ``"tf32"`` (fp32 problems may also be computed with TF32 inputs, 10 mantissa bits, on
    the matrix units). Solvers that reduce precision decline unless the mode allows it.
    """

    device: DeviceInfo
    math_mode: str = field(default="exact", validator=_check_math_mode)

    @property
    def backend(self) -> str:
        """``"cpu"``, ``"cuda"`` or ``"hip"``."""
        return self.device.backend

    def roofline_ms(
        self, flops: float, nbytes: float, dtype: DataType, efficiency: float = 1.0
    ) -> float:
        """Milliseconds a kernel doing ``flops`` and moving ``nbytes`` needs at best.

        ``efficiency`` (0, 1] scales the compute ceiling down for kernels that cannot reach it.
        """
        compute_s = flops / (self.device.peak_gflops[dtype] * 1e9 * efficiency)
        memory_s = nbytes / (self.device.peak_gbps * 1e9)
        return 1e3 * max(compute_s, memory_s)

    def ideal_ms(self, problem: ConvProblem) -> float:
        """The roofline time of the problem's own flops and bytes: the WTI reference (1.0)."""
        return self.roofline_ms(problem.flops, problem.bytes_moved, problem.dtype)

    def wti(self, problem: ConvProblem, predicted_ms: float) -> float:
        """Turn a solver's predicted time into a WTI: the ideal time over the predicted one."""
        if not math.isfinite(predicted_ms) or predicted_ms <= 0:
            return -1.0
        return min(1.0, self.ideal_ms(problem) / predicted_ms)


class PerfConfig(Mapping[str, Any]):
    """A tunable solver's performance configuration: an immutable mapping of plain values.

    It serialises to a stable JSON string for the PerfDb (never pickled).
    """

    __slots__ = ("_items",)

    def __init__(
        self, values: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), **kwargs: Any
    ) -> None:
        merged = dict(values, **kwargs)
        for k, v in merged.items():
            if not isinstance(k, str) or not isinstance(v, (int, float, str, bool, type(None))):
                raise InvalidArgumentError(
                    "perf config values must be int, float, str, bool or None",
                    field=str(k),
                    value=v,
                )
        self._items = tuple(sorted(merged.items()))

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PerfConfig):
            return self._items == other._items
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"PerfConfig({dict(self._items)!r})"

    def to_string(self) -> str:
        """Stable JSON text: what the PerfDb stores."""
        return json.dumps(dict(self._items), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_string(cls, text: str) -> PerfConfig:
        """Inverse of :meth:`to_string`."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(
                f"not a perf config: {exc}", field="perf_config", value=text
            ) from None
        if not isinstance(data, dict):
            raise InvalidArgumentError("not a perf config object", field="perf_config", value=text)
        return cls(data)


@frozen(kw_only=True)
class KernelInfo:
    """One kernel to compile for a GPU backend.

    ``source`` is a file name inside the plugin's kernel folder (declared through the
    ``miocore_kernel_sources`` hook); ``options`` are compiler flags such as ``-DTILE=16``.
    """

    source: str
    kernel_name: str
    options: tuple[str, ...] = ()
    grid: tuple[int, ...] = (1,)
    block: tuple[int, ...] = (1,)


@frozen(kw_only=True)
class InvokeParams:
    """Buffers of one run. On the CPU these are numpy arrays in logical order (any strides).

    The direction decides which of ``x``, ``w`` and ``y`` is written; the others are read.
    """

    problem: ConvProblem
    x: Any
    w: Any
    y: Any
    workspace: Any = None

    @property
    def direction(self) -> Direction:
        """Direction of the (canonical) problem."""
        return self.problem.direction


class InvokeHandle(Protocol):
    """What an invoker may use of the handle that calls it: its device backend (launches,
    streams, BLAS) and its execution context."""

    @property
    def backend(self) -> Any: ...

    @property
    def context(self) -> ExecutionContext: ...


class Invoker(Protocol):
    """Runs a compiled solution: ``invoker(handle, params)``; writes the output in place."""

    def __call__(self, handle: InvokeHandle, params: InvokeParams) -> None: ...


#: Turns the compiled kernels of a solution (in ``ConvSolution.kernels`` order) into an invoker.
InvokerFactory = Callable[[Sequence[Any]], Invoker]


@frozen(kw_only=True)
class ConvSolution:
    """What a solver returns for one problem: kernels, workspace and how to invoke them."""

    solver: str
    workspace_size: int = field(validator=lambda _s, _a, v: _check_workspace(v))
    invoker_factory: InvokerFactory
    kernels: tuple[KernelInfo, ...] = ()
    perf_config: PerfConfig | None = None


def _check_workspace(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError("must be an integer >= 0", field="workspace_size", value=value)


class Solver(ABC):
    """Base class of every solver. Stateless: one instance serves every problem and thread.

    Class attributes: ``name`` (stable, dotted, unique across plugins: databases store it),
    ``algorithm``, ``is_dynamic`` (True when no problem-specific compile is needed, so
    DYNAMIC_HYBRID find may benchmark it), ``backends`` (where it runs) and
    ``numerical_notes`` (what its arithmetic gives up: names from
    :data:`miocore.solver.numerics.KNOWN_NOTES`, such as ``"winograd"`` or ``"tf32"``) and
    ``deferred_setup`` (True when ``is_applicable`` is cheap but the default config and the
    workspace cost a build, as a vendor library's plans do: find then asks for them only for
    the candidates it measures, and a refusal at that point counts as not applicable) and
    ``revision`` (0 at first; raise it when the solver's kernels or default settings change,
    so that FindDb entries recorded earlier no longer say what it does now: such an entry
    runs today's default setting, and the modes that measure on a miss measure the solver
    again; ``miocore.find.hit``).
    """

    name: ClassVar[str]
    algorithm: ClassVar[Algorithm]
    is_dynamic: ClassVar[bool] = False
    deferred_setup: ClassVar[bool] = False
    backends: ClassVar[frozenset[str]] = frozenset({"cpu"})
    numerical_notes: ClassVar[frozenset[str]] = frozenset()
    revision: ClassVar[int] = 0

    @abstractmethod
    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability | bool:
        """Whether this solver solves ``problem`` on ``ctx``; a negative answer says why."""

    def compiles_for(self, ctx: ExecutionContext, problem: ConvProblem) -> bool:
        """Whether using this (dynamic) solver on ``problem`` compiles something for it all
        the same, as a library's run-time compiled kernels do; DYNAMIC_HYBRID find then
        treats it like a solver that is not dynamic. Cheap: nothing may be built to tell."""
        return False

    def notes_for(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> frozenset[str]:
        """The numerical notes of this solver's arithmetic on ``problem`` with ``perf_config``
        (what the accuracy policies act on): the class's ``numerical_notes``, unless the
        arithmetic differs per problem or setting (a vendor library's engine configurations,
        some of which reduce in a lower precision)."""
        return frozenset(self.numerical_notes)

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Bytes of workspace the solution needs (the real need, not a guess)."""
        return 0

    @abstractmethod
    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """Build the solution: kernels, workspace and invoker factory."""

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Estimated fraction of the device's peak this solver reaches (1.0 ideal, <0 unknown)."""
        return -1.0

    def expected_error(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> float | None:
        """The largest relative error (max abs error / max abs reference) the solver's own
        arithmetic can reach on ``problem``, or None when it is exact up to float32
        accumulation (direct, GEMM). Algorithms that transform their operands (Winograd, FFT)
        say how much they lose. Find's accuracy check never reports an error within this as a
        wrong answer (no deny-list entry); whether it is accurate enough to keep is the
        policy's bound (docs/numerics.md).
        """
        return None

    def __repr__(self) -> str:
        return f"<solver {self.name}>"


class TunableSolver(Solver):
    """A solver with a performance-config space that exhaustive find searches."""

    @abstractmethod
    def perf_config_space(
        self, ctx: ExecutionContext, problem: ConvProblem
    ) -> Iterable[PerfConfig]:
        """Every configuration worth trying, best guesses first."""

    @abstractmethod
    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The configuration used when the PerfDb has none."""

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """Whether ``config`` may be used for ``problem`` (a PerfDb entry may be stale)."""
        return config in list(self.perf_config_space(ctx, problem))

    def find_configs(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """The few configurations a normal find also measures once this solver's default
        comes near the best (``MIOCORE_FIND_ALTERNATIVES``); the fastest is recorded with
        the solution. Cheap ones only (nothing compiled per problem): what a vendor library
        lists as its own candidates. Default: none."""
        return []


def normalize_applicability(answer: Applicability | bool) -> Applicability:
    """Accept a bool from simple solvers; anything else must be an Applicability."""
    if isinstance(answer, Applicability):
        return answer
    if isinstance(answer, bool):
        return APPLICABLE if answer else not_applicable("the solver does not apply")
    raise TypeError(
        f"is_applicable returned {type(answer).__name__}, expected Applicability or bool"
    )
