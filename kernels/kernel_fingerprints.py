"""Fingerprints of every GPU solver's kernels: proof that a refactor left the machine code alone.

For the sample problems of ``check_compile.py`` (every direction, dtype, layout, 2-D/3-D, both
math modes), each GPU solver's ``get_solution`` gives the exact kernel source and options it
would build; each is compiled with NVRTC to an ``sm_90`` cubin (no GPU needed) and recorded as
``(solver, problem key, math mode, kernel index) -> source, kernel, options, sha256 of the
cubin``, with the cubins kept by hash in ``--cubins``.

``--compare BEFORE AFTER`` pairs the two records entry by entry: a pair is ``identical`` when
the cubins are byte-identical, ``same-sass`` when they differ but the SASS of the launched
kernel is the same once symbol names are replaced (``nvdisasm``, from ``--nvdisasm`` or
Triton's copy), else ``DIFFERENT``. Exit status 0 only when nothing is different or missing.

    python kernels/kernel_fingerprints.py --out /tmp/before.json --cubins /tmp/cubins
    python kernels/kernel_fingerprints.py --out /tmp/after.json --cubins /tmp/cubins
    python kernels/kernel_fingerprints.py --compare /tmp/before.json /tmp/after.json \\
        --cubins /tmp/cubins
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from check_compile import sample_problems, solver_kernels

import miocore
from miocore.backends._gpu.compiler import core_kernel_dir


def two_d_problems() -> list[miocore.ConvProblem]:
    """2-D layers the corpus sample may miss (the 2-D-only solvers apply to these): 1x1,
    3x3, strided, dilated, grouped, depthwise and a 7x7 first layer, NCHW and NHWC, every
    dtype and direction."""
    shapes = (  # n, c, k, hw, filter, pad, stride, dilation, groups
        (2, 64, 64, 14, 1, 0, 1, 1, 1),
        (2, 32, 48, 13, 3, 1, 1, 1, 1),
        (2, 64, 32, 15, 3, 1, 2, 1, 1),
        (1, 16, 16, 12, 3, 2, 1, 2, 1),
        (2, 32, 32, 10, 3, 1, 1, 1, 4),
        (2, 3, 32, 23, 7, 3, 2, 1, 1),
        (2, 40, 40, 14, 3, 1, 1, 1, 40),  # depthwise: staged tiles, 2 channel blocks
        (2, 96, 96, 15, 3, 1, 2, 1, 96),
        (2, 48, 48, 12, 5, 2, 1, 1, 48),
    )
    out = []
    for direction in ("forward", "backward_data", "backward_weights"):
        for dtype in ("float32", "float16", "bfloat16"):
            for layout in ("NCHW", "NHWC"):
                for n, c, k, hw, f, pad, stride, dil, groups in shapes:
                    out.append(
                        miocore.ConvProblem.from_sizes(
                            direction,
                            n=n,
                            c=c,
                            k=k,
                            in_spatial=(hw, hw),
                            filter_spatial=(f, f),
                            pads=(pad, pad),
                            strides=(stride, stride),
                            dilations=(dil, dil),
                            groups=groups,
                            dtype=dtype,
                            layout=layout,
                        )
                    )
    return out


def _nvrtc_cubin(path: Path, options: tuple[str, ...], arch: str) -> bytes:
    """The cubin NVRTC makes of ``path`` with the CUDA backend's options."""
    from cuda.bindings import nvrtc

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
        if int(err) != 0:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"{path.name} {options}: {log.decode(errors='replace')}")
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        out = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, out)
        return out
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def record(args: argparse.Namespace) -> int:
    problems = sample_problems(args.problems) + two_d_problems()
    folders, solvers, kernels = solver_kernels("cuda", args.arch, problems, configs=args.configs)
    if args.solver:  # name prefixes, e.g. "winograd." or "igemm.gpu_mma"
        kernels = [k for k in kernels if k.solver.startswith(tuple(args.solver))]
        solvers = [r for r in solvers if r.solver.name.startswith(tuple(args.solver))]
    cubins = Path(args.cubins)
    cubins.mkdir(parents=True, exist_ok=True)
    builds: dict[tuple[Path, tuple[str, ...]], None] = {}
    for made in kernels:
        namespace, _, name = made.kernel.source.rpartition("/")
        builds[(folders.get(namespace, core_kernel_dir()) / name, made.kernel.options)] = None

    def build(job: tuple[Path, tuple[str, ...]]) -> tuple[tuple[Path, tuple[str, ...]], str]:
        binary = _nvrtc_cubin(job[0], job[1], args.arch)
        digest = hashlib.sha256(binary).hexdigest()
        (cubins / f"{digest}.cubin").write_bytes(binary)
        return job, digest

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        digests = dict(pool.map(build, builds))
    entries = {}
    for made in kernels:
        namespace, _, name = made.kernel.source.rpartition("/")
        job = (folders.get(namespace, core_kernel_dir()) / name, made.kernel.options)
        key = f"{made.solver}|{made.problem_key}|{made.math_mode}|{made.index}"
        entries[key] = {
            "source": made.kernel.source,
            "kernel": made.kernel.kernel_name,
            "options": list(made.kernel.options),
            "grid": list(made.kernel.grid),
            "block": list(made.kernel.block),
            "cubin": digests[job],
        }
    Path(args.out).write_text(json.dumps(entries, indent=1, sort_keys=True))
    names = sorted({r.solver.name for r in solvers})
    print(f"{len(entries)} kernels of {len(names)} solvers, {len(digests)} distinct builds")
    return 0


def _nvdisasm(explicit: str | None) -> str:
    if explicit:
        return explicit
    found = shutil.which("nvdisasm")
    if found:
        return found
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm")


_SYMBOL = re.compile(r"\b_Z\w+|\$\w+")
_COMMENT = re.compile(r"/\*.*?\*/")


def _sass(nvdisasm: str, cubin: Path, kernel: str) -> str:
    """The SASS of ``kernel`` in ``cubin`` with symbol names, addresses and comments dropped."""
    text = subprocess.run(
        [nvdisasm, "-c", str(cubin)], capture_output=True, text=True, check=True
    ).stdout
    lines, inside = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(".text."):
            inside = kernel in line
            continue
        if inside:
            code = _SYMBOL.sub("SYM", _COMMENT.sub("", line).strip())
            if code:
                lines.append(code)
    return "\n".join(lines)


def compare(args: argparse.Namespace) -> int:
    before = json.loads(Path(args.compare[0]).read_text())
    after = json.loads(Path(args.compare[1]).read_text())
    # a record of some solvers only (--solver) is compared on those solvers
    recorded = {key.split("|", 1)[0] for key in after}
    before = {k: v for k, v in before.items() if k.split("|", 1)[0] in recorded}
    cubins = Path(args.cubins)
    nvdisasm = _nvdisasm(args.nvdisasm)
    counts = {"identical": 0, "same-sass": 0, "DIFFERENT": 0, "missing": 0, "new": 0}
    sass_pairs: dict[tuple[str, str, str, str], bool] = {}
    for key, old in sorted(before.items()):
        new = after.get(key)
        if new is None:
            counts["missing"] += 1
            print(f"missing  {key}")
            continue
        launch_same = old["grid"] == new["grid"] and old["block"] == new["block"]
        if old["cubin"] == new["cubin"] and launch_same:
            counts["identical"] += 1
            continue
        pair = (old["cubin"], old["kernel"], new["cubin"], new["kernel"])
        if pair not in sass_pairs:
            sass_pairs[pair] = _sass(
                nvdisasm, cubins / f"{old['cubin']}.cubin", old["kernel"]
            ) == _sass(nvdisasm, cubins / f"{new['cubin']}.cubin", new["kernel"])
        if sass_pairs[pair] and launch_same:
            counts["same-sass"] += 1
        else:
            counts["DIFFERENT"] += 1
            print(f"DIFFERENT {key}: {old['source']} {old['options']} -> {new['options']}")
    counts["new"] = len(set(after) - set(before))
    distinct = {(o["cubin"]) for o in before.values()}
    print(f"{len(before)} kernels ({len(distinct)} distinct cubins before): {counts}")
    return 0 if counts["DIFFERENT"] == 0 and counts["missing"] == 0 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the record here")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--cubins", default=os.path.join(tempfile.gettempdir(), "miocore-cubins"))
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--problems", type=int, default=12, help="corpus rows per direction")
    parser.add_argument(
        "--solver", action="append", default=[], help="only solvers with this name prefix"
    )
    parser.add_argument("--configs", type=int, default=3, help="extra tuning configs")
    parser.add_argument("--jobs", type=int, default=2, help="NVRTC compiles at once")
    parser.add_argument("--nvdisasm", default=None)
    args = parser.parse_args()
    if args.compare:
        return compare(args)
    if not args.out:
        parser.error("--out or --compare is required")
    return record(args)


if __name__ == "__main__":
    sys.exit(main())
