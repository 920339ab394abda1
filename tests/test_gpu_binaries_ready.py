"""``GpuBackend.binaries_ready``: what find's DYNAMIC_HYBRID mode asks before it measures a
solver that is not dynamic. Runs on the CPU with a driver that pretends to compile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from miocore import KernelInfo
from miocore.backends._gpu.base import GpuBackend
from miocore.backends._gpu.compiler import CORE_NAMESPACE
from miocore.backends.cpu import cpu_device_info


class PretendDriver:
    """Compiles by copying the source; counts the compiles."""

    name = "cuda"
    index = 0

    def __init__(self) -> None:
        self.compiles = 0

    def device_info(self) -> Any:
        return cpu_device_info()

    def make_stream(self, handle: int) -> Any:
        return handle

    def target(self) -> str:
        return "sm_90"

    def compiler_version(self) -> str:
        return "pretend 1.0"

    def compile_source(
        self, source: bytes, name: str, options: Any, include_dirs: Any
    ) -> tuple[bytes, str]:
        self.compiles += 1
        return b"binary:" + source[:16], "cubin"

    def load(self, binary: bytes) -> Any:
        return object()

    def function(self, module: Any, name: str) -> Any:
        return (module, name)


def _kernel(option: str) -> KernelInfo:
    return KernelInfo(
        source=f"{CORE_NAMESPACE}/miocore_utility.cu",
        kernel_name="miocore_fill",
        options=(option,),
        grid=(1, 1, 1),
        block=(64, 1, 1),
    )


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MIOCORE_KERNEL_CACHE_PATH", str(tmp_path / "kernels"))
    return tmp_path / "kernels"


def _backend() -> GpuBackend:
    backend = GpuBackend(PretendDriver())
    backend.bind_registry(lambda: None)
    return backend


def test_kernels_are_ready_once_built_in_this_process_or_in_the_disk_cache(
    cache_dir: Path,
) -> None:
    backend = _backend()
    one, other = _kernel("-DMIO_A=1"), _kernel("-DMIO_A=2")
    assert not backend.binaries_ready([one])
    backend.compile([one])
    assert backend.binaries_ready([one])
    assert not backend.binaries_ready([one, other])  # every kernel must be built
    # Another process (a new backend) finds the binary on disk: ready without a compile.
    fresh = _backend()
    assert fresh.binaries_ready([one]) and fresh.driver.compiles == 0


def test_without_a_disk_cache_only_this_process_counts(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIOCORE_DISABLE_CACHE", "1")
    backend = _backend()
    kernel = _kernel("-DMIO_A=3")
    backend.compile([kernel])
    assert backend.binaries_ready([kernel])
    assert not _backend().binaries_ready([kernel])


def test_a_binary_seen_on_disk_is_not_looked_up_again(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every find asks, for each candidate's kernels: once a key is seen in the disk cache the
    answer is remembered, and the key itself is hashed once per kernel."""
    from miocore.db.kernel_cache import KernelCache

    kernel = _kernel("-DMIO_A=4")
    _backend().compile([kernel])  # another process built it
    backend = _backend()
    looked: list[str] = []
    contains = KernelCache.contains

    def counting(self: KernelCache, parts: Any) -> bool:
        looked.append(parts.key)
        return contains(self, parts)

    monkeypatch.setattr(KernelCache, "contains", counting)
    assert all(backend.binaries_ready([kernel]) for _ in range(5))
    assert len(looked) == 1
    parts = backend._parts(kernel)[0]
    assert parts.key is parts.key  # hashed once, kept with the parts
    assert backend.driver.compiles == 0
