"""CPU checks of the igemm kernels' MFMA path (AMD matrix cores): the architecture switch, the
wave tiling every config relies on, the HIP cost model, and, where the compilers are installed,
that hipcc emits ``v_mfma`` instructions for gfx90a and that NVRTC builds the CUDA emulation.

No device is needed; the compile checks skip where hipcc (with clang-offload-bundler and
llvm-objdump) or NVRTC is missing.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import miocore
from miocore.testing import cpu_context

gpu = pytest.importorskip("miocore_igemm.gpu")
wrw = pytest.importorskip("miocore_igemm.gpu_wrw")

HEADER = Path(__file__).resolve().parents[1] / "kernels" / "miocore_gpu.h"


def _ctx(backend: str, arch: str, mode: str = "exact") -> miocore.ExecutionContext:
    device = dataclasses.replace(
        cpu_context().device, backend=backend, compute_units=104, arch=arch
    )
    return miocore.ExecutionContext(device=device, math_mode=mode)


def _problem(direction: str, dtype: str = "float16", **kw) -> miocore.ConvProblem:
    args = dict(n=8, c=256, k=256, in_spatial=(28, 28), filter_spatial=(3, 3), pads=(1, 1))
    args.update(kw)
    return miocore.ConvProblem.from_sizes(direction, dtype=dtype, layout="NHWC", **args)


def test_mfma_architectures_match_the_header() -> None:
    """The host's rule (which contexts get the MFMA cost model) and the header's MIO_MFMA switch
    name the same targets."""
    text = HEADER.read_text()
    block = re.search(r"#if defined\(MIO_HIP\) && \\\n(.*?)\n#define MIO_MFMA 1", text, re.S)
    assert block, "MIO_MFMA switch not found in miocore_gpu.h"
    archs = set(re.findall(r"__(gfx[0-9a-z]+)__", block.group(1)))
    assert archs == set(gpu.MFMA_ARCHS)
    assert "gfx908" not in archs  # fp16 MFMA but no bf16_1k: it keeps the scalar path


def test_igemm_warp_grids_pair_into_waves() -> None:
    """Every tile's warp grid has an even number of warps along N, so the 4 waves of 64 each
    take two adjacent warps' columns as whole 16 x 16 MFMA tiles."""
    for bm, bn in gpu.TILES:
        wm, wn = gpu.warp_grid(bm, bn)
        assert wn % 2 == 0, (bm, bn)
        assert (bm // wm) % 16 == 0 and (2 * bn // wn) % 16 == 0, (bm, bn)
    # the kernels refuse an odd grid under MFMA (the shared header's check)
    header = (gpu.KERNEL_DIR / "igemm_tiles.h").read_text()
    assert re.search(r"#if MIO_WARPS_N % 2\n#error .*MIO_WARPS_N must be even", header)
    for source in ("igemm_mma.cu", "igemm_wrw.cu"):
        assert '#include "igemm_tiles.h"' in (gpu.KERNEL_DIR / source).read_text()


def test_wrw_warp_grids_pair_into_waves() -> None:
    """The wrw kernel's own warp rule (4 x 2 when bm > bn, else 2 x 4) pairs along N too."""
    source = (wrw.KERNEL_DIR / "igemm_wrw.cu").read_text()
    assert re.search(
        r"#if MIO_BM > MIO_BN\n#define MIO_WARPS_M 4\n#else\n#define MIO_WARPS_M 2", source
    )
    for bm in wrw._BM:
        for bn in wrw._BN:
            wm = 4 if bm > bn else 2
            wn = 8 // wm
            assert wn % 2 == 0
            assert (bm // wm) % 16 == 0 and (2 * bn // wn) % 16 == 0, (bm, bn)


def test_uses_mfma() -> None:
    assert gpu.uses_mfma(_ctx("hip", "gfx90a"))
    assert gpu.uses_mfma(_ctx("hip", "gfx942"))
    assert gpu.uses_mfma(_ctx("hip", "gfx90a:sramecc+:xnack-"))
    assert not gpu.uses_mfma(_ctx("hip", "gfx908"))
    assert not gpu.uses_mfma(_ctx("hip", "gfx1100"))
    assert not gpu.uses_mfma(_ctx("cuda", "sm90"))


@pytest.mark.parametrize(
    ("solver", "direction", "dtype"),
    [
        (gpu.GpuMmaIgemmSolver(), "forward", "float16"),
        (gpu.GpuMmaIgemmSolver(), "backward_data", "bfloat16"),
        (gpu.GpuTf32IgemmSolver(), "forward", "float32"),
        (wrw.GpuMmaWrwSolver(), "backward_weights", "float16"),
        (wrw.GpuTf32WrwSolver(), "backward_weights", "float32"),
    ],
    ids=str,
)
def test_wti_on_hip_follows_the_matrix_cores(solver, direction: str, dtype: str) -> None:
    """On gfx90a (MFMA) the kernels rank well above the scalar fallback of gfx908, and below
    the measured NVIDIA tensor-core estimate scaled the same way (not measured on AMD)."""
    p = _problem(direction, dtype).canonical
    mfma = solver.wti(_ctx("hip", "gfx90a", "tf32"), p)
    scalar = solver.wti(_ctx("hip", "gfx908", "tf32"), p)
    assert 0 < scalar < mfma <= 1
    assert mfma > 3 * scalar


def _llvm_tool(name: str) -> str | None:
    """The newest LLVM's ``name`` (Debian keeps versions side by side), else the one on PATH."""
    versions = sorted(
        Path("/usr/lib").glob(f"llvm-*/bin/{name}"),
        key=lambda p: int(re.sub(r"\D", "", p.parts[3]) or 0),
    )
    return str(versions[-1]) if versions else shutil.which(name)


def _hip_disassembly(source: str, options: tuple[str, ...], arch: str, tmp: Path) -> str:
    hipcc = shutil.which("hipcc")
    bundler, objdump = _llvm_tool("clang-offload-bundler"), _llvm_tool("llvm-objdump")
    if not (hipcc and bundler and objdump):
        pytest.skip("hipcc, clang-offload-bundler or llvm-objdump is not installed")
    out = tmp / "k.hsaco"
    compile_cmd = [
        hipcc,
        f"--offload-arch={arch}",
        "--genco",
        "-std=c++17",
        f"-I{HEADER.parent}",
        f"-I{gpu.KERNEL_DIR}",
        *options,
        str(gpu.KERNEL_DIR / source),
        "-o",
        str(out),
    ]
    env = {**os.environ, "HIP_PLATFORM": "amd"}
    done = subprocess.run(compile_cmd, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    elf = tmp / "k.elf"
    target = f"--targets=hipv4-amdgcn-amd-amdhsa--{arch}"
    unbundle = [bundler, "--type=o", target, f"--input={out}", f"--output={elf}", "--unbundle"]
    subprocess.run(unbundle, check=True, capture_output=True)
    dis = subprocess.run(
        [objdump, "-d", f"--mcpu={arch}", str(elf)], capture_output=True, text=True, check=True
    )
    return dis.stdout


_SMALL = ("-DMIO_BM=64", "-DMIO_BN=64", "-DMIO_BK=32", "-DMIO_STAGES=2")


@pytest.mark.parametrize(
    ("source", "options", "instruction", "count"),
    [
        # 64 x 64 tile, warps 2 x 4 -> waves 2 x 2 of 32 x 32: 2 x 2 MFMA tiles per k-step of 16
        (
            "igemm_mma.cu",
            ("-DMIO_DTYPE_BF16", *_SMALL, "-DMIO_WARPS_M=2", "-DMIO_WARPS_N=4", "-DMIO_VEC=8"),
            "v_mfma_f32_16x16x16bf16_1k",
            4 * 32 // 16,
        ),
        # wrw 64 x 64: warps 2 x 4 -> the same waves; fp32 steps k by 4
        (
            "igemm_wrw.cu",
            ("-DMIO_DTYPE_FP32", *_SMALL, "-DMIO_VECA=4", "-DMIO_VECB=4"),
            "v_mfma_f32_16x16x4f32",
            4 * 32 // 4,
        ),
    ],
    ids=("mma_bf16", "wrw_fp32"),
)
def test_hipcc_emits_mfma_for_gfx90a(
    source: str, options: tuple[str, ...], instruction: str, count: int, tmp_path: Path
) -> None:
    text = _hip_disassembly(source, options, "gfx90a", tmp_path)
    found = re.findall(r"\bv_mfma_\w+", text)
    assert found.count(instruction) == count, sorted(set(found))
    assert len(found) == count  # nothing else: the scalar path is compiled out


def _nvrtc_compile(source: Path, options: tuple[str, ...]) -> str | None:
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        pytest.skip("NVRTC (cuda-bindings) is not installed")
    opts = [
        "--gpu-architecture=sm_90",
        "--std=c++17",
        f"--include-path={HEADER.parent}",
        f"--include-path={source.parent}",
        *options,
    ]
    _, prog = nvrtc.nvrtcCreateProgram(source.read_bytes(), source.name.encode(), 0, [], [])
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        if int(err) == 0:
            return None
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        return log.decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@pytest.mark.parametrize("dtype", ("FP16", "BF16", "FP32"))
def test_nvrtc_builds_the_mfma_check_kernel(dtype: str) -> None:
    """The one-tile check of tests/test_gpu_igemm_mfma.py, emulated for CUDA."""
    check = gpu.KERNEL_DIR / "igemm_mfma_check.cu"
    failure = _nvrtc_compile(check, (f"-DMIO_DTYPE_{dtype}", "-DMIO_MFMA_EMULATE"))
    assert failure is None, failure


def test_nvrtc_builds_the_mfma_emulation() -> None:
    """The CUDA build of the kernels' MFMA path (what tests/test_gpu_igemm_mfma.py runs on
    NVIDIA); the device tests build every dtype and direction."""
    options = ("-DMIO_DTYPE_BF16", *_SMALL, "-DMIO_WARPS_M=2", "-DMIO_WARPS_N=4")
    failure = _nvrtc_compile(gpu.KERNEL_DIR / "igemm_mma.cu", (*options, "-DMIO_MFMA_EMULATE"))
    assert failure is None, failure
