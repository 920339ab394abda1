"""What a GPU find spends per candidate, on the CPU with pretend drivers: the timed run's spin
lead follows the host's enqueue time, and a kernel's cache key is read and hashed once while
its files stay as they were."""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any

import pytest
from test_gpu_binaries_ready import PretendDriver

from miocore import KernelInfo
from miocore.backends._gpu import base
from miocore.backends._gpu.base import GpuBackend


class TimingDriver(PretendDriver):
    """Records each launch's first 64-bit argument (the spin kernel's cycles)."""

    def __init__(self) -> None:
        super().__init__()
        self.spins: list[int] = []

    def event(self) -> object:
        return object()

    def record(self, event: Any, stream: Any) -> None:
        pass

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return 0.5

    def launch(
        self, function: Any, grid: Any, block: Any, shared: int, stream: Any, address: int
    ) -> None:
        slot = ctypes.cast(address, ctypes.POINTER(ctypes.c_void_p))[0]
        self.spins.append(ctypes.c_int64.from_address(slot).value)


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MIOCORE_KERNEL_CACHE_PATH", str(tmp_path / "kernels"))
    return tmp_path / "kernels"


def _cycles(ms: float) -> int:
    return int(ms * base.SPIN_CYCLES_PER_MS)


def test_the_spin_lead_follows_the_host_within_its_bounds(cache_dir: Path) -> None:
    backend = GpuBackend(TimingDriver())
    backend.bind_registry(lambda: None)
    driver = backend.driver

    def slow() -> None:
        time.sleep(0.002)

    assert backend.time_ms(lambda: None) == 0.5
    # A quick host brings the next lead down towards its floor; a slow one (or an invoker
    # that waits for the device) raises it no further than the first lead.
    backend.time_ms(slow)
    backend.time_ms(lambda: None)
    backend.time_ms(lambda: None)
    first, quick, after_slow, quick_again = driver.spins
    assert first == after_slow == _cycles(base.MAX_LEAD_MS)
    assert _cycles(base.MIN_LEAD_MS) <= quick < first / 2
    assert _cycles(base.MIN_LEAD_MS) <= quick_again < first / 2


def _plugin_backend(folder: Path) -> tuple[GpuBackend, KernelInfo]:
    class Record:
        name = "pretend"
        path = str(folder)

    class Info:
        label = "pretend 1.0"

    class Registry:
        kernel_sources = ((Info(), Record()),)

    backend = GpuBackend(PretendDriver())
    backend.bind_registry(lambda: Registry())
    info = KernelInfo(source="pretend/k.cu", kernel_name="k", grid=(1,), block=(1,))
    return backend, info


def _touch_later(path: Path) -> None:
    later = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(later, later))


def test_a_kernels_key_is_read_once_until_its_files_change(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    source = folder / "k.cu"
    source.write_text("// one\n")
    backend, info = _plugin_backend(folder)
    reads: list[str] = []
    read_parts = GpuBackend._read_parts

    def counting(self: GpuBackend, kernel: KernelInfo) -> Any:
        reads.append(kernel.source)
        return read_parts(self, kernel)

    monkeypatch.setattr(GpuBackend, "_read_parts", counting)
    first = backend._parts(info)[0].key
    backend.compile([info])
    assert backend.binaries_ready([info])
    assert len(reads) == 1 and backend.driver.compiles == 1
    # The source changes: a new key and a new compile.
    source.write_text("// two\n")
    _touch_later(source)
    second = backend._parts(info)[0].key
    assert second != first and len(reads) == 2
    assert not backend.binaries_ready([info])
    backend.compile([info])
    assert backend.driver.compiles == 2
    # A header added next to it joins the key (the folder's time changes).
    (folder / "extra.h").write_text("#define X 1\n")
    _touch_later(folder)
    assert backend._parts(info)[0].key not in (first, second)
    assert len(reads) == 3


class _ScriptedBackend:
    """A backend whose timed runs take the given times, in order."""

    def __init__(self, times: list[float]) -> None:
        self.times = list(times)
        self.calls = 0

    def time_ms(self, run: Any) -> float:
        run()
        self.calls += 1
        return self.times.pop(0)


def _time(times: list[float], best_ms: float) -> tuple[Any, str, int]:
    """``FindEngine._time`` (``miocore.find.timing``'s rules) of one candidate whose runs
    take ``times`` (warm-up first)."""
    from types import SimpleNamespace

    from miocore import ConvProblem
    from miocore.find.engine import FindEngine

    backend = _ScriptedBackend(times)
    engine = SimpleNamespace(state=SimpleNamespace(backend=backend), runner=SimpleNamespace())
    engine.runner.owner = None
    entry = SimpleNamespace(invoker=lambda owner, params: None, solver="pretend")
    canon = ConvProblem.from_sizes(
        "forward", n=1, c=4, k=4, in_spatial=(4, 4), filter_spatial=(1, 1)
    )
    arrays = {"x": None, "w": None, "y": None}
    timing, note = FindEngine._time(engine, canon, entry, arrays, None, best_ms)  # type: ignore[arg-type]
    return timing, note, backend.calls


def test_a_candidate_that_cannot_win_stops_after_the_minimum_runs() -> None:
    from miocore.find import timing as rules

    # Every run 1.5x the best so far: three timed runs (after the warm-up), said in the note.
    timing, note, calls = _time([1.5] * 20, best_ms=1.0)
    assert calls == 1 + 3 and timing.median_ms == 1.5
    assert "stopped after 3 timed runs" in note and f"{rules.RACE_FACTOR:g}x" in note
    # One fast run among them keeps it in the race: it runs on until steady or the cap.
    timing, note, calls = _time([1.5, 1.5, 1.0, 1.5] + [1.0] * 16, best_ms=1.0)
    assert note == "" and calls > 1 + 3
    # Within the factor of the best: measured as before (steady after STEADY_RUNS).
    timing, note, calls = _time([1.1] * 20, best_ms=1.0)
    assert note == "" and calls == 1 + rules.STEADY_RUNS
    # A warm-up over 10x the best: one more run decides; slow again, it stops there.
    timing, note, calls = _time([50.0] + [20.0] * 20, best_ms=1.0)
    assert calls == 2 and timing.count == 1 and "over 10x" in note
    # A warm-up that only loaded the kernel (the next run is fast) is measured in full, that
    # run included: a cached numba kernel's first call costs milliseconds.
    timing, note, calls = _time([50.0, 0.9] + [0.5] * 20, best_ms=1.0)
    assert note == "" and calls > 3 and timing.median_ms == 0.5 and timing.max_ms == 0.9
    # The first candidate (no best yet) is never stopped early.
    timing, note, calls = _time([1.5] * 20, best_ms=float("inf"))
    assert note == "" and calls == 1 + rules.STEADY_RUNS
