"""CPU checks of ``igemm.gpu_fma``: the kernel's parameter struct, load modes, applicability,
config space, workspace and wti. No device is needed: these run in every CI job where
``miocore-igemm`` is importable.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import miocore
from miocore.testing import cpu_context

fma = pytest.importorskip("miocore_igemm.gpu_fma")

DIRECTIONS = ("forward", "backward_data", "backward_weights")


def _ctx(sms: int = 132, backend: str = "cuda") -> miocore.ExecutionContext:
    device = dataclasses.replace(cpu_context().device, backend=backend, compute_units=sms)
    return miocore.ExecutionContext(device=device)


def _problem(direction: str = "forward", dtype: str = "float32", **kw) -> miocore.ConvProblem:
    args = dict(n=2, c=64, k=64, in_spatial=(9, 11), filter_spatial=(3, 3), pads=(1, 1))
    args["layout"] = "NHWC"
    args.update(kw)
    return miocore.ConvProblem.from_sizes(direction, dtype=dtype, **args).canonical


def test_param_struct_matches_the_kernel() -> None:
    source = (fma.KERNEL_DIR / "igemm_fma.cu").read_text()
    body = re.search(r"struct MioFmaParams \{(.*?)\};", source, re.S).group(1)
    fields = []
    for line in body.splitlines():
        decl = line.split("//")[0].strip()
        if decl:
            assert decl.startswith("mio_index ") and decl.endswith(";"), decl
            fields += [f.strip() for f in decl[len("mio_index ") : -1].split(",")]
    assert tuple(fields) == fma.PARAM_FIELDS


def test_pack_params_order_and_completeness() -> None:
    values = np.frombuffer(
        fma.pack_params({f: i for i, f in enumerate(fma.PARAM_FIELDS)}), np.int64
    )
    assert list(values) == list(range(len(fma.PARAM_FIELDS)))
    with pytest.raises(ValueError):
        fma.pack_params({"n": 1})


def test_kernel_options_name_the_macros_the_source_reads() -> None:
    source = (fma.KERNEL_DIR / "igemm_fma.cu").read_text()
    solver = fma.GpuFmaIgemmSolver()
    for direction in DIRECTIONS:
        sol = solver.get_solution(_ctx(), _problem(direction))
        for opt in sol.kernels[0].options[1:]:
            macro = opt[2:].split("=")[0]
            assert f"#ifndef {macro}" in source, macro


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gemm_shape_per_direction(direction: str) -> None:
    p = _problem(direction, n=3, c=12, k=20, groups=4, in_spatial=(9, 11), strides=(2, 2))
    gm, gn, gk = fma.gemm_shape(p)
    ho, wo = p.y.lengths[2:]
    expected = {
        "forward": (3 * ho * wo, 5, 9 * 3),
        # residue classes of the stride: 4 x (3 images x 5 x 6 pixels), 2 x 2 taps at most
        "backward_data": (4 * 3 * 5 * 6, 3, 2 * 2 * 5),
        "backward_weights": (5, 9 * 3, 3 * ho * wo),
    }[direction]
    assert (gm, gn, gk) == expected


def test_load_modes_follow_layout_and_channels() -> None:
    assert fma.load_modes(_problem("forward")) == (4, 1, 4, 1)
    assert fma.load_modes(_problem("backward_data")) == (4, 1, 4, 0)
    assert fma.load_modes(_problem("backward_weights")) == (4, 0, 4, 0)
    # channels not a multiple of 4: scalar gathers for the operands that read them
    assert fma.load_modes(_problem("forward", c=3)) == (1, 1, 1, 1)
    assert fma.load_modes(_problem("backward_weights", k=6))[0] == 1
    # NCHW: scalar everywhere, row-fastest activation loads (coalesced along W)
    nchw = _problem("forward", layout="NCHW")
    assert fma.load_modes(nchw) == (1, 0, 1, 1)


def test_applicability() -> None:
    s = fma.GpuFmaIgemmSolver()
    for direction in DIRECTIONS:
        assert s.is_applicable(_ctx(), _problem(direction))
        assert s.is_applicable(_ctx(), _problem(direction, layout="NCHW", groups=2, c=6, k=4))
    half = s.is_applicable(_ctx(), _problem(dtype="float16"))
    assert not half and "float32" in half.reason
    p3 = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=4, k=4, in_spatial=(5, 5, 5), filter_spatial=(3, 3, 3), dtype="float32"
    )
    assert "2-D" in s.is_applicable(_ctx(), p3.canonical).reason


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_config_space_valid_and_default_inside(direction: str) -> None:
    s = fma.GpuFmaIgemmSolver()
    for kw in ({}, {"c": 3, "k": 5}, {"n": 32, "c": 256, "k": 512, "in_spatial": (28, 28)}):
        p = _problem(direction, **kw)
        space = s.perf_config_space(_ctx(), p)
        assert space
        assert all(s.is_valid_perf_config(_ctx(), p, c) for c in space)
        default = s.default_perf_config(_ctx(), p)
        assert default in space
        for cfg in space:
            _, _, gk = fma.gemm_shape(p)
            if cfg["split"] > 1:
                assert -(-gk // cfg["bk"]) >= 2 * cfg["split"]
            assert s.workspace_size(_ctx(), p, cfg) == (
                0
                if cfg["split"] == 1
                else cfg["split"] * p.groups * np.prod(fma.gemm_shape(p)[:2]) * 4
            )
    p = _problem(direction)
    assert not s.is_valid_perf_config(_ctx(), p, miocore.PerfConfig(bm=96, bn=64, bk=8, split=1))
    assert not s.is_valid_perf_config(_ctx(), p, miocore.PerfConfig(bm=64))


def test_backward_weights_default_splits_small_outputs() -> None:
    s = fma.GpuFmaIgemmSolver()
    p = _problem("backward_weights", n=32, c=64, k=64, in_spatial=(56, 56), filter_spatial=(1, 1))
    cfg = s.default_perf_config(_ctx(), p)
    assert cfg["split"] >= 32  # one 64x64 output tile: the reduction must spread over SMs
    sol = s.get_solution(_ctx(), p, cfg)
    assert [k.kernel_name for k in sol.kernels] == ["igemm_fma", "igemm_fma_reduce"]
    assert sol.workspace_size == s.workspace_size(_ctx(), p, cfg) > 0


def test_wti_ranks_vector_path_above_scalar() -> None:
    s = fma.GpuFmaIgemmSolver()
    big = {"n": 32, "c": 256, "k": 256, "in_spatial": (28, 28)}
    vec = s.wti(_ctx(), _problem(**big))
    scalar = s.wti(_ctx(), _problem(layout="NCHW", **big))
    assert 0 < scalar < vec <= 1


def test_strided_backward_data_counts_only_classes_with_taps() -> None:
    # 1x1, stride 2, no padding: only pixels (even, even) receive gradient; the other three
    # residue classes are zero-filled tiles with no reduction
    p = miocore.ConvProblem.from_sizes(
        "backward_data",
        n=4,
        c=64,
        k=64,
        in_spatial=(14, 14),
        filter_spatial=(1, 1),
        strides=(2, 2),
        dtype="float32",
        layout="NHWC",
    ).canonical
    assert fma.gemm_shape(p) == (4 * 4 * 7 * 7, 64, 64)
    assert fma.working_row_tiles(p, 64) * 4 == fma._row_tiles(p, 64)


def test_default_config_follows_the_wave_model() -> None:
    s = fma.GpuFmaIgemmSolver()
    for direction in DIRECTIONS:
        p = _problem(direction, n=32, c=256, k=256, in_spatial=(14, 14))
        space = s.perf_config_space(_ctx(), p)
        default = s.default_perf_config(_ctx(), p)
        same_bk = [c for c in space if c["bk"] == default["bk"]]
        if direction != "backward_weights":
            same_bk = [c for c in same_bk if c["split"] <= 4]
        best = min(fma.predict_us(p, c, 132) for c in same_bk)
        assert fma.predict_us(p, default, 132) == best > 0
