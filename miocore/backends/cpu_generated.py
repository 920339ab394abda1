"""Generated numba kernels, compiled once per machine.

CPU solvers whose kernels are generated as Python source per geometry (the direct plugin's
depthwise and grouped kernels, the Winograd plugin's transforms) write each source once to a
file in the miocore cache folder (``<kernel cache>_numba``, see :func:`generated_folder`) and
import it from there, so numba's ``cache=True`` keeps the compiled code on disk: a process pays
numba's compile once per machine. Where that folder cannot be written, the source is compiled
in memory instead. Nothing here imports numba: the generated text does.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "WAIT_POLICY_ENV",
    "choose_wait_policy",
    "generated_folder",
    "generated_ready",
    "load_generated",
    "module_name",
]

WAIT_POLICY_ENV = "OMP_WAIT_POLICY"


def choose_wait_policy() -> None:
    """Choose how OpenMP threads wait when idle, unless ``OMP_WAIT_POLICY`` is set: OpenMP's
    default (spin for a while, then sleep) where the CPU solvers' GEMMs run on OpenMP teams too
    (:mod:`miocore.backends.cpu_gemm_openmp`), the passive policy (sleep at once) elsewhere.

    numba runs ``prange`` loops on GNU OpenMP. Where a call's GEMMs run on another pool
    (OpenBLAS's), an OpenMP thread spinning after a kernel holds a core that pool's thread
    needs, and the other way round: on a machine whose cores are all in use, calls right after a
    kernel's first run took a fixed 8 ms per parallel region for tens of calls (a 0.03 ms
    depthwise layer measured 24 ms), so find recorded the wrong winner; passive threads sleep
    at once and cost a wake-up (40-50 µs) per region instead. Where every parallel piece of a
    call runs on the one OpenMP pool, a spinning thread is the next region's, not a rival's:
    miocore alone on two threads, find then 50 calls of the winner of 63 grouped, depthwise and
    ResNet-50 problems per run, per call 1.15-1.46x faster than passive, no find/run mismatch
    in 504 (development VM, 2026-11-27). OpenMP reads the setting when it loads, so every plugin
    with generated kernels calls this before its first kernel runs; a policy the caller chose
    (even ``active``) is kept.
    """
    if WAIT_POLICY_ENV in os.environ:
        return
    from miocore.backends.cpu_gemm import gemms_on_openmp

    if not gemms_on_openmp():
        os.environ[WAIT_POLICY_ENV] = "PASSIVE"


def generated_folder() -> Path:
    """Where generated modules (and numba's cache of them) live: next to miocore's kernel
    cache (``$MIOCORE_KERNEL_CACHE_PATH`` or the per-user cache folder's ``kernels``)."""
    from miocore.db.kernel_cache import default_cache_dir

    kernels = default_cache_dir()
    return kernels.with_name(kernels.name + "_numba")


def module_name(prefix: str, text: str) -> str:
    """The generated module's name: the prefix and a digest of its source."""
    return f"{prefix}_{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def generated_ready(prefix: str, text: str) -> bool:
    """Whether :func:`load_generated` of this source runs without a compile: the module is
    loaded in this process, or numba's disk cache holds an index for it (next to the module,
    or under ``NUMBA_CACHE_DIR``). Looks at file names only; imports no numba."""
    name = module_name(prefix, text)
    if name in sys.modules:
        return True
    pattern = f"{name}.*.nbi"
    try:
        if any((generated_folder() / "__pycache__").glob(pattern)):
            return True
        cache_dir = os.environ.get("NUMBA_CACHE_DIR")
        return bool(cache_dir) and any(Path(cache_dir).glob(f"*/{pattern}"))
    except OSError:
        return False


def load_generated(prefix: str, text: str, entry: str = "kernel") -> Any:
    """Compile generated kernel source ``text`` and return its function ``entry``: from a file
    named ``<prefix>_<hash>.py`` in :func:`generated_folder` with numba's disk cache, or in memory,
    uncached, when that folder cannot be written."""
    name = module_name(prefix, text)
    try:
        folder = generated_folder()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.py"
        if not path.exists() or path.read_text() != text:
            tmp = folder / f".{name}.{os.getpid()}.tmp"
            tmp.write_text(text)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        # registered before numba sees it: a cached kernel's environment is rebuilt by
        # importing its module by name (an unregistered one is saved as '<dynamic>')
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return getattr(module, entry)
    except OSError:  # read-only or missing cache folder: compile in memory, uncached
        namespace: dict[str, Any] = {}
        code = text.replace("cache=True", "cache=False")  # numba caches file-backed code only
        exec(compile(code, f"<{name}>", "exec"), namespace)  # the source generated above
        return namespace[entry]
