"""CPU thread control: CpuBackend(threads=...) and MIOCORE_CPU_THREADS cap every loaded pool."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from miocore import InvalidArgumentError
from miocore.backends.cpu import CpuBackend
from miocore.errors import InvalidEnvironmentError


@pytest.fixture(autouse=True)
def restore_pools() -> Iterator[None]:
    """Give every pool its original size back after each test."""
    original = {lib["prefix"]: lib["num_threads"] for lib in threadpool_info()}
    yield
    threadpool_limits(limits=original)


def _blas_threads() -> set[int]:
    np.ones((4, 4)) @ np.ones((4, 4))  # make sure numpy's BLAS is loaded
    return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


def test_threads_argument_caps_every_blas_pool() -> None:
    backend = CpuBackend(threads=1)
    assert backend.threads == 1
    assert _blas_threads() == {1}


def test_environment_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOCORE_CPU_THREADS", "1")
    assert CpuBackend().threads == 1
    assert _blas_threads() == {1}
    monkeypatch.delenv("MIOCORE_CPU_THREADS")
    assert CpuBackend().threads is None


def test_argument_wins_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOCORE_CPU_THREADS", "3")
    assert CpuBackend(threads=1).threads == 1


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True])
def test_bad_thread_counts_name_the_field(bad: object) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        CpuBackend(threads=bad)  # type: ignore[arg-type]
    assert caught.value.field == "threads" and caught.value.value == bad


@pytest.mark.parametrize("raw", ["0", "two", "-1"])
def test_bad_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("MIOCORE_CPU_THREADS", raw)
    with pytest.raises(InvalidEnvironmentError, match="MIOCORE_CPU_THREADS"):
        CpuBackend()


def test_timing_reapplies_the_cap_after_new_imports() -> None:
    """A pool reset behind the backend's back (as a newly loaded library would bring) is capped
    again by the next timed call."""
    backend = CpuBackend(threads=1)
    threadpool_limits(limits=2)
    backend._modules_seen = -1  # as if modules were imported since the last application
    backend.time_ms(lambda: None)
    assert _blas_threads() == {1}


def test_handle_passes_threads_to_the_cpu_backend() -> None:
    import miocore

    handle = miocore.Handle("cpu", threads=1)
    assert handle.backend.threads == 1
    assert _blas_threads() == {1}
    with pytest.raises(InvalidArgumentError) as caught:
        miocore.Handle("cpu", threads=0)
    assert caught.value.field == "threads"
