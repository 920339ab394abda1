"""Helpers of the Triton plugin's tests: a GPU-like context for the solvers' planning on the
CPU, and the kernel sources loaded in Triton's interpreter."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import miocore
from miocore.testing import cpu_context

KERNEL_DIR = Path(__file__).resolve().parents[1] / "src/miocore_triton/kernels"


def gpu_ctx(
    mode: str = "exact", sms: int = 132, arch: str = "sm90", backend: str = "cuda"
) -> miocore.ExecutionContext:
    """A context that plans for an H100-class device (nothing runs on it)."""
    device = dataclasses.replace(
        cpu_context().device, backend=backend, compute_units=sms, arch=arch
    )
    return miocore.ExecutionContext(device=device, math_mode=mode)


_INTERPRETED: dict[str, ModuleType] = {}


def interpreted_kernels(source: str = "conv_igemm.py") -> ModuleType:
    """A kernel source of the plugin with its kernels interpreted: they run on the CPU with
    torch tensors.

    Triton reads ``TRITON_INTERPRET`` when it is imported (its own library functions are
    decorated then), so these tests need it set for the whole process, as tox's ``triton``
    environment does; elsewhere they skip, saying so."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton's interpreter needs TRITON_INTERPRET=1 for the whole process")
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    found = _INTERPRETED.get(source)
    if found is not None:
        return found
    _index_scalars_of_one_element()
    _bfloat16_dot_operands_as_floats()
    name = "miocore_triton_test_interpreted_" + source.removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, KERNEL_DIR / source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _INTERPRETED[source] = module
    return module


def _index_scalars_of_one_element() -> None:
    """Triton 3.6's interpreter holds scalars as 1-element arrays and turns them into loop
    bounds with ``int(array)``, which numpy 2.4 refuses; index the element instead."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "miocore_patched", False):
        return

    def patched(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched.miocore_patched = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched


def _bfloat16_dot_operands_as_floats() -> None:
    """Triton's interpreter holds bfloat16 as uint16 and its ``tl.dot`` multiplies those bit
    patterns (every bf16 result ~1e10 off; triton-lang/triton#11584, unsupported upstream):
    widen bf16 operands to float32 first (exact: a bf16 is a float32's upper half), so that
    the bf16 kernels are checked here as the fp16 ones are."""
    from triton import language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.create_dot
    if getattr(original, "miocore_patched", False):
        return

    def widened(handle: Any) -> Any:
        if handle.dtype.scalar != tl.bfloat16:
            return handle
        data = (handle.data.astype(np.uint32) << 16).view(np.float32)
        return interpreter.TensorHandle(data, tl.float32)

    def patched(self: Any, a: Any, b: Any, d: Any, *args: Any) -> Any:
        return original(self, widened(a), widened(b), d, *args)

    patched.miocore_patched = True  # type: ignore[attr-defined]
    builder.create_dot = patched


def to_buffer(desc: Any, values: np.ndarray) -> Any:
    """A flat torch buffer holding ``values`` (logical order) at ``desc``'s strides."""
    import torch

    size = sum((n - 1) * s for n, s in zip(desc.lengths, desc.strides, strict=True)) + 1
    flat = np.full(size, np.nan, dtype=desc.dtype.numpy)
    view = np.lib.stride_tricks.as_strided(
        flat, desc.lengths, [s * flat.itemsize for s in desc.strides]
    )
    view[...] = values
    if desc.dtype is miocore.DataType.BFLOAT16:  # numpy's bfloat16 is ml_dtypes', not torch's
        return torch.from_numpy(flat.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(flat)


def from_buffer(desc: Any, buffer: Any) -> np.ndarray:
    """The logical array ``desc`` describes inside a flat torch buffer, as float64."""
    import torch

    flat = buffer.to(torch.float64).numpy()
    view = np.lib.stride_tricks.as_strided(
        flat, desc.lengths, [s * flat.itemsize for s in desc.strides]
    )
    return np.array(view)
