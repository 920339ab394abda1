"""How find times one candidate: a warm-up, then timed runs until the median is settled, cut
short for a candidate that cannot win against the best time so far (design guide §4)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from miocore.solver.results import Timing, tie_margin

#: Timed runs after which a candidate whose times all lie within the noise rule's margin of
#: each other (:func:`~miocore.solver.results.tie_margin`) is measured: more runs could not
#: move its median out of a tie with itself.
STEADY_RUNS = 5


#: A candidate whose fastest of ``min_runs`` timed runs is over this many times the best
#: median so far stops there: it cannot come within the noise rule's margin of the best, and
#: most candidates of a find are such losers (about half of a small layer's timed runs).
RACE_FACTOR = 1.25


def _steady(samples: Sequence[float]) -> bool:
    fastest = min(samples)
    return max(samples) - fastest <= tie_margin(fastest, [])


def time_candidate(
    backend: Any,
    run: Callable[[], None],
    best_ms: float,
    *,
    min_runs: int = 3,
    max_runs: int = 15,
    min_total_ms: float = 40.0,
) -> tuple[Timing, str]:
    """``run``'s timing by ``backend.time_ms`` (device time on a GPU) and a note saying why
    it stopped early, if it did: at least ``min_runs`` timed runs after a warm-up, until
    ``min_total_ms`` of them, ``STEADY_RUNS`` steady ones or ``max_runs``; against
    ``best_ms`` (the best median so far) a hopeless candidate stops sooner."""
    first = backend.time_ms(run)  # warm-up: caches, lazy allocations
    samples: list[float] = []
    # A candidate far slower than the best so far cannot win: one more run is enough to
    # report an honest (measured) time without spending seconds on it. The judgement is
    # that run's, not the warm-up's: a warm-up also loads the candidate's kernels (a
    # numba kernel from its disk cache takes milliseconds), so it can be 10x slow where
    # the kernel is the fastest of all.
    if first > 10 * best_ms:
        samples.append(backend.time_ms(run))
        if samples[0] > 10 * best_ms:
            return Timing.from_samples(samples), (
                f"stopped after 1 timed run: over 10x the best time so far ({best_ms:.4g} ms)"
            )
    while len(samples) < max_runs:
        samples.append(backend.time_ms(run))
        if len(samples) >= min_runs and min(samples) > RACE_FACTOR * best_ms:
            return Timing.from_samples(samples), (
                f"stopped after {len(samples)} timed runs: over {RACE_FACTOR:g}x the best "
                f"time so far ({best_ms:.4g} ms)"
            )
        if len(samples) >= min_runs and sum(samples) >= min_total_ms:
            break
        if len(samples) >= STEADY_RUNS and _steady(samples):
            break
    return Timing.from_samples(samples), ""
