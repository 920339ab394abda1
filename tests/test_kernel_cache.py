"""The on-disk kernel binary cache: keys, integrity, bound, switch (no GPU needed)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from miocore.db.kernel_cache import (
    CacheKeyParts,
    KernelCache,
    cache_disabled,
    collect_headers,
    default_cache_dir,
)
from miocore.errors import InvalidEnvironmentError

PARTS = CacheKeyParts(
    backend="cuda",
    source_name="direct/naive_conv.cu",
    source=b'extern "C" __global__ void k() {}',
    headers=(("kernels/miocore_gpu.h", b"#pragma once"),),
    options=("-DMIO_DTYPE_FP32",),
    arch="sm_90",
    compiler="nvrtc 13.0",
)


@pytest.mark.parametrize(
    "change",
    [
        {"source": b'extern "C" __global__ void k() { }'},
        {"headers": (("kernels/miocore_gpu.h", b"#pragma once\n"),)},
        {"options": ("-DMIO_DTYPE_FP16",)},
        {"options": ("-DMIO_DTYPE_FP32", "-DX=1")},
        {"arch": "sm_80"},
        {"compiler": "nvrtc 13.1"},
        {"backend": "hip"},
        {"source_name": "other.cu"},
    ],
)
def test_every_input_changes_the_key(change: dict) -> None:
    assert dataclasses.replace(PARTS, **change).key != PARTS.key


def test_key_is_stable_and_ignores_header_order() -> None:
    two = (("a/x.h", b"1"), ("a/y.h", b"2"))
    a = dataclasses.replace(PARTS, headers=two)
    b = dataclasses.replace(PARTS, headers=tuple(reversed(two)))
    assert a.key == b.key == dataclasses.replace(PARTS, headers=two).key
    assert len(PARTS.key) == 64


def test_round_trip_and_manifest(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    assert cache.get(PARTS) is None and not cache.contains(PARTS)
    cache.put(PARTS, b"\x7fELF binary", kind="cubin")
    assert cache.contains(PARTS) and not cache.contains(dataclasses.replace(PARTS, arch="sm_80"))
    assert cache.get(PARTS) == b"\x7fELF binary"
    manifest = json.loads((tmp_path / f"{PARTS.key}.json").read_text())
    assert manifest["kind"] == "cubin" and manifest["arch"] == "sm_90"
    assert manifest["size"] == len(b"\x7fELF binary")
    assert cache.hits == 1 and cache.misses == 1
    # A second cache object (another process) sees the entry.
    assert KernelCache(tmp_path).get(PARTS) == b"\x7fELF binary"


@pytest.mark.parametrize("damage", ["flip", "truncate", "manifest", "foreign"])
def test_damaged_entries_are_rejected_and_removed(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = KernelCache(tmp_path)
    cache.put(PARTS, b"0123456789", kind="cubin")
    binary = tmp_path / f"{PARTS.key}.bin"
    manifest = tmp_path / f"{PARTS.key}.json"
    if damage == "flip":
        binary.write_bytes(b"0123456780")
    elif damage == "truncate":
        binary.write_bytes(b"01234")
    elif damage == "manifest":
        manifest.write_text("{not json")
    else:
        data = json.loads(manifest.read_text())
        data["format"] = 999
        manifest.write_text(json.dumps(data))
    assert cache.get(PARTS) is None
    assert cache.rejected == 1
    assert not binary.exists() and not manifest.exists()
    assert "set aside" in caplog.text
    cache.put(PARTS, b"0123456789", kind="cubin")  # recompiled and stored again
    assert cache.get(PARTS) == b"0123456789"


def test_size_bound_evicts_least_recently_used(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path, max_bytes=3000)
    parts = [dataclasses.replace(PARTS, options=(f"-DN={i}",)) for i in range(5)]
    for i, p in enumerate(parts):
        cache.put(p, bytes(700), kind="cubin")
        # Make the order of use unambiguous on file systems with coarse timestamps.
        import os

        os.utime(tmp_path / f"{p.key}.json", (1000 + i, 1000 + i))
    assert cache.size_bytes() <= 3000
    assert cache.get(parts[0]) is None  # the oldest went first
    assert cache.get(parts[-1]) == bytes(700)


def test_switches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert not cache_disabled()
    for value in ("1", "true", "ON"):
        monkeypatch.setenv("MIOCORE_DISABLE_CACHE", value)
        assert cache_disabled()
    monkeypatch.setenv("MIOCORE_DISABLE_CACHE", "maybe")
    with pytest.raises(InvalidEnvironmentError) as info:
        cache_disabled()
    assert info.value.field == "MIOCORE_DISABLE_CACHE"
    monkeypatch.setenv("MIOCORE_KERNEL_CACHE_PATH", str(tmp_path / "k"))
    assert default_cache_dir() == tmp_path / "k"
    monkeypatch.setenv("MIOCORE_KERNEL_CACHE_MAX_MB", "0")
    with pytest.raises(InvalidEnvironmentError):
        KernelCache(tmp_path)


def test_headers_of_the_core_folder_are_collected() -> None:
    from miocore.backends._gpu.compiler import core_kernel_dir

    headers = dict(collect_headers([core_kernel_dir()]))
    assert any(name.endswith("/miocore_gpu.h") for name in headers)


def test_kernel_args_pack_pointers_scalars_and_structs() -> None:
    import numpy as np

    from miocore.backends.gpu_kernels import KernelArgs

    args = KernelArgs([("ptr", 5), ("i32", -3), ("f32", 1.5), ("bytes", bytes(range(12)))])
    table = np.frombuffer(
        (np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint64 * 4).from_address(args.address))),
        dtype=np.uint64,
    )
    assert table[1] - table[0] == 8 and table[3] - table[2] == 8
    args.set_pointers(0xDEAD)
    first = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint64 * 1).from_address(int(table[0])))
    assert int(first[0]) == 0xDEAD
    raw = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * 12).from_address(int(table[3])))
    assert bytes(raw) == bytes(range(12))
