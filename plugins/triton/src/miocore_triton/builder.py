"""Triton as a compiler only: a miocore :class:`~miocore.KernelBuilder` for this plugin's
kernel folder.

A ``KernelInfo`` of a Triton source names its ``@triton.jit`` function and passes everything
as ``NAME=VALUE`` options: the constexpr arguments by their names, ``sig.NAME=TYPE`` for each
run-time argument (``*fp16``, ``i32``, ...), and ``num_warps`` / ``num_stages``. The builder
imports the source file, compiles the function for the backend's target with
``triton.compile`` (no GPU needed), and returns the image (cubin or hsaco) with the launch
facts only the compiler knows: the dynamic shared memory, the threads per block and the
parameters of the binary (the run-time arguments in order, then Triton's two scratch
pointers). miocore caches both and launches the image through its own driver, so a call
costs a driver launch, not Triton's launcher.

Pointer arguments are compiled as 16-byte aligned (what lets Triton vectorize); the solvers
check that before every launch.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from miocore import BuiltKernel

#: Guards the imported kernel modules. Compiles themselves run in miocore's thread pool
#: unlocked: Triton releases the GIL in its C++ stages and compiles on threads itself (its
#: asynchronous compile mode); 8 threads built the same 12 cubins byte for byte as one thread,
#: in 4.9 s instead of 7.7 on a 2-vCPU machine (2026-11-26).
_LOCK = threading.Lock()
_MODULES: dict[tuple[str, bytes], ModuleType] = {}

#: What the binary's launch needs that the kernel cannot do without: refused, not launched
#: wrongly (clusters, programmatic dependent launch and cooperative grids need launch
#: attributes miocore's launch does not set).
_UNSUPPORTED = ("launch_cooperative_grid", "launch_pdl")


class TritonBuilder:
    """Compiles ``@triton.jit`` functions of this plugin's kernel folder (see the module)."""

    def version(self) -> str:
        """``triton X.Y.Z``: a new Triton invalidates the cached binaries."""
        import triton

        return f"triton {triton.__version__}"

    def build(
        self, source: Path, kernel_name: str, options: tuple[str, ...], backend: str, target: str
    ) -> BuiltKernel:
        """The cubin (``backend="cuda"``) or hsaco (``"hip"``) of ``kernel_name`` in ``source``."""
        compiled, runtime, warp = compile_kernel(source, kernel_name, options, backend, target)
        meta = compiled.metadata
        for flag in _UNSUPPORTED:
            if getattr(meta, flag, False):
                raise ValueError(f"the compiled kernel needs {flag}, which miocore does not set")
        if getattr(meta, "num_ctas", 1) != 1:
            raise ValueError(f"the compiled kernel needs clusters of {meta.num_ctas} CTAs")
        image = compiled.asm["cubin" if backend == "cuda" else "hsaco"]
        return BuiltKernel(
            image=bytes(image),
            meta={
                "name": meta.name,
                "shared": int(meta.shared),
                "threads": int(meta.num_warps) * warp,
                "params": runtime,
                "global_scratch_size": int(getattr(meta, "global_scratch_size", 0) or 0),
                "profile_scratch_size": int(getattr(meta, "profile_scratch_size", 0) or 0),
            },
        )


def compile_kernel(
    source: Path, kernel_name: str, options: tuple[str, ...], backend: str, target: str
) -> tuple[Any, list[str], int]:
    """Triton's compiled kernel (every stage's text in ``.asm``), the run-time argument types
    in order, and the lanes of a warp."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(_load(source), kernel_name, None)
    if fn is None or not hasattr(fn, "params"):
        raise ValueError(f"{source.name} has no @triton.jit function {kernel_name!r}")
    values = parse_options(options)
    compile_options = {
        "num_warps": int(values.pop("num_warps", 4)),
        "num_stages": int(values.pop("num_stages", 3)),
    }
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    runtime: list[str] = []
    for index, param in enumerate(fn.params):
        name = param.name
        if param.is_constexpr:
            if name not in values:
                raise ValueError(f"option {name}=... missing (a constexpr of {kernel_name})")
            signature[name] = "constexpr"
            constexprs[name] = values.pop(name)
            continue
        kind = values.pop(f"sig.{name}", None)
        if kind is None:
            raise ValueError(f"option sig.{name}=TYPE missing (an argument of {kernel_name})")
        signature[name] = str(kind)
        runtime.append(str(kind))
        if str(kind).startswith("*"):
            attrs[(index,)] = [["tt.divisibility", 16]]
    if values:
        raise ValueError(f"options {sorted(values)} name no argument of {kernel_name}")
    if backend == "cuda":
        gpu = GPUTarget("cuda", int(target.removeprefix("sm_").rstrip("a")), 32)
    elif backend == "hip":
        arch = target.split(":", 1)[0]
        gpu = GPUTarget("hip", arch, warp_size(arch))
    else:
        raise ValueError(f"Triton builds for cuda and hip, not {backend!r}")
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(src, target=gpu, options=compile_options)
    return compiled, runtime, gpu.warp_size


def warp_size(arch: str) -> int:
    """Lanes of a wavefront: 64 on GCN and CDNA (gfx9), 32 on RDNA (gfx10 and later)."""
    return 64 if arch.startswith("gfx9") else 32


def parse_options(options: tuple[str, ...]) -> dict[str, Any]:
    """``NAME=VALUE`` options as a dict: integers, ``True``/``False``, else strings."""
    out: dict[str, Any] = {}
    for option in options:
        name, sep, text = option.partition("=")
        if not sep or not name:
            raise ValueError(f"option {option!r} is not NAME=VALUE")
        value: Any = text
        if text in ("True", "False"):
            value = text == "True"
        elif text.lstrip("-").isdigit():
            value = int(text)
        out[name] = value
    return out


def _load(source: Path) -> ModuleType:
    """The kernel source as a module, imported once per content (a changed file reloads)."""
    content = source.read_bytes()
    key = (str(source), hashlib.sha256(content).digest())
    with _LOCK:
        found = _MODULES.get(key)
        if found is not None:
            return found
        name = f"miocore_triton._kernels_{source.stem}_{key[1][:6].hex()}"
        spec = importlib.util.spec_from_file_location(name, source)
        if spec is None or spec.loader is None:
            raise ValueError(f"cannot import {source}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # Triton's JIT looks its function's globals up by module
        spec.loader.exec_module(module)
        _MODULES[key] = module
        return module


#: The builder the plugin's kernel folder declares (``miocore_triton.builder:BUILDER``).
BUILDER = TritonBuilder()
