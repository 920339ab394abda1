"""A small call runs on one thread where that is faster (miocore_direct.pool_choice): the trial
picks the faster setting, restores numba's, runs later calls on the choice, and a call's result
is the same bit for bit on any number of threads (what makes the choice safe)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from miocore_direct import pool_choice
from miocore_direct.pool_choice import PoolChoice

import miocore
from miocore import reference

numba = pytest.importorskip("numba")

needs_two = pytest.mark.skipif(
    numba.config.NUMBA_NUM_THREADS < 2, reason="numba has one thread on this machine"
)


def _work(slow_on: int, log: list[int]) -> object:
    """A call that takes 2 ms on ``slow_on`` threads and nothing on the others."""

    def work() -> None:
        threads = numba.get_num_threads()
        log.append(threads)
        if threads == slow_on:
            time.sleep(0.002)

    return work


@needs_two
@pytest.mark.parametrize("slow_on, expected", [(2, 1), (1, 2)])
def test_the_trial_keeps_the_faster_setting_and_restores_numba(slow_on: int, expected: int) -> None:
    numba.set_num_threads(2)
    log: list[int] = []
    choice = PoolChoice(single_ms=0.01)
    choice.run(None, _work(slow_on, log))  # the trial: warm-up and TRIALS timed runs of each
    assert log == [2, 1] * (pool_choice.TRIALS + 1)
    assert choice.chosen == {2: expected}
    assert numba.get_num_threads() == 2
    log.clear()
    for _ in range(3):
        choice.run(None, _work(slow_on, log))
    assert log == [expected] * 3 and numba.get_num_threads() == 2


def _timed_work(ms_on: dict[int, list[float]]) -> object:
    """A call that sleeps the next of ``ms_on[threads]`` milliseconds (the last one repeats)."""
    calls = {threads: 0 for threads in ms_on}

    def work() -> None:
        threads = numba.get_num_threads()
        plan = ms_on[threads]
        time.sleep(plan[min(calls[threads], len(plan) - 1)] / 1e3)
        calls[threads] += 1

    return work


@needs_two
def test_runs_slowed_by_the_scheduler_do_not_move_the_work_to_one_thread() -> None:
    # The pool's warm-up and three of its five timed runs stalled (a parked thread); its
    # fastest runs still beat one thread by 2x, so the pool is kept (a median would not).
    numba.set_num_threads(2)
    choice = PoolChoice(single_ms=0.01)
    choice.run(None, _timed_work({2: [8.0, 8.0, 8.0, 8.0, 2.0], 1: [4.0]}))
    assert choice.chosen == {2: 2}


@needs_two
def test_a_near_tie_goes_to_the_pool() -> None:
    numba.set_num_threads(2)
    choice = PoolChoice(single_ms=0.01)
    choice.run(None, _timed_work({2: [4.0], 1: [3.8]}))
    assert choice.chosen == {2: 2}
    clear = PoolChoice(single_ms=0.01)
    clear.run(None, _timed_work({2: [4.0], 1: [1.0]}))
    assert clear.chosen == {2: 1}


@needs_two
def test_large_work_and_a_one_thread_pool_take_no_trial() -> None:
    log: list[int] = []
    numba.set_num_threads(2)
    PoolChoice(single_ms=pool_choice.TRY_BELOW_MS * 2).run(None, _work(2, log))
    assert log == [2]
    numba.set_num_threads(1)
    try:
        PoolChoice(single_ms=0.01).run(None, _work(1, log))
    finally:
        numba.set_num_threads(2)
    assert log == [2, 1]


def _problems() -> list[miocore.ConvProblem]:
    """Depthwise and grouped problems in every direction and both layouts, big enough that
    both kernels split their work over the pool."""
    out = []
    for direction in ("forward", "backward_data", "backward_weights"):
        for layout in ("NCHW", "NHWC"):
            for groups, c in ((16, 16), (4, 16)):
                out.append(
                    miocore.ConvProblem.from_sizes(
                        direction,
                        n=2,
                        c=c,
                        k=c,
                        in_spatial=(12, 11),
                        filter_spatial=(3, 3),
                        pads=(1, 1),
                        strides=(2, 1),
                        groups=groups,
                        layout=layout,
                    )
                )
    return out


@needs_two
@pytest.mark.parametrize("problem", _problems(), ids=lambda p: p.key)
def test_a_call_gives_the_same_bits_on_one_thread_and_on_two(
    problem: miocore.ConvProblem, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool_choice, "TRY_BELOW_MS", -1.0)  # no trial: the pool as set
    solver = "direct.depthwise" if problem.groups == problem.c else "direct.grouped"
    h = miocore.Handle("cpu")
    arrays = reference.random_inputs(problem, 3)
    out = problem.direction.output_tensor
    results = {}
    for threads in (2, 1):
        numba.set_num_threads(threads)
        try:
            arrays[out][...] = np.nan
            h.immediate(problem, solver, **arrays)
        finally:
            numba.set_num_threads(2)
        results[threads] = arrays[out].copy()
    np.testing.assert_array_equal(results[1], results[2])
    expected = reference.convolution(problem, **{k: v for k, v in arrays.items() if k != out})
    np.testing.assert_allclose(results[1], expected, rtol=2e-5, atol=2e-5 * abs(expected).max())
