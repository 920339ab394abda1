"""Offline compile check of every GPU kernel source, for AMD (``hipcc``) or NVIDIA (NVRTC).

For a sample of problems (corpus-derived when ``MIOCORE_CORPUS`` or ``shared/corpus`` is found,
else a built-in set covering every direction, dtype, layout and 2-D/3-D), every installed GPU
solver's ``get_solution`` gives the kernels it would compile; each distinct (source, options)
pair is compiled with no GPU present, plus the core's utility kernels for every element type:

* ``--vendor hip``: ``HIP_PLATFORM=amd hipcc --offload-arch=gfx90a --genco`` (Debian's hipcc);
* ``--vendor cuda``: NVRTC through cuda.bindings, a cubin for ``--arch sm_90`` (the options the
  CUDA backend uses; NVRTC comes from the ``nvidia-cuda-nvrtc`` wheel, no driver needed).

Exit status 0 only when every compile succeeded; where the compiler is absent the check says so
and fails (it never passes empty). One exception, so that the whole tox matrix runs on machines
that cannot install hipcc: without hipcc, ``--vendor hip`` says loudly that it compiled nothing
and exits 0, unless ``MIOCORE_REQUIRE_HIPCC=1`` (set by ``.ci/run``, so CI fails without it).

    HIP_PLATFORM=amd python kernels/check_compile.py --vendor hip [--arch gfx90a]
    python kernels/check_compile.py --vendor cuda [--arch sm_90] [--problems 100]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import miocore
from miocore.backends._gpu.compiler import CORE_NAMESPACE, DTYPE_OPTIONS, core_kernel_dir
from miocore.solver import Ceilings, DeviceInfo, ExecutionContext, KernelInfo
from miocore.solver.registry import Registry, default_registry


def _context(vendor: str, arch: str) -> ExecutionContext:
    ceilings = Ceilings(gflops=dict.fromkeys(miocore.DataType, 1e5), gbps=1.6e3)
    device = DeviceInfo(
        backend=vendor,
        name=f"{arch} (offline)",
        arch=arch,
        compute_units=104 if vendor == "hip" else 132,
        identity=f"{arch}104",
        measure_ceilings=lambda: ceilings,
    )
    return ExecutionContext(device=device)


def sample_problems(count: int) -> list[miocore.ConvProblem]:
    from miocore.corpus import find_corpus, sample_rows, shrink_row

    # Channel-hungry kernels (TMA rows of 64 channels, tiles 64 to 256 channels wide) decline
    # the shrunk problems below: two layers at full width, in both 16-bit types, forward and
    # backward weights, channels-last and (their layout copies) channels-first.
    out = [
        miocore.ConvProblem.from_sizes(
            direction,
            n=n,
            c=64,
            k=k,
            in_spatial=(hw, hw),
            filter_spatial=(3, 3),
            pads=(1, 1),
            dtype=dtype,
            layout=layout,
        )
        for n, k, hw, dtype in ((2, 64, 9, "float16"), (32, 256, 56, "bfloat16"))
        for direction in ("forward", "backward_weights")
        for layout in ("NHWC", "NCHW")
    ]
    # ...and a 3-D U-Net layer in each direction (the wgmma kernels' 3-D builds)
    for direction in ("forward", "backward_data", "backward_weights"):
        layer = miocore.ConvProblem.from_sizes(
            direction, n=2, c=64, k=128, in_spatial=(8, 8, 8), filter_spatial=(3, 3, 3),
            pads=(1, 1, 1), dtype="float16", layout="NDHWC",
        )  # fmt: skip
        out.append(layer)
    if find_corpus() is not None:
        for row in sample_rows(count):
            # Each row also in its channels-last twin: NHWC-only solvers see every shape too.
            twin = {"NCHW": "NHWC", "NCDHW": "NDHWC"}.get(row["layout"], row["layout"])
            for layout in dict.fromkeys((row["layout"], twin)):
                for dtype in ("FP32", "FP16", "BF16"):
                    out.append(shrink_row({**row, "dtype": dtype, "layout": layout}))
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
    families = sorted(
        p.parent.name for p in Path(__file__).resolve().parents[1].glob("plugins/*/src")
    )
    for family in (f for f in families if not f.startswith("_")):
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


@dataclasses.dataclass(frozen=True)
class SolverKernel:
    """One kernel a solver would compile for one sample problem in one math mode."""

    solver: str
    problem_key: str
    math_mode: str
    index: int
    kernel: KernelInfo


def last_of_each_kind(space: list[Any]) -> list[Any]:
    """The last configuration of each set of keys in ``space`` (a space lists its best guesses
    first and adds optional keys for other kernel builds: stream-K shares, the fix-up, tiles
    over several taps; the last of each kind builds a macro set no default does)."""
    last: dict[frozenset[str], Any] = {}
    for config in space:
        last[frozenset(config)] = config
    return list(last.values())


def solver_kernels(
    vendor: str,
    arch: str,
    problems: list[miocore.ConvProblem],
    only: tuple[str, ...] = (),
    configs: int = 0,
    last: bool = False,
) -> tuple[dict[str, Path], list[Any], list[SolverKernel]]:
    """The kernel source folders, the GPU solvers of ``vendor`` (``only`` these names when
    given) and every kernel they produce for ``problems`` in both math modes: with the default
    performance config, and for tunable solvers also with up to ``configs`` more of the
    problem's search space (evenly spaced through it) and, with ``last``, the last config of
    each set of keys in it (:func:`last_of_each_kind`)."""
    ctx = _context(vendor, arch)
    registry = default_registry()
    if not any(vendor in r.solver.backends for r in registry.solvers):
        registry = _source_tree_registry() or registry
    folders = {CORE_NAMESPACE: core_kernel_dir()}
    for _info, record in registry.kernel_sources:
        folders[record.name] = Path(record.path)
    gpu_solvers = [
        r
        for r in registry.solvers
        if vendor in r.solver.backends and (not only or r.solver.name in only)
    ]
    # Both math modes: the TF32 solvers only apply (and only generate kernels) in "tf32".
    contexts = (ctx, dataclasses.replace(ctx, math_mode="tf32"))
    made = []
    for problem in problems:
        canon = problem.canonical
        for reg in gpu_solvers:
            solver = reg.solver
            for context in contexts:
                if not solver.is_applicable(context, canon):
                    continue
                chosen: list[Any] = [None]
                if (configs or last) and hasattr(solver, "perf_config_space"):
                    space = solver.perf_config_space(context, canon)
                    if configs:
                        step = max(1, len(space) // configs)
                        chosen += space[::step][:configs]
                    if last:
                        chosen += last_of_each_kind(space)
                for config in chosen:
                    solution = (
                        solver.get_solution(context, canon)
                        if config is None
                        else solver.get_solution(context, canon, config)
                    )
                    tag = context.math_mode if config is None else f"{context.math_mode} {config}"
                    for index, kernel in enumerate(solution.kernels):
                        made.append(SolverKernel(solver.name, canon.key, tag, index, kernel))
    return folders, gpu_solvers, made


#: Set to 1 where a missing hipcc must fail the check (CI: ``.ci/run``).
REQUIRE_HIPCC = "MIOCORE_REQUIRE_HIPCC"


def _hipcc_required() -> bool:
    value = os.environ.get(REQUIRE_HIPCC, "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


def _hipcc_compiler(arch: str) -> Callable[[Path, tuple[str, ...]], str | None] | str:
    hipcc = shutil.which("hipcc")
    if hipcc is None:
        return (
            "hipcc was not found on PATH; install Debian's 'hipcc' package "
            f"(apt-get install hipcc). Failing ({REQUIRE_HIPCC} is set) rather than passing "
            "with nothing compiled."
        )
    env = {**os.environ, "HIP_PLATFORM": "amd"}

    def compile_one(path: Path, options: tuple[str, ...]) -> str | None:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out.hsaco"
            command = [
                hipcc,
                f"--offload-arch={arch}",
                "--genco",
                "-std=c++17",
                f"-I{core_kernel_dir()}",
                f"-I{path.parent}",
                *options,
                str(path),
                "-o",
                str(out),
            ]
            result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            if result.returncode != 0 or not out.exists() or not out.stat().st_size:
                return f"{result.stdout}{result.stderr}"
        return None

    return compile_one


def _nvrtc_compiler(arch: str) -> Callable[[Path, tuple[str, ...]], str | None] | str:
    try:
        from cuda.bindings import nvrtc

        (err, _major, _minor) = nvrtc.nvrtcVersion()
        if int(err) != 0:
            raise RuntimeError(str(err))
    except Exception as exc:  # any failure to load NVRTC means: no compiler
        return (
            f"NVRTC could not be loaded ({exc}); install cuda-bindings and the "
            "nvidia-cuda-nvrtc wheel. Failing rather than passing with nothing compiled."
        )

    def compile_one(path: Path, options: tuple[str, ...]) -> str | None:
        opts = [
            f"--gpu-architecture={arch}",
            "--std=c++17",
            f"--include-path={core_kernel_dir()}",
            f"--include-path={path.parent}",
            *options,
        ]
        _, prog = nvrtc.nvrtcCreateProgram(path.read_bytes(), path.name.encode(), 0, [], [])
        try:
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
            if int(err) == 0:
                return None
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            return log.rstrip(b"\0 ").decode(errors="replace")
        finally:
            nvrtc.nvrtcDestroyProgram(prog)

    return compile_one


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vendor", choices=("hip", "cuda"), default="hip")
    parser.add_argument("--arch", default=None, help="default: gfx90a (hip), sm_90 (cuda)")
    parser.add_argument("--problems", type=int, default=60, help="corpus rows per direction")
    parser.add_argument("--solver", action="append", default=[], help="only these solvers")
    args = parser.parse_args()
    arch = args.arch or ("gfx90a" if args.vendor == "hip" else "sm_90")
    label = f"{args.vendor}-compile"
    if args.vendor == "hip" and shutil.which("hipcc") is None and not _hipcc_required():
        print(
            f"{label}: SKIPPED, nothing compiled for {arch}: hipcc was not found on PATH. "
            "Install Debian's or Ubuntu's 'hipcc' package (scripts/install-hipcc) to run this "
            f"check; {REQUIRE_HIPCC}=1 (as CI sets it) makes a missing hipcc a failure.",
            file=sys.stderr,
        )
        return 0
    compiler = (_hipcc_compiler if args.vendor == "hip" else _nvrtc_compiler)(arch)
    if isinstance(compiler, str):
        print(f"{label}: {compiler}", file=sys.stderr)
        return 1
    folders, gpu_solvers, kernels = solver_kernels(
        args.vendor, arch, sample_problems(args.problems), tuple(args.solver), last=True
    )
    jobs: dict[tuple[str, tuple[str, ...]], None] = {}
    for dtype_option in DTYPE_OPTIONS.values():
        for core in ("miocore_utility.cu", "miocore_reference.cu"):
            jobs[(f"{CORE_NAMESPACE}/{core}", (dtype_option,))] = None
    for made in kernels:
        jobs[(made.kernel.source, tuple(made.kernel.options))] = None
    names = ", ".join(r.solver.name for r in gpu_solvers)
    print(f"{label}: {len(jobs)} (source, options) sets from {len(gpu_solvers)} solvers ({names})")

    def compile_one(job: tuple[str, tuple[str, ...]]) -> str | None:
        source, options = job
        namespace, _, name = source.rpartition("/")
        path = folders.get(namespace, core_kernel_dir()) / name
        failure = compiler(path, options)
        if failure is not None:
            return f"{source} {' '.join(options)}:\n{failure}"
        print(f"  ok  {source} {' '.join(options)}")
        return None

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        failures = [f for f in pool.map(compile_one, sorted(jobs)) if f]
    if not gpu_solvers:
        print(f"{label}: no GPU solver is installed; install the plugins", file=sys.stderr)
        return 1
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    print(f"{label}: {len(jobs) - len(failures)}/{len(jobs)} compiled for {arch}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
