"""The Triton kernel sources in Triton's interpreter (CPU) against miocore's float64 reference.

Each case plans with the solver (a context shaped like an H100), takes the launch its
``get_solution`` describes (kernel, options, grid) and runs that very kernel and those very
options interpreted, outputs poisoned with NaN first. Covered: every direction; 1x1, 3x3 and
asymmetric filters; strides, padding, dilation; channel counts that are not a multiple of
the reduction slice or of the tile; NHWC and NCHW; backward weights split and unsplit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from triton_helpers import from_buffer, gpu_ctx, interpreted_kernels, to_buffer

import miocore
from miocore import PerfConfig, reference
from miocore.testing import TOLERANCES

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _solver(direction: str) -> Any:
    from miocore_triton import TritonBackwardData, TritonBackwardWeights, TritonForward

    return {
        "forward": TritonForward,
        "backward_data": TritonBackwardData,
        "backward_weights": TritonBackwardWeights,
    }[direction]()


def _options(kernel: miocore.KernelInfo) -> tuple[dict[str, Any], dict[str, Any]]:
    """(constexprs, compile options) of a KernelInfo; the sig.* types are the buffers'."""
    from miocore_triton.builder import parse_options

    values = parse_options(kernel.options)
    compile_options = {k: values.pop(k) for k in ("num_warps", "num_stages")}
    return {k: v for k, v in values.items() if not k.startswith("sig.")}, compile_options


def run_interpreted(
    p: miocore.ConvProblem,
    cfg: PerfConfig | None = None,
    mode: str = "exact",
    seed: int = 0,
    solver: Any = None,
) -> float:
    """Relative error of the solver's launch (the direction's GEMM solver unless ``solver``),
    interpreted, against the reference."""
    import torch

    ctx = gpu_ctx(mode)
    solver = solver or _solver(p.direction.value)
    assert solver.is_applicable(ctx, p), solver.is_applicable(ctx, p).reason
    solution = solver.get_solution(ctx, p, cfg)
    inputs = reference.random_inputs(p, seed)
    out = p.direction.output_tensor
    bufs = {}
    for name in ("x", "w", "y"):
        desc = getattr(p, name)
        values = np.full(desc.lengths, np.nan) if name == out else inputs[name]
        bufs[name] = to_buffer(desc, values)
    # every launch of the plan, its pointers resolved as the invoker does: a tensor by name,
    # or a typed view of the workspace at an offset
    from miocore_triton.builder import parse_options
    from miocore_triton.launches import plan

    steps, size = plan(ctx, p, cfg or solver.default_perf_config(ctx, p), depth=solver.depth)
    assert [st.kernel for st in steps] == list(solution.kernels)
    workspace = torch.zeros(max(16, size), dtype=torch.uint8)
    types = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    for step in steps:
        kernel = step.kernel
        constexprs, _ = _options(kernel)
        values = parse_options(kernel.options)
        kernels = interpreted_kernels(kernel.source.split("/", 1)[1])
        fn = getattr(kernels, kernel.kernel_name)
        pointers = [a for a in fn.arg_names if str(values.get(f"sig.{a}", "")).startswith("*")]
        args = []
        for arg_name, pointer in zip(pointers, step.pointers, strict=True):
            if isinstance(pointer, int):
                kind = values[f"sig.{arg_name}"].lstrip("*")
                args.append(workspace[pointer:].view(types[kind]))
            elif pointer == "none":
                args.append(workspace.view(torch.float32))
            else:
                args.append(bufs[pointer])
        if step.rows is not None:
            args.append(step.rows)
        fn[kernel.grid](*args, **constexprs)
    got = from_buffer(getattr(p, out), bufs[out])
    expected = reference.convolution(p, **{k: v for k, v in inputs.items() if k != out})
    assert np.isfinite(got).all(), "an output element was not written"
    return reference.relative_error(got, expected)


def _problem(direction: str, dtype: str = "float16", layout: str = "NHWC", **kw: Any):
    sizes = {
        "n": 2,
        "c": 24,
        "k": 40,
        "in_spatial": (7, 9),
        "filter_spatial": (3, 3),
        "pads": (1, 1),
    }
    sizes.update(kw)
    return miocore.ConvProblem.from_sizes(direction, dtype=dtype, layout=layout, **sizes)


CASES = {
    "3x3": {},
    "1x1": {"filter_spatial": (1, 1), "pads": (0, 0)},
    "strided": {"strides": (2, 2), "in_spatial": (9, 8)},
    "dilated": {"dilations": (2, 1), "pads": (2, 1)},
    "asymmetric": {"filter_spatial": (1, 3), "pads": (0, 2), "strides": (1, 2)},
    "odd_channels": {"c": 5, "k": 3, "filter_spatial": (5, 5), "pads": (2, 2)},
    "strided_unpadded": {"strides": (3, 2), "pads": (0, 0), "in_spatial": (11, 10)},
    "strided_dilated": {"strides": (2, 2), "dilations": (2, 1), "pads": (2, 1)},
    "strided_1x1": {"filter_spatial": (1, 1), "pads": (0, 0), "strides": (2, 2)},
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_fp16_channels_last_matches_the_reference(direction: str, case: str) -> None:
    p = _problem(direction, **CASES[case])
    err = run_interpreted(p)
    assert err <= TOLERANCES[p.dtype], err


NCHW_CASES = {
    "strided": {"strides": (2, 1)},
    "3x3": {"n": 3},  # row tiles inside each of three images of 63 pixels
    "1x1": {"n": 3, "filter_spatial": (1, 1), "pads": (0, 0)},  # read in place
    "1x1_strided": {"filter_spatial": (1, 1), "pads": (0, 0), "strides": (2, 2)},
}


@pytest.mark.parametrize("case", sorted(NCHW_CASES))
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_nchw_runs_right(direction: str, case: str) -> None:
    p = _problem(direction, layout="NCHW", **NCHW_CASES[case])
    assert run_interpreted(p) <= TOLERANCES[p.dtype]


@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_tf32_in_the_tf32_math_mode(direction: str) -> None:
    p = _problem(direction, dtype="float32")
    # TF32's bound (10 mantissa bits in, fp32 sums); the interpreter computes in fp32
    assert run_interpreted(p, mode="tf32") <= 5e-3


def assert_splits_agree(p: miocore.ConvProblem) -> None:
    """Backward weights' unsplit and most split configurations both match the reference."""
    space = _solver("backward_weights").perf_config_space(gpu_ctx(), p)
    splits = sorted({c["split"] for c in space})
    assert splits[0] == 1 and len(splits) > 1, splits
    for split in (splits[0], splits[-1]):
        cfg = next(c for c in space if c["split"] == split)
        assert run_interpreted(p, cfg) <= TOLERANCES[p.dtype], cfg


def test_backward_weights_split_equals_unsplit() -> None:
    p = _problem("backward_weights", n=3, in_spatial=(12, 12))
    assert_splits_agree(p)


@pytest.mark.parametrize(
    ("case", "in_place"),
    [
        ({"filter_spatial": (1, 1), "pads": (0, 0)}, ("x", "y")),  # 1x1: both in place
        ({}, ("y",)),  # 3x3: dy in place, x staged channels-last
    ],
)
def test_nchw_backward_weights_reads_in_place_and_splits_right(
    case: dict[str, Any], in_place: tuple[str, ...]
) -> None:
    """NCHW backward weights reads dy (and a 1x1 layer's x) where they lie, its reduction
    slices inside one image: 9 x 13 pixels are two slices of 64, the second masked, and
    every split of three images must add up the same."""
    from miocore_triton.launches import staged

    p = _problem("backward_weights", layout="NCHW", n=3, in_spatial=(9, 13), **case)
    assert not set(staged(p)) & set(in_place), staged(p)
    assert_splits_agree(p)


@pytest.mark.parametrize(
    "case", ["3x3", "strided", "dilated", "asymmetric", "odd_channels", "strided_dilated"]
)
def test_tf32_nchw_backward_weights_reads_both_inputs_in_place(case: str) -> None:
    """TF32 backward weights on NCHW reads dy and x where they lie (both operands with the
    pixels, the reduction, innermost, the order TF32 instructions read), x through its own
    strides with every tap's border masked; unsplit and split match the reference."""
    from miocore_triton.launches import staged

    p = _problem("backward_weights", dtype="float32", layout="NCHW", n=3, **CASES[case])
    assert staged(p) == ()
    space = _solver("backward_weights").perf_config_space(gpu_ctx("tf32"), p)
    splits = sorted({c["split"] for c in space})
    for split in (splits[0], splits[-1]):
        cfg = next(c for c in space if c["split"] == split)
        assert run_interpreted(p, cfg, mode="tf32") <= 5e-3, cfg


@pytest.mark.parametrize("case", ["3x3", "1x1", "strided", "dilated", "odd_channels", "mixed"])
def test_tf32_channels_last_backward_weights_copies_its_inputs_channels_first(case: str) -> None:
    """TF32 backward weights on channels-last tensors copies x and dy to packed
    channels-first order and reads the copies in place (both operands with the pixels
    innermost); "mixed": an NCHW dy is read where it lies, only x copied. Unsplit and split
    match the reference."""
    from miocore_triton.geometry import wrw_channels_first

    p = _problem("backward_weights", dtype="float32", n=3, **CASES.get(case, {}))
    if case == "mixed":
        nchw_y = miocore.TensorDescriptor(p.dtype, p.y.lengths, layout="NCHW")
        p = miocore.ConvProblem(p.direction, x=p.x, w=p.w, y=nchw_y, conv=p.conv)
    assert wrw_channels_first(p) == (("x",) if case == "mixed" else ("x", "y"))
    space = _solver("backward_weights").perf_config_space(gpu_ctx("tf32"), p)
    splits = sorted({c["split"] for c in space})
    for split in (splits[0], splits[-1]):
        cfg = next(c for c in space if c["split"] == split)
        assert run_interpreted(p, cfg, mode="tf32") <= 5e-3, cfg


DEPTH_CASES = {
    "resnet_stem": {"c": 3, "filter_spatial": (7, 7), "pads": (3, 3), "strides": (2, 2)},
    "efficientnet_stem": {"c": 3, "filter_spatial": (3, 3), "pads": (1, 1), "strides": (2, 2)},
    "convnext_stem": {"c": 3, "filter_spatial": (4, 4), "pads": (0, 0), "strides": (4, 4)},
    # rows and columns strided differently, padding on one side only, a last input row and
    # column no output reaches (their dx is zero), 5 channels (20 depth channels: 32)
    "uneven": {"c": 5, "filter_spatial": (3, 5), "pads": (0, 2), "strides": (3, 2)},
    # stride 1: the taps folded (forward and backward weights only)
    "vgg_first": {"c": 3, "filter_spatial": (3, 3), "pads": (1, 1)},
    "dilated_taps": {"c": 2, "filter_spatial": (3, 3), "pads": (1, 2), "dilations": (2, 3)},
    "one_by_one": {"c": 7, "filter_spatial": (1, 1), "pads": (0, 0)},
}


def _depth_solver(direction: str) -> Any:
    from miocore_triton.solvers import SOLVERS

    return next(s for s in SOLVERS if s.depth and s.direction.value == direction)


#: A stride-1 layer's depth image folds its overlapping taps: no backward data.
TAPS_CASES = ("vgg_first", "dilated_taps", "one_by_one")


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize(
    ("direction", "case"),
    [
        (direction, case)
        for direction in ("forward", "backward_data", "backward_weights")
        for case in sorted(DEPTH_CASES)
        if direction != "backward_data" or case not in TAPS_CASES
    ],
)
def test_few_channel_layers_run_as_their_depth_image(
    direction: str, case: str, layout: str
) -> None:
    """``triton.depth_*``: x and w copied into the depth image (a stride's phases, or a
    stride-1 layer's taps), the stride-1 GEMM on it, a backward pass's output copied back;
    the default and the most split configuration match the reference (every dx and dw element
    written, the ones no output reaches too)."""
    p = _problem(direction, layout=layout, n=2, k=24, in_spatial=(17, 15), **DEPTH_CASES[case])
    solver = _depth_solver(direction)
    ctx = gpu_ctx()
    assert solver.is_applicable(ctx, p), solver.is_applicable(ctx, p).reason
    space = solver.perf_config_space(ctx, p)
    for cfg in (None, max(space, key=lambda c: c["split"])):
        assert run_interpreted(p, cfg, solver=solver) <= TOLERANCES[p.dtype], cfg


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_depth_images_in_bfloat16(direction: str, layout: str) -> None:
    """bf16 through the depth image: its copies move 16-bit elements as fp16 ones do."""
    p = _problem(direction, dtype="bfloat16", layout=layout, n=2, k=24, in_spatial=(17, 15),
                 **DEPTH_CASES["resnet_stem"])  # fmt: skip
    assert run_interpreted(p, solver=_depth_solver(direction)) <= TOLERANCES[p.dtype]


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_depth_images_in_tf32(direction: str, layout: str) -> None:
    """TF32 through the depth image; backward weights then copies the image and dy
    channels-first as well (its TF32 operands want the pixels innermost)."""
    p = _problem(direction, dtype="float32", layout=layout, n=2, k=24, in_spatial=(17, 15),
                 **DEPTH_CASES["resnet_stem"])  # fmt: skip
    assert run_interpreted(p, mode="tf32", solver=_depth_solver(direction)) <= 5e-3


@pytest.mark.parametrize("layout", ["NDHWC", "NCDHW"])
@pytest.mark.parametrize(
    ("direction", "kw"),
    [
        # the 3-D U-Net's first layer: one channel, 3x3x3, its 27 taps folded
        ("forward", {"c": 1, "filter_spatial": (3, 3, 3), "pads": (1, 1, 1)}),
        ("backward_weights", {"c": 1, "filter_spatial": (3, 3, 3), "pads": (1, 1, 1)}),
        # a strided 3-D layer's phases (every direction)
        ("forward", {"c": 2, "filter_spatial": (3, 3, 3), "pads": (1, 0, 1), "strides": (2, 2, 1)}),
        ("backward_data", {"c": 2, "filter_spatial": (3, 2, 3), "pads": (1, 0, 1),
                           "strides": (2, 2, 1)}),
        ("backward_weights", {"c": 2, "filter_spatial": (3, 3, 3), "pads": (0, 1, 1),
                              "strides": (1, 2, 2)}),
    ],
)  # fmt: skip
def test_3d_few_channel_layers_run_as_their_depth_image(
    direction: str, kw: dict, layout: str
) -> None:
    p = _problem3d(direction, layout=layout, **{"k": 16, **kw})
    solver = _depth_solver(direction)
    assert solver.is_applicable(gpu_ctx(), p), solver.is_applicable(gpu_ctx(), p).reason
    assert run_interpreted(p, solver=solver) <= TOLERANCES[p.dtype]


def test_depth_images_decline_what_they_do_not_serve() -> None:
    ctx = gpu_ctx()
    for direction, kw, reason in (
        ("backward_weights", {"c": 16, "strides": (2, 2)}, "already a whole slice"),
        ("backward_data", {"c": 3}, "overlapping taps"),
        ("forward", {"c": 3, "strides": (2, 2), "dilations": (2, 2), "pads": (2, 2)}, "dilation"),
        ("forward", {"c": 5, "strides": (4, 4), "filter_spatial": (4, 4), "pads": (0, 0)},
         "depth channels"),
        ("backward_weights", {"c": 3, "filter_spatial": (5, 5), "pads": (2, 2)}, "depth channels"),
    ):  # fmt: skip
        q = _problem(direction, n=2, k=24, in_spatial=(17, 15), **kw)
        assert reason in _depth_solver(direction).is_applicable(ctx, q).reason, kw


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_stem_backward_weights_takes_taps_as_columns_split_or_not(layout: str) -> None:
    """A stem (3 channels, 7x7, stride 2): the columns are the 147 (tap, channel) pairs,
    gathered from x per column; every split adds up the same."""
    from miocore_triton.geometry import wrw_columns, wrw_tap_columns

    p = _problem(
        "backward_weights", layout=layout, n=4, c=3, k=8, in_spatial=(29, 27),
        filter_spatial=(7, 7), pads=(3, 3), strides=(2, 2),
    )  # fmt: skip
    assert wrw_tap_columns(p) and wrw_columns(p) == 147
    assert_splits_agree(p)


def test_stem_backward_weights_in_tf32() -> None:
    p = _problem(
        "backward_weights", dtype="float32", n=2, c=3, k=8, in_spatial=(13, 11),
        filter_spatial=(7, 7), pads=(3, 3), strides=(2, 2),
    )  # fmt: skip
    assert run_interpreted(p, mode="tf32") <= 5e-3


def test_every_tile_of_a_forward_space_runs_right() -> None:
    p = _problem("forward", c=64, k=64, in_spatial=(8, 8))
    ctx = gpu_ctx()
    space = _solver("forward").perf_config_space(ctx, p)
    assert len(space) >= 3
    for cfg in space:
        assert run_interpreted(p, cfg) <= TOLERANCES[p.dtype], cfg


@pytest.mark.parametrize(
    ("strides", "in_spatial"),
    [
        ((2, 2), (9, 8)),  # an odd height: the last block's zero row falls outside
        ((3, 2), (11, 10)),  # two zero rows under each result
        ((2, 4), (8, 13)),  # three zeros after each result, the last block cut at the edge
        ((2, 1), (7, 9)),  # no zeros along the rows
    ],
)
def test_nchw_strided_1x1_backward_data_spreads_results_and_zeros(
    strides: tuple[int, int], in_spatial: tuple[int, int]
) -> None:
    """dy read in place, every dx element written once by the spread epilogue (dx is
    poisoned with NaN first, so a missed zero fails)."""
    from miocore_triton.geometry import spreads
    from miocore_triton.launches import staged

    p = _problem(
        "backward_data", layout="NCHW", n=3, c=24, k=32, filter_spatial=(1, 1), pads=(0, 0),
        strides=strides, in_spatial=in_spatial,
    )  # fmt: skip
    assert spreads(p) and staged(p) == ()
    assert run_interpreted(p) <= TOLERANCES[p.dtype]


def test_every_tile_of_a_spread_space_runs_right() -> None:
    p = _problem(
        "backward_data", layout="NCHW", n=2, c=40, k=64, filter_spatial=(1, 1), pads=(0, 0),
        strides=(2, 2), in_spatial=(14, 18),
    )  # fmt: skip
    space = _solver("backward_data").perf_config_space(gpu_ctx(), p)
    assert len(space) >= 3
    for cfg in space:
        assert run_interpreted(p, cfg) <= TOLERANCES[p.dtype], cfg


def test_nchw_tf32_backward_data_stages_dy_and_transposes_w() -> None:
    p = _problem("backward_data", dtype="float32", layout="NCHW", strides=(2, 2))
    assert run_interpreted(p, mode="tf32") <= 5e-3


def _problem3d(direction: str, dtype: str = "float16", layout: str = "NDHWC", **kw: Any):
    sizes = {
        "n": 2,
        "c": 12,
        "k": 20,
        "in_spatial": (5, 6, 7),
        "filter_spatial": (3, 3, 3),
        "pads": (1, 1, 1),
    }
    sizes.update(kw)
    return miocore.ConvProblem.from_sizes(direction, dtype=dtype, layout=layout, **sizes)


CASES_3D = {
    "3x3x3": {},
    "1x1x1": {"filter_spatial": (1, 1, 1), "pads": (0, 0, 0)},
    # UNet's transposed-conv upsampling is a 2x2x2 stride-2 backward data: one tap a phase
    "2x2x2_strided": {"filter_spatial": (2, 2, 2), "pads": (0, 0, 0), "strides": (2, 2, 2)},
    "strided_odd": {"strides": (2, 1, 2), "in_spatial": (7, 5, 6), "c": 5, "k": 3},
    "dilated_depth": {"dilations": (2, 1, 1), "pads": (2, 1, 1), "filter_spatial": (3, 1, 3)},
    "strided_dilated": {"strides": (2, 2, 1), "dilations": (2, 1, 1), "pads": (2, 1, 1)},
}


@pytest.mark.parametrize("case", sorted(CASES_3D))
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_3d_channels_last_matches_the_reference(direction: str, case: str) -> None:
    p = _problem3d(direction, **CASES_3D[case])
    assert run_interpreted(p) <= TOLERANCES[p.dtype]


@pytest.mark.parametrize("case", ["3x3x3", "1x1x1", "2x2x2_strided"])
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_3d_channels_first_matches_the_reference(direction: str, case: str) -> None:
    p = _problem3d(direction, layout="NCDHW", **CASES_3D[case])
    assert run_interpreted(p) <= TOLERANCES[p.dtype]


@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_3d_tf32_in_the_tf32_math_mode(direction: str) -> None:
    # (bf16 is checked on the GPU: these helpers' buffers do not carry it into the interpreter)
    p = _problem3d(direction, dtype="float32", strides=(2, 1, 1))
    assert run_interpreted(p, mode="tf32") <= 5e-3


def test_3d_backward_weights_split_equals_unsplit() -> None:
    p = _problem3d("backward_weights", n=3, in_spatial=(6, 8, 8))
    assert_splits_agree(p)


@pytest.mark.parametrize("direction", ["forward", "backward_data"])
@pytest.mark.parametrize(
    ("layout", "mode", "kw"),
    [
        ("NDHWC", "exact", {}),  # 27 taps x 1 slice: shares of 14 / 7 iterations, the last short
        ("NCDHW", "exact", {"c": 40, "k": 24}),  # channels-first partials, image row tiles
        ("NCDHW", "tf32", {"c": 40, "k": 32}),  # TF32's copies and tiles
    ],
)
def test_split_matches_the_reference(direction: str, layout: str, mode: str, kw: dict) -> None:
    # a split forward or backward-data run: each share's fp32 partials in the workspace,
    # summed into the output by conv_split_reduce in its own strides; the unsplit run and the
    # most shares both right
    dtype = "float32" if mode == "tf32" else "float16"
    p = _problem3d(direction, dtype=dtype, layout=layout, **kw)
    ctx = gpu_ctx(mode)
    space = _solver(direction).perf_config_space(ctx, p)
    splits = sorted({c["split"] for c in space})
    assert splits[0] == 1 and len(splits) > 1, splits
    tol = 5e-3 if mode == "tf32" else TOLERANCES[p.dtype]
    for split in (splits[0], splits[-1]):
        cfg = next(c for c in space if c["split"] == split)
        assert run_interpreted(p, cfg, mode=mode) <= tol, cfg


def test_2d_nchw_backward_data_split_at_stride_one_and_dilated() -> None:
    for kw in ({}, {"dilations": (2, 2), "pads": (2, 2), "strides": (2, 2)}):
        p = _problem("backward_data", layout="NCHW", n=1, c=48, k=64, **kw)
        space = _solver("backward_data").perf_config_space(gpu_ctx(), p)
        cfg = max(space, key=lambda c: c["split"])
        assert cfg["split"] > 1
        assert run_interpreted(p, cfg) <= TOLERANCES[p.dtype], (kw, cfg)


def test_splits_only_where_tiles_are_few_and_never_phased() -> None:
    from miocore_triton.geometry import GEMM_SPLIT_FILL, gemm_tiles

    ctx = gpu_ctx()
    for direction, name in (("forward", "conv_fwd"), ("backward_data", "conv_bwd")):
        solver = _solver(direction)
        few = _problem3d(direction, n=1, c=64, k=64, in_spatial=(8, 8, 8))
        many = _problem(direction, n=32, c=64, k=64, in_spatial=(56, 56))
        assert {c["split"] for c in solver.perf_config_space(ctx, few)} > {1}
        assert {c["split"] for c in solver.perf_config_space(ctx, many)} == {1}
        # the default splits the few tiles into at most one program per SM
        default = solver.default_perf_config(ctx, few)
        programs = gemm_tiles(few, default["bm"], default["bn"])
        assert default["split"] > 1
        assert programs * default["split"] <= ctx.device.compute_units
        same_tile = [
            c["split"]
            for c in solver.perf_config_space(ctx, few)
            if all(c[k] == default[k] for k in ("bm", "bn", "bk", "warps", "stages"))
            and programs * c["split"] <= ctx.device.compute_units
        ]
        assert default["split"] == max(same_tile)  # the most shares within the budget
        assert solver.default_perf_config(ctx, many)["split"] == 1
        for cfg in solver.perf_config_space(ctx, few):
            assert cfg["split"] == 1 or (
                gemm_tiles(few, cfg["bm"], cfg["bn"]) <= GEMM_SPLIT_FILL * ctx.device.compute_units
            )
            kernels = solver.get_solution(ctx, few, cfg).kernels
            names = [k.kernel_name for k in kernels]
            assert names[-1] == ("conv_split_reduce" if cfg["split"] > 1 else name)
            main = kernels[names.index(name)]
            assert main.grid[1:] == ((cfg["split"],) if cfg["split"] > 1 else main.grid[1:])
    # stride phases have their own grid axis and loops: never split
    phased = _problem("backward_data", n=1, c=64, k=64, strides=(2, 2), in_spatial=(8, 8))
    space = _solver("backward_data").perf_config_space(ctx, phased)
    assert {c["split"] for c in space} == {1}


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_bfloat16_matches_the_reference(direction: str, layout: str) -> None:
    """bf16 in every direction and layout, stride 2 backward data among them (the interpreter's
    bf16 products widened first: ``triton_helpers``)."""
    strides = (2, 2) if direction == "backward_data" else (1, 1)
    p = _problem(direction, dtype="bfloat16", layout=layout, n=2, c=32, k=24, in_spatial=(9, 7),
                 strides=strides)  # fmt: skip
    assert run_interpreted(p) <= TOLERANCES[p.dtype]
