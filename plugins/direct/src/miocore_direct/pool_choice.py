"""Whether a call runs on numba's whole thread pool or on the calling thread alone.

Waking numba's pool costs a fixed time per parallel region where its threads sleep at once (GNU
OpenMP's passive wait policy, which :mod:`miocore_direct.openmp` chooses where the GEMMs run on
another pool): 38-55 µs a region on the development VM (2 vCPUs),
where a small depthwise layer took 0.03 ms on one thread and 0.40 ms on two (its staging
copies and kernel are several regions). So where the work is small, an invoker's first call
runs it both ways (alternating, one warm-up run each, then :data:`TRIALS` timed runs each)
and keeps the faster for its later calls, judged by each setting's fastest run: a run is only
ever slowed (a region whose thread the scheduler parked for a slice, a page fault), so the
minimum is what the setting can do, and one thread is kept only where it is clearly faster
(:data:`ONE_THREAD_MARGIN`). Judged by the median of three, a disturbed trial kept one thread
for up to a third of the grouped layers of a process (2 threads measured 1.6x faster there:
docs/performance-cpu-grouped.md). A call's result does not depend on the thread
count: every kernel of this plugin splits its work the same way for any pool (a fixed number
of partial sums, one writer per output), and a call overwrites its outputs, so running it
again is harmless. Work predicted to take more than :data:`TRY_BELOW_MS` on one thread always
takes the whole pool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: One-thread predictions (ms) above which the pool is taken without a trial: waking it costs
#: well under a millisecond per call wherever it was measured.
TRY_BELOW_MS = 2.0

#: Timed runs of each setting in a trial (after one warm-up run each).
TRIALS = 5
#: One thread is kept only where its fastest run beats the pool's by this factor: where the
#: pool's fixed cost matters (small work) one thread wins by 2x or more, so a near tie goes to
#: the pool, which scales with the work.
ONE_THREAD_MARGIN = 0.9


class PoolChoice:
    """One invoker's choice of threads, kept per pool size (a handle's ``threads`` setting
    may change the pool between calls). ``single_ms``: the work's predicted one-thread time."""

    def __init__(self, single_ms: float) -> None:
        self.single_ms = single_ms
        self.chosen: dict[int, int] = {}

    def run(self, handle: Any, work: Callable[[], None]) -> None:
        """Run ``work`` (one whole call) on the threads chosen for the pool, which is sized to
        the CPU backend's ``threads`` setting first (BLAS pools are the backend's job)."""
        import numba

        setting = getattr(getattr(handle, "backend", None), "threads", None)
        if setting:
            numba.set_num_threads(min(int(setting), numba.config.NUMBA_NUM_THREADS))
        pool = numba.get_num_threads()
        if pool <= 1 or self.single_ms > TRY_BELOW_MS:
            work()
            return
        threads = self.chosen.get(pool)
        if threads is None:  # the trial runs the work itself
            self.chosen[pool] = trial(work, pool)
            return
        if threads == pool:
            work()
            return
        numba.set_num_threads(threads)
        try:
            work()
        finally:
            numba.set_num_threads(pool)


class PooledInvoker:
    """An invoker whose every call runs its subclass's ``_run(params)`` on the threads
    :class:`PoolChoice` picks for the plan's predicted one-thread time."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan
        self.pool = PoolChoice(plan.predicted_ms(1))

    def __call__(self, handle: Any, params: Any) -> None:
        self.pool.run(handle, lambda: self._run(params))

    def _run(self, params: Any) -> None:
        raise NotImplementedError


def trial(work: Callable[[], None], pool: int) -> int:
    """The thread count for ``work``: 1 where its fastest timed run beats the fastest on
    ``pool`` threads by :data:`ONE_THREAD_MARGIN`, else ``pool``; the settings alternate, and
    numba's setting is restored to ``pool`` after every run."""
    import time

    import numba

    best = {pool: float("inf"), 1: float("inf")}
    for run in range(TRIALS + 1):
        for threads in (pool, 1):
            numba.set_num_threads(threads)
            try:
                start = time.perf_counter()
                work()
                elapsed = time.perf_counter() - start
            finally:
                numba.set_num_threads(pool)
            if run:  # the first run of each setting warms it up
                best[threads] = min(best[threads], elapsed)
    return 1 if best[1] < ONE_THREAD_MARGIN * best[pool] else pool
