"""Every kernel the solvers plan compiles without a GPU: for NVIDIA sm_90 (a cubin whose PTX
uses ``wgmma``) and AMD gfx942 (a hsaco whose code uses MFMA), through the plugin's builder.

Triton compiles only outside its interpreter mode, which is chosen when Triton is imported, so
the compiles run in a child process of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

SCRIPT = r"""
import json, sys
import dataclasses
import miocore
from miocore.testing import cpu_context
from miocore_triton import SOLVERS
from miocore_triton.builder import BUILDER, compile_kernel
from miocore_triton.plugin import KERNEL_DIR

out = []
for backend, arch, target, mode in (
    ("cuda", "sm90", "sm_90", "tf32"),
    ("hip", "gfx942", "gfx942:sramecc+:xnack-", "exact"),
):
    device = dataclasses.replace(
        cpu_context().device, backend=backend, compute_units=132, arch=arch
    )
    ctx = miocore.ExecutionContext(device=device, math_mode=mode)
    cases = [(dtype, "NHWC", (14, 14), (3, 3), (1, 1), (1, 1), 64, 96)
             for dtype in ("float16", "bfloat16", "float32")]
    # 3-D: the depth branches compile too (channels-last 3x3x3; channels-first strided 2x2x2,
    # staged and phased)
    cases += [("float16", "NDHWC", (6, 6, 6), (3, 3, 3), (1, 1, 1), (1, 1, 1), 64, 96),
              ("float16", "NCDHW", (6, 6, 6), (2, 2, 2), (0, 0, 0), (2, 2, 2), 64, 96)]
    # NCHW 1x1 (inputs read in place), a 3-channel stem (backward weights' tap columns) and
    # a stride-2 1x1 shortcut (backward data's spread)
    cases += [("float16", "NCHW", (14, 14), (1, 1), (0, 0), (1, 1), 64, 96),
              ("float16", "NCHW", (15, 15), (7, 7), (3, 3), (2, 2), 3, 96),
              ("bfloat16", "NCHW", (14, 14), (1, 1), (0, 0), (2, 2), 32, 128)]
    # stride-1 first layers (3 channels in 2-D, 1 in 3-D): the depth images of their taps
    cases += [("float16", "NHWC", (14, 14), (3, 3), (1, 1), (1, 1), 3, 64),
              ("float16", "NDHWC", (6, 6, 6), (3, 3, 3), (1, 1, 1), (1, 1, 1), 1, 32)]
    for solver in SOLVERS:
        for dtype, layout, size, fil, pads, strides, c, k in cases:
            p = miocore.ConvProblem.from_sizes(
                solver.direction, n=4, c=c, k=k, in_spatial=size, filter_spatial=fil,
                pads=pads, strides=strides, dtype=dtype, layout=layout,
            )
            if not solver.is_applicable(ctx, p):
                out.append({"solver": solver.name, "backend": backend, "dtype": dtype,
                            "layout": layout, "declined": solver.is_applicable(ctx, p).reason})
                continue
            # the most split configuration: backward weights' reduction kernel builds too
            cfg = max(solver.perf_config_space(ctx, p), key=lambda c: c["split"])
            for k in solver.get_solution(ctx, p, cfg).kernels:
                path = KERNEL_DIR / k.source.split("/", 1)[1]
                built = BUILDER.build(path, k.kernel_name, k.options, backend, target)
                compiled, _, _ = compile_kernel(path, k.kernel_name, k.options, backend, target)
                text = compiled.asm["ptx" if backend == "cuda" else "amdgcn"]
                out.append({
                    "solver": solver.name, "backend": backend, "dtype": dtype,
                    "layout": layout, "c": c, "kernel": k.kernel_name,
                    "elf": built.image[:4] == b"\x7fELF",
                    "meta": built.meta, "block": list(k.block),
                    "wgmma": "wgmma" in text, "mfma": "v_mfma" in text,
                })
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def builds() -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(Path(os.environ.get("TMPDIR", "/tmp")) / "miocore-triton-ci")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _depth_builds(builds: list[dict]) -> None:
    """The depth-image solvers on the 3-channel layers (the stride-2 stem's phases, the
    stride-1 layer's taps): their copies and GEMMs."""
    depth = [b for b in builds if b["solver"].startswith("triton.depth_") and "kernel" in b]
    names = {b["solver"] for b in depth}
    assert names == {"triton.depth_fwd", "triton.depth_bwd", "triton.depth_wrw"}, names
    assert {b["kernel"] for b in depth} >= {
        "space_to_depth", "filter_depth", "depth_to_space",
        "conv_fwd", "conv_bwd", "conv_wrw",
    }  # fmt: skip
    assert all(b["elf"] for b in depth), depth
    gemms = [b for b in depth if b["kernel"].startswith("conv_") and "reduce" not in b["kernel"]]
    assert all(b["wgmma"] or b["mfma"] for b in gemms), gemms


def test_every_direction_builds_for_sm90_with_wgmma(builds: list[dict]) -> None:
    cuda = [b for b in builds if b["backend"] == "cuda"]
    _depth_builds(cuda)
    cuda = [b for b in cuda if not b["solver"].startswith("triton.depth_")]
    mains = [b for b in cuda if b.get("kernel") in ("conv_fwd", "conv_bwd", "conv_wrw")]
    assert {(b["solver"], b["dtype"]) for b in mains} == {
        (s, d)
        for s in ("triton.igemm_fwd", "triton.igemm_bwd", "triton.igemm_wrw")
        for d in ("float16", "bfloat16", "float32")
    }
    for b in mains:
        assert b["elf"] and b["wgmma"], b
        assert b["meta"]["threads"] == b["block"][0] and b["meta"]["shared"] > 0, b
        assert not b["meta"]["global_scratch_size"], b
    # 3-D in both layouts, every direction
    assert {(b["solver"], b["layout"]) for b in mains if b["layout"] in ("NDHWC", "NCDHW")} == {
        (s, layout)
        for s in ("triton.igemm_fwd", "triton.igemm_bwd", "triton.igemm_wrw")
        for layout in ("NDHWC", "NCDHW")
    }
    assert any(b.get("kernel") == "repack" and b["layout"] == "NCDHW" for b in cuda)
    # TF32 backward weights on channels-last tensors: x and dy copied channels-first first
    tf32_wrw = [b["kernel"] for b in cuda if b["solver"] == "triton.igemm_wrw"
                and b["dtype"] == "float32" and b["layout"] == "NHWC"]  # fmt: skip
    assert tf32_wrw[:3] == ["repack", "repack", "conv_wrw"], tf32_wrw
    _builds_nchw_modes(cuda)
    # the split backward-weights run has its reduction kernel (split forward and backward
    # data theirs), TF32 backward data its filter transposition
    assert any(b.get("kernel") == "conv_wrw_reduce" for b in cuda)
    split = {b["solver"] for b in cuda if b.get("kernel") == "conv_split_reduce" and b["elf"]}
    assert split == {"triton.igemm_fwd", "triton.igemm_bwd"}, split
    assert any(b.get("kernel") == "conv_wtrans" and b["dtype"] == "float32" for b in cuda)


def test_every_direction_builds_for_gfx942_with_mfma(builds: list[dict]) -> None:
    hip = [b for b in builds if b["backend"] == "hip"]
    _depth_builds(hip)
    hip = [b for b in hip if not b["solver"].startswith("triton.depth_")]
    mains = [b for b in hip if b.get("kernel") in ("conv_fwd", "conv_bwd", "conv_wrw")]
    assert {(b["solver"], b["dtype"]) for b in mains} == {
        (s, d)
        for s in ("triton.igemm_fwd", "triton.igemm_bwd", "triton.igemm_wrw")
        for d in ("float16", "bfloat16")
    }
    for b in mains:
        assert b["elf"] and b["mfma"], b
        assert b["meta"]["threads"] == b["block"][0], b
    assert any(b.get("kernel") == "conv_split_reduce" and b["elf"] for b in hip)
    _builds_nchw_modes(hip)
    # fp32 is TF32, which AMD's kernels do not offer: declined with the reason
    declined = [b for b in hip if "declined" in b]
    assert declined and all("NVIDIA" in b["declined"] for b in declined)


def _builds_nchw_modes(builds: list[dict]) -> None:
    """Backward weights' NCHW modes built: the 1x1 layer reading dy and x in place (no staging
    copy) and the stem's tap columns (3 channels); backward data's spread on tensor cores."""
    spread = [b for b in builds if b.get("kernel") == "conv_bwd_spread"]
    assert spread and all(b["elf"] and (b["wgmma"] or b["mfma"]) for b in spread), spread
    wrw = [b for b in builds if b.get("kernel") == "conv_wrw" and b["layout"] == "NCHW"]
    assert {b["c"] for b in wrw} == {64, 3, 32}, wrw
    staged = {b["c"] for b in builds if b.get("kernel") == "repack"
              and b["layout"] == "NCHW" and b["solver"] == "triton.igemm_wrw"}  # fmt: skip
    assert 64 not in staged, staged
