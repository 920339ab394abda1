"""The SASS instruction mix of a solver's kernel for one layer and config, on the host.

Profiling help for issue 13 without device time: the kernel the solver would launch is built
by NVRTC for sm_90 (the ``nvidia-cuda-nvrtc`` wheel, no driver), its cubin disassembled by
``nvdisasm`` (the ``nvidia-cuda-nvdisasm`` wheel; ``--nvdisasm`` names it), and the static
instruction counts of the kernel printed by class (multiply-adds, conversions, shared and
global loads and stores, local-memory spills, integer and control), with the registers and
spill bytes ptxas reports. Static counts of a fully unrolled strip loop are what a thread
issues per strip, so two configs (or two builds of one kernel) compare on the instructions
they spend per output before any device time is spent.

    python benchmarks/kernel_sass_mix.py --suite mobilenetv2 --layer dw144s1@56 \\
        --dtype float16 --config '{"vec":4,"ch":48,"toh":8,"tow":16,"pix":2,"mb":3,"nt":4}'
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from shapes import SUITES, problem

import miocore
from miocore.backends._gpu.compiler import core_kernel_dir
from miocore.testing import cpu_context

#: Opcode classes, first match wins (the SASS base name before any ``.`` modifier).
CLASSES = (
    ("fp32 fma/mul/add", ("FFMA", "FMUL", "FADD", "FMNMX")),
    ("packed 16-bit math", ("HFMA2", "HMUL2", "HADD2", "HMNMX2")),
    ("conversions", ("F2F", "F2FP", "I2F", "F2I", "PRMT")),
    ("shared loads", ("LDS", "LDSM")),
    ("shared stores", ("STS",)),
    ("async copies", ("LDGSTS", "LDGDEPBAR", "DEPBAR")),
    ("global loads", ("LDG",)),
    ("global stores", ("STG",)),
    ("local (spills)", ("LDL", "STL")),
    ("integer/address", ("IMAD", "IADD3", "LEA", "SHF", "LOP3", "ISETP", "SEL", "MOV", "IABS")),
    ("control", ("BRA", "BAR", "EXIT", "BSYNC", "BSSY", "WARPSYNC", "CALL", "RET")),
)


def kernel_for(args: argparse.Namespace) -> tuple[miocore.KernelInfo, Path]:
    """The solver's first kernel for the layer and config, and the folder of its source."""
    layer = next(lay for lay in SUITES[args.suite] if lay.name == args.layer)
    p = problem(layer, args.batch, args.direction, args.dtype, args.layout).canonical
    device = dataclasses.replace(
        cpu_context().device, backend="cuda", compute_units=132, arch="sm_90"
    )
    ctx = miocore.ExecutionContext(device=device)
    registry = miocore.Handle().registry
    solver = registry.get(args.solver).solver
    cfg = miocore.PerfConfig(**json.loads(args.config)) if args.config else None
    if cfg is None:
        cfg = solver.default_perf_config(ctx, p)
    if not solver.is_valid_perf_config(ctx, p, cfg):
        raise SystemExit(f"config {dict(cfg)} is not valid for {p.key}")
    kernel = solver.get_solution(ctx, p, cfg).kernels[0]
    module = sys.modules[type(solver).__module__]
    folder = Path(module.__file__).parent / "kernels"
    print(f"{p.key}\nconfig {dict(cfg)}\nkernel {kernel.kernel_name} {kernel.grid}x{kernel.block}")
    return kernel, folder


def build_cubin(kernel: miocore.KernelInfo, folder: Path) -> tuple[bytes, str]:
    """NVRTC's cubin for sm_90 and its log (ptxas's registers and spills)."""
    from cuda.bindings import nvrtc

    path = folder / kernel.source.split("/", 1)[-1]
    opts = [
        "--gpu-architecture=sm_90",
        "--std=c++17",
        f"--include-path={core_kernel_dir()}",
        f"--include-path={folder}",
        "--ptxas-options=-v",
        *kernel.options,
    ]
    _, prog = nvrtc.nvrtcCreateProgram(path.read_bytes(), path.name.encode(), 0, [], [])
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        text = log.rstrip(b"\0 ").decode(errors="replace")
        if int(err) != 0:
            raise SystemExit(text)
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        return cubin, text
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def opcode_counts(cubin: bytes, nvdisasm: str, kernel: str) -> collections.Counter:
    """Static SASS opcode counts (base names) of ``kernel``'s function in ``cubin`` (a source
    may hold several kernels)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        sass = subprocess.run([nvdisasm, "-c", str(path)], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip
    counts: collections.Counter = collections.Counter()
    section = re.compile(r"\.text\.(\w+)")
    inside = False
    for line in sass.splitlines():
        named = section.search(line)
        if named and not line.lstrip().startswith("/*"):
            inside = named.group(1) == kernel
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if inside and m:
            counts[m.group(1)] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="mobilenetv2", choices=sorted(SUITES))
    parser.add_argument("--layer", required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--direction", default="forward")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--layout", default="NHWC")
    parser.add_argument("--solver", default="direct.gpu_depthwise")
    parser.add_argument("--config", default=None, help="a JSON config (default: the solver's)")
    parser.add_argument("--nvdisasm", default=shutil.which("nvdisasm") or "nvdisasm")
    parser.add_argument("--all", action="store_true", help="every opcode, not only classes")
    args = parser.parse_args()
    kernel, folder = kernel_for(args)
    cubin, log = build_cubin(kernel, folder)
    lines = log.splitlines()  # ptxas: a function's name, then its stack, then its registers
    for i, line in enumerate(lines):
        if f"'{kernel.kernel_name}'" in line and "Compiling" in line:
            print(*(" " + x.strip() for x in lines[i : i + 4]), sep="\n")
    counts = opcode_counts(cubin, args.nvdisasm, kernel.kernel_name)
    total = sum(counts.values())
    seen = set()
    for name, ops in CLASSES:
        n = sum(v for k, v in counts.items() if k in ops)
        seen |= {k for k in counts if k in ops}
        print(f"{name:22} {n:6} {100 * n / max(total, 1):5.1f}%")
    rest = {k: v for k, v in counts.items() if k not in seen}
    print(
        f"{'other':22} {sum(rest.values()):6}  {dict(sorted(rest.items(), key=lambda kv: -kv[1]))}"
    )
    print(f"{'total':22} {total:6}")
    if args.all:
        print(dict(counts.most_common()))


if __name__ == "__main__":
    main()
