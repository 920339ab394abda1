"""A plugin folder with its own compiler (``KernelSourceRecord.builder``), on the CPU with a
pretend driver: the builder is imported from its ``module:attribute`` name on the first
compile, its image and launch facts go through the binary cache as one binary (a new process
loads them without building), its version keys the cache, and a failing build is a
CompileError naming the source, remembered and not retried."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from test_gpu_binaries_ready import PretendDriver

import miocore
from miocore import BuiltKernel, CompileError, KernelInfo
from miocore.backends._gpu.base import GpuBackend


class LoadingDriver(PretendDriver):
    """Remembers what it was asked to load."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[bytes] = []

    def load(self, binary: bytes) -> Any:
        self.loaded.append(binary)
        return object()


class CountingBuilder:
    """Builds ``image:<source>:<options>``; fails on an option ``fail``."""

    def __init__(self, version: str = "pretend-lang 1") -> None:
        self._version = version
        self.builds: list[tuple[str, tuple[str, ...], str, str]] = []

    def version(self) -> str:
        return self._version

    def build(
        self, source: Path, kernel_name: str, options: tuple[str, ...], backend: str, target: str
    ) -> BuiltKernel:
        self.builds.append((kernel_name, options, backend, target))
        if "fail" in options:
            raise ValueError("the pretend language refuses 'fail'")
        image = b"image:" + source.read_bytes() + b":" + ",".join(options).encode()
        return BuiltKernel(image=image, meta={"shared": 4096, "threads": 128})


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MIOCORE_KERNEL_CACHE_PATH", str(tmp_path / "kernels"))
    return tmp_path / "kernels"


def _backend(folder: Path, builder: Any) -> GpuBackend:
    record = miocore.KernelSourceRecord(name="lang", path=folder, builder=builder)

    class Info:
        label = "pretend-lang 1.0"

    class Registry:
        kernel_sources = ((Info(), record),)

    backend = GpuBackend(LoadingDriver())
    backend.bind_registry(lambda: Registry())
    return backend


def _info(*options: str) -> KernelInfo:
    return KernelInfo(source="lang/k.py", kernel_name="k", options=options, grid=(1,), block=(1,))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "src"
    path.mkdir()
    (path / "k.py").write_text("kernel source\n")
    return path


def test_a_builders_image_and_launch_facts_travel_through_the_cache(
    cache_dir: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builder = CountingBuilder()
    module = types.ModuleType("pretend_lang_builder")
    module.BUILDER = builder  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pretend_lang_builder", module)
    backend = _backend(folder, "pretend_lang_builder:BUILDER")
    info = _info("A=1")
    assert not backend.binaries_ready([info])
    (kernel,) = backend.compile([info])
    assert kernel.meta == {"shared": 4096, "threads": 128}
    assert backend.driver.loaded == [b"image:kernel source\n:A=1"]  # the image, not the wrapper
    assert builder.builds == [("k", ("A=1",), "cuda", "sm_90")]
    assert backend.binaries_ready([info])
    # A new process (a new backend) loads the cached binary without building.
    again = _backend(folder, "pretend_lang_builder:BUILDER")
    (kernel2,) = again.compile([info])
    assert kernel2.meta == kernel.meta and len(builder.builds) == 1
    assert again.stats["disk_hits"] == 1


def test_the_builders_version_and_the_source_key_the_cache(cache_dir: Path, folder: Path) -> None:
    first = CountingBuilder("pretend-lang 1")
    _backend(folder, first).compile([_info("A=1")])
    second = CountingBuilder("pretend-lang 2")
    backend = _backend(folder, second)
    assert not backend.binaries_ready([_info("A=1")])
    backend.compile([_info("A=1")])
    assert len(second.builds) == 1


def test_a_failed_build_names_the_source_and_is_not_retried(cache_dir: Path, folder: Path) -> None:
    builder = CountingBuilder()
    backend = _backend(folder, builder)
    for _ in range(2):
        with pytest.raises(CompileError, match="refuses 'fail'") as info:
            backend.compile([_info("fail")])
        assert info.value.field == "KernelInfo.source" and info.value.value == "lang/k.py"
    assert len(builder.builds) == 1
    assert backend.precompile([_info("fail")])  # reported, not raised


def test_an_unimportable_builder_is_a_compile_error(cache_dir: Path, folder: Path) -> None:
    backend = _backend(folder, "no_such_module_anywhere:BUILDER")
    with pytest.raises(CompileError, match="cannot be imported") as info:
        backend.compile([_info("A=1")])
    assert info.value.field == "KernelSourceRecord.builder"


def test_a_corrupt_cached_header_is_an_error_not_code(folder: Path) -> None:
    from miocore.backends._gpu.compiler import pack_built, unpack_built

    packed = pack_built(BuiltKernel(image=b"\x7fELF...", meta={"shared": 1}))
    assert unpack_built(packed) == (b"\x7fELF...", {"shared": 1})
    broken = packed.replace(b'{"shared":1}', b"[1,2]")
    with pytest.raises(CompileError):
        unpack_built(broken)


def test_each_kernel_of_a_builders_source_is_its_own_binary(cache_dir: Path, folder: Path) -> None:
    # A builder compiles one kernel per binary: two kernels with the same options must not
    # share a cache entry (a driver's module holds every kernel of the source; a builder's not).
    builder = CountingBuilder()
    backend = _backend(folder, builder)
    first = KernelInfo(source="lang/k.py", kernel_name="fwd", options=("A=1",))
    second = KernelInfo(source="lang/k.py", kernel_name="bwd", options=("A=1",))
    assert backend.precompile([first, second]) == {}
    assert sorted(b[0] for b in builder.builds) == ["bwd", "fwd"]
    backend.compile([first, second])
    assert len(set(backend.driver.loaded)) == 1  # the pretend images differ by options only
    assert len(backend._binaries) == 2
