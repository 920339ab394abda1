"""Portability check: compile every GPU kernel source for AMD gfx90a with ``hipcc``.

For a sample of problems (corpus-derived when ``MIOCORE_CORPUS`` or ``shared/corpus`` is found,
else a built-in set covering every direction, dtype, layout and 2-D/3-D), every installed GPU
solver's ``get_solution`` gives the kernels it would compile; each distinct (source, options)
pair is compiled offline with ``HIP_PLATFORM=amd hipcc --offload-arch=gfx90a --genco`` plus the
core's utility kernels for every element type. Exit status 0 only when every compile
succeeded; where ``hipcc`` is absent the check says so and fails (it never passes empty).

    HIP_PLATFORM=amd python kernels/check_hip_compile.py [--arch gfx90a] [--problems 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import miocore
from miocore.backends._gpu.base import CORE_NAMESPACE, DTYPE_OPTIONS, core_kernel_dir
from miocore.registry import Registry, default_registry
from miocore.solver import Ceilings, DeviceInfo, ExecutionContext


def _context(arch: str) -> ExecutionContext:
    ceilings = Ceilings(gflops=dict.fromkeys(miocore.DataType, 1e5), gbps=1.6e3)
    device = DeviceInfo(
        backend="hip",
        name=f"{arch} (offline)",
        arch=arch,
        compute_units=104,
        identity=f"{arch}104",
        measure_ceilings=lambda: ceilings,
    )
    return ExecutionContext(device=device)


def _problems(count: int) -> list[miocore.ConvProblem]:
    from miocore.corpus import find_corpus, sample_rows, shrink_row

    out = []
    if find_corpus() is not None:
        for row in sample_rows(count):
            for dtype in ("FP32", "FP16", "BF16"):
                out.append(shrink_row({**row, "dtype": dtype}))
        return out
    for direction in ("forward", "backward_data", "backward_weights"):
        for dtype in ("float32", "float16", "bfloat16"):
            for layout, spatial in (("NCHW", (9, 9)), ("NHWC", (9, 9)), ("NCDHW", (5, 5, 5))):
                rank = len(spatial)
                out.append(
                    miocore.ConvProblem.from_sizes(
                        direction,
                        n=2,
                        c=8,
                        k=8,
                        in_spatial=spatial,
                        filter_spatial=(3,) * rank,
                        pads=(1,) * rank,
                        groups=2,
                        dtype=dtype,
                        layout=layout,
                    )
                )
    return out


def _source_tree_registry() -> Registry | None:
    """The GPU plugins from a source tree on PYTHONPATH (no installed entry points)."""
    import importlib

    plugins = []
    for family in ("direct", "gemm", "igemm"):
        try:
            module = importlib.import_module(f"miocore_{family}.plugin")
        except ImportError:
            src = Path(__file__).resolve().parents[1] / "plugins" / family / "src"
            if not src.is_dir():
                continue
            sys.path.append(str(src))  # a family the tox env's PYTHONPATH does not list
            try:
                module = importlib.import_module(f"miocore_{family}.plugin")
            except ImportError:
                continue
        plugins.append((family, module, f"miocore-{family}", "source"))
    return Registry.from_plugins(plugins) if plugins else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="gfx90a")
    parser.add_argument("--problems", type=int, default=60, help="corpus rows per direction")
    args = parser.parse_args()
    hipcc = shutil.which("hipcc")
    if hipcc is None:
        print(
            "hip-compile: hipcc was not found on PATH; install Debian's 'hipcc' package "
            "(apt-get install hipcc). Failing rather than passing with nothing compiled.",
            file=sys.stderr,
        )
        return 1
    ctx = _context(args.arch)
    registry = default_registry()
    if not any("hip" in r.solver.backends for r in registry.solvers):
        registry = _source_tree_registry() or registry
    folders = {CORE_NAMESPACE: core_kernel_dir()}
    for _info, record in registry.kernel_sources:
        folders[record.name] = Path(record.path)
    jobs: dict[tuple[str, tuple[str, ...]], None] = {}
    for dtype_option in DTYPE_OPTIONS.values():
        jobs[(f"{CORE_NAMESPACE}/miocore_utility.cu", (dtype_option,))] = None
    gpu_solvers = [r for r in registry.solvers if "hip" in r.solver.backends]
    for problem in _problems(args.problems):
        canon = problem.canonical
        for reg in gpu_solvers:
            if not reg.solver.is_applicable(ctx, canon):
                continue
            for kernel in reg.solver.get_solution(ctx, canon).kernels:
                jobs[(kernel.source, tuple(kernel.options))] = None
    print(f"hip-compile: {len(jobs)} (source, options) sets from {len(gpu_solvers)} GPU solvers")
    env = {**os.environ, "HIP_PLATFORM": "amd"}

    def compile_one(job: tuple[str, tuple[str, ...]]) -> str | None:
        source, options = job
        namespace, _, name = source.rpartition("/")
        path = folders.get(namespace, core_kernel_dir()) / name
        with tempfile.TemporaryDirectory() as tmp:
            command = [
                hipcc,
                f"--offload-arch={args.arch}",
                "--genco",
                "-std=c++17",
                f"-I{core_kernel_dir()}",
                f"-I{path.parent}",
                *options,
                str(path),
                "-o",
                str(Path(tmp) / "out.hsaco"),
            ]
            result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            if result.returncode != 0 or not (Path(tmp) / "out.hsaco").stat().st_size:
                return f"{source} {' '.join(options)}:\n{result.stdout}{result.stderr}"
        print(f"  ok  {source} {' '.join(options)}")
        return None

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        failures = [f for f in pool.map(compile_one, sorted(jobs)) if f]
    if not gpu_solvers:
        print("hip-compile: no GPU solver is installed; install the plugins", file=sys.stderr)
        return 1
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    print(f"hip-compile: {len(jobs) - len(failures)}/{len(jobs)} compiled for {args.arch}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
