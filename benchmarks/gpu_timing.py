"""GPU timing shared by the network benchmarks: both sides are measured by the same loop.

- :func:`device_ms`: what a caller waits for one call (CUDA events around it, nothing held):
  host time counts where the host is late.
- :func:`queued_device_ms`: the device time of a call alone: the calls are queued behind a
  sleep on the GPU before the first runs, so host time does not count.
- :func:`host_ms`: the host time of a call: the GPU is held busy by a long sleep, so no call
  waits for the device (keep ``calls`` launches under the driver's queue depth, ~1000).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

#: ~200 ms at H100/H200 clocks: longer than any timed host loop.
LONG_SLEEP_CYCLES = 400_000_000
#: ~1 ms: longer than queueing a few calls.
SHORT_SLEEP_CYCLES = 2_000_000


def device_ms(fn: Any, warmup: int = 3, iters: int = 10) -> float:
    """Median over ``iters`` of one call's time between events (after ``warmup`` calls)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def queued_device_ms(
    fn: Any, repeat: int = 5, rounds: int = 5, sleep_cycles: int = SHORT_SLEEP_CYCLES
) -> float:
    """Median over ``rounds`` of the per-call device time of ``repeat`` calls queued behind a
    sleep of ``sleep_cycles`` (one call first, to build whatever it builds). The sleep must
    outlast queueing the ``repeat`` calls, or host time counts."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(sleep_cycles)
        start.record()
        for _ in range(repeat):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / repeat)
    return statistics.median(times)


def host_ms(fn: Any, calls: int, repeats: int = 5) -> float:
    """Median over ``repeats`` of the host time per call of ``calls`` calls, the GPU busy."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(repeats):
        torch.cuda._sleep(LONG_SLEEP_CYCLES)
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - start) / calls)
        torch.cuda.synchronize()
    return statistics.median(per_call) * 1e3


def inference(model: Any, x: torch.Tensor) -> Any:
    """One inference of ``model`` on ``x`` without gradients, as a callable."""

    def fn() -> None:
        with torch.no_grad():
            model(x)

    return fn


def training_step(model: Any, x: torch.Tensor) -> Any:
    """One forward and backward of ``model`` on ``x`` (no optimizer), as a callable."""

    def fn() -> None:
        model.zero_grad(set_to_none=True)
        model(x).float().sum().backward()

    return fn
