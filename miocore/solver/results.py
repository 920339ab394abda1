"""What find and immediate mode return: solutions that say where their time came from."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from miocore.problem.conv import ConvProblem
from miocore.solver.interface import Algorithm, PerfConfig
from miocore.values import define, field, frozen

#: Where a solution's time came from.
SOURCES = ("measured", "find-db", "system-db", "heuristic", "wti", "fallback")


@frozen(kw_only=True)
class Timing:
    """Statistics of timed runs: median, spread (inter-quartile range), min, max and count."""

    median_ms: float
    spread_ms: float
    min_ms: float
    max_ms: float
    count: int

    @classmethod
    def from_samples(cls, samples: Sequence[float]) -> Timing:
        """Summarise the times of several runs (at least one)."""
        import statistics  # when find measures: a FindDb hit reads stored summaries

        ordered = sorted(samples)
        if len(ordered) >= 4:
            q = statistics.quantiles(ordered, n=4, method="inclusive")
            spread = q[2] - q[0]
        else:
            spread = ordered[-1] - ordered[0]
        return cls(
            median_ms=statistics.median(ordered),
            spread_ms=spread,
            min_ms=ordered[0],
            max_ms=ordered[-1],
            count=len(ordered),
        )


@frozen(kw_only=True)
class Solution:
    """One way to solve a problem, with its time and where that time came from.

    A solution carries everything needed to run it on any handle of the same kind of device
    (problem, solver name, perf config), in this process or another.
    ``source``: ``measured`` (benchmarked by this call), ``find-db`` / ``system-db`` (measured
    earlier, read from the user or system FindDb), ``heuristic``, ``wti`` or ``fallback``
    (estimated, ``is_estimate`` True).
    """

    problem: ConvProblem
    solver: str
    solver_id: int
    algorithm: Algorithm
    time_ms: float
    workspace_size: int
    source: str
    is_estimate: bool
    timing: Timing | None = None
    perf_config: PerfConfig | None = None
    note: str = ""

    @property
    def gflops(self) -> float:
        """Achieved (or estimated) GFLOP/s of this solution on its problem."""
        if not self.time_ms or not math.isfinite(self.time_ms):
            return float("nan")
        return self.problem.flops / (self.time_ms * 1e6)

    def explain(self) -> str:
        """One line saying what this solution is and why its time is what it is."""
        what = f"{self.solver} ({self.algorithm.value})"
        origin = {
            "measured": "measured by this find",
            "find-db": "measured earlier, from the user FindDb",
            "system-db": "measured earlier, from the system FindDb",
            "heuristic": "estimated by a learned heuristic",
            "wti": "estimated from the solver's WTI",
            "fallback": "no estimate: listed as a fallback",
        }.get(self.source, self.source)
        stats = ""
        if self.timing is not None:
            runs = "run" if self.timing.count == 1 else "runs"
            stats = f", median of {self.timing.count} {runs}, spread {self.timing.spread_ms:.3g} ms"
        extra = f"; {self.note}" if self.note else ""
        return (
            f"{what}: {self.time_ms:.4g} ms, {origin}{stats}; workspace "
            f"{self.workspace_size} B{extra}"
        )


@frozen(kw_only=True)
class AlgorithmPerf:
    """A Find 1.0 result: the best solver of one algorithm family."""

    algorithm: Algorithm
    time_ms: float
    memory: int
    solver: str
    source: str
    is_estimate: bool


@define
class FindReport:
    """What a find or immediate call did: mode, hit or miss, and every solver left out and why."""

    key: str
    mode: str
    enforce: str
    db_hit: str | None = None
    benchmarked: list[str] = field(factory=list)
    not_applicable: dict[str, str] = field(factory=dict)
    failed: dict[str, str] = field(factory=dict)
    skipped: dict[str, str] = field(factory=dict)
    tuned: dict[str, str] = field(factory=dict)
    wrote_db: bool = False
    #: Databases whose user layer degraded to memory (``find_db``/``perf_db`` -> the status
    #: line); a storage fault is reported here, never as a solver's failure.
    storage: dict[str, str] = field(factory=dict)
    #: Solvers of a hit whose entries an older revision of the solver recorded
    #: (``Solver.revision``): they run today's default setting.
    stale_records: list[str] = field(factory=list)

    def lines(self) -> list[str]:
        """Human-readable summary, one fact a line."""
        out = [f"problem {self.key}: find mode {self.mode}, enforce {self.enforce}"]
        out.append(f"database: {'hit in ' + self.db_hit if self.db_hit else 'miss'}")
        if self.benchmarked:
            out.append(f"benchmarked: {', '.join(self.benchmarked)}")
        for name, config in self.tuned.items():
            out.append(f"tuned {name}: {config}")
        for title, items in (
            ("failed", self.failed),
            ("skipped", self.skipped),
            ("not applicable", self.not_applicable),
        ):
            for name, why in items.items():
                out.append(f"{title}: {name}: {why}")
        if self.wrote_db:
            out.append("wrote the user FindDb record" + (" (in memory)" if self.storage else ""))
        for name, line in self.storage.items():
            out.append(f"storage: {name} {line}")
        if self.stale_records:
            out.append(
                "recorded by an older revision of the solver, its default runs: "
                + ", ".join(self.stale_records)
            )
        return out


class Solutions(list[Solution]):
    """A list of solutions, fastest first, with the :class:`FindReport` of the call."""

    def __init__(self, items: Iterable[Solution] = (), report: FindReport | None = None) -> None:
        super().__init__(items)
        self.report = report


def tie_margin(faster_ms: float, spreads: Sequence[float], noise: float = 0.03) -> float:
    """How much slower than ``faster_ms`` a time may be and still count as tied: ``noise``
    times the faster time, or the smaller of the two spreads when both are known and that is
    larger (once one of the two is measured precisely, a larger difference is real)."""
    return max(noise * faster_ms, min(spreads) if len(spreads) == 2 else 0.0)


def order_with_ties(solutions: Sequence[Solution], noise: float = 0.03) -> list[Solution]:
    """Sort fastest first; times within noise of the leader of a group count as tied.

    Noise is the smaller of the two spreads (inter-quartile ranges), or ``noise`` times the
    faster time when that is larger. Within a tied
    group the order is stable across processes and ranks: smaller workspace first, then the
    solver name. This keeps repeated finds from flipping between near-equal winners.
    """
    by_time = sorted(solutions, key=lambda s: (s.time_ms, s.solver))
    out: list[Solution] = []
    i = 0
    while i < len(by_time):
        leader = by_time[i]
        group = [leader]
        j = i + 1
        while j < len(by_time):
            other = by_time[j]
            spreads = [s.timing.spread_ms for s in (leader, other) if s.timing is not None]
            if other.time_ms - leader.time_ms > tie_margin(leader.time_ms, spreads, noise):
                break
            group.append(other)
            j += 1
        out.extend(sorted(group, key=lambda s: (s.workspace_size, s.solver)))
        i = j
    return out
