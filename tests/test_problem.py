"""Problems: validation, canonical (transposed) form, and MIOpen's FindDb key on real rows."""

from __future__ import annotations

import collections

import pytest

from miocore import (
    ConvolutionDescriptor,
    ConvProblem,
    Direction,
    InvalidProblemError,
    MiocoreError,
    TensorDescriptor,
    corpus,
)


def _corpus_rows() -> tuple:
    if corpus.find_corpus() is None:
        pytest.skip(
            "the problem corpus (../shared/corpus/) is not beside this checkout; "
            "set MIOCORE_CORPUS to run the corpus tests"
        )
    return corpus.load_rows()


def test_design_guide_examples() -> None:
    x = TensorDescriptor("float32", (64, 64, 56, 56))
    w = TensorDescriptor("float32", (64, 64, 3, 3))
    conv = ConvolutionDescriptor(pads=(1, 1))
    p = ConvProblem("forward", x=x, w=w, y=conv.output_descriptor(x, w), conv=conv)
    assert p.key == "64-56-56-3x3-64-56-56-64-1x1-1x1-1x1-0-NCHW-FP32-F"
    x = TensorDescriptor("float16", (32, 256, 56, 56), layout="NHWC")
    w = TensorDescriptor("float16", (512, 256, 1, 1), layout="NHWC")
    conv = ConvolutionDescriptor(strides=(2, 2))
    p = ConvProblem("backward_data", x=x, w=w, y=conv.output_descriptor(x, w), conv=conv)
    assert p.key == "512-28-28-1x1-256-56-56-32-0x0-2x2-1x1-0-NHWC-NHWC-NHWC-FP16-B"


def test_key_matches_miopen_on_corpus() -> None:
    rows = _corpus_rows()
    sample = corpus.sample_rows(8000, seed=1)  # 24,000 rows, every stratum represented
    kinds = collections.Counter()
    for row in sample:
        p = corpus.problem_from_row(row)
        assert p.key == row["miopen_key"], row
        assert ConvProblem.from_key(row["miopen_key"]) == p
        kinds[(row["dir"], row["layout"], row["dtype"], row["groups"] > 1)] += 1
    assert len(sample) >= 20000
    # every direction, layout, dtype and grouping that the corpus has is in the sample
    assert set(kinds) == {
        (r["dir"], r["layout"], r["dtype"], r["groups"] > 1) for r in rows if r["consistent"]
    }


def test_inconsistent_corpus_rows_are_rejected_with_the_field() -> None:
    bad = [r for r in _corpus_rows() if not r["consistent"]]
    assert len(bad) == 435
    for row in bad:
        with pytest.raises(MiocoreError) as info:
            corpus.problem_from_row(row)
        assert info.value.field is not None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"x": TensorDescriptor("float32", (2, 6, 8, 8))}, "w.lengths"),
        ({"y": TensorDescriptor("float32", (2, 4, 7, 8))}, "y.lengths"),
        ({"y": TensorDescriptor("float32", (3, 4, 8, 8))}, "y.lengths"),
        ({"y": TensorDescriptor("float32", (2, 5, 8, 8))}, "y.lengths"),
        ({"w": TensorDescriptor("float16", (4, 4, 3, 3))}, "dtype"),
        ({"w": TensorDescriptor("float32", (4, 4, 3, 3, 3))}, "w.lengths"),
    ],
)
def test_bad_problems_name_the_field(change: dict, field: str) -> None:
    parts = {
        "x": TensorDescriptor("float32", (2, 4, 8, 8)),
        "w": TensorDescriptor("float32", (4, 4, 3, 3)),
        "y": TensorDescriptor("float32", (2, 4, 8, 8)),
    }
    parts.update(change)
    with pytest.raises(InvalidProblemError) as info:
        ConvProblem("forward", conv=ConvolutionDescriptor(pads=(1, 1)), **parts)
    assert info.value.field == field


def test_bad_direction_and_types() -> None:
    x = TensorDescriptor("float32", (1, 1, 3, 3))
    with pytest.raises(InvalidProblemError, match="direction"):
        ConvProblem("sideways", x=x, w=TensorDescriptor("float32", (1, 1, 1, 1)), y=x)
    with pytest.raises(InvalidProblemError) as info:
        ConvProblem("forward", x=x, w=(1, 1, 1, 1), y=x)  # type: ignore[arg-type]
    assert info.value.field == "w"
    with pytest.raises(InvalidProblemError) as info:
        ConvProblem(
            "forward",
            x=x,
            w=TensorDescriptor("float32", (1, 2, 1, 1)),
            y=x,
            conv=ConvolutionDescriptor(groups=2),
        )
    assert info.value.field == "w.lengths"


def test_grouped_key_suffix_and_directions() -> None:
    p = ConvProblem.from_sizes(
        "W", n=3, c=8, k=12, in_spatial=(9, 9), filter_spatial=(3, 3), strides=(2, 2), groups=4
    )
    assert p.direction is Direction.BACKWARD_WEIGHTS
    assert p.key == "12-4-4-3x3-8-9-9-3-0x0-2x2-1x1-0-NCHW-FP32-W_g4"
    assert p.flops == 2 * 3 * 12 * 2 * 16 * 9


def test_transposed_problem_is_the_opposite_direction_with_x_and_y_swapped() -> None:
    x = TensorDescriptor("float32", (2, 8, 5, 5))
    w = TensorDescriptor("float32", (8, 3, 3, 3))
    conv = ConvolutionDescriptor(pads=(1, 1), strides=(2, 2), mode="transpose", output_pads=(1, 1))
    y = conv.output_descriptor(x, w)
    assert y.lengths == (2, 3, 10, 10)
    p = ConvProblem("forward", x=x, w=w, y=y, conv=conv)
    canon = p.canonical
    assert canon.direction is Direction.BACKWARD_DATA
    assert canon.x == y and canon.y == x and canon.conv.mode == "conv"
    assert p.key == canon.key == "8-5-5-3x3-3-10-10-2-1x1-2x2-1x1-0-NCHW-FP32-B"
    with pytest.raises(InvalidProblemError, match="transposed"):
        ConvProblem("forward", x=x, w=w, y=TensorDescriptor("float32", (2, 3, 9, 9)), conv=conv)


def test_network_config_distinguishes_strides() -> None:
    packed = ConvProblem.from_sizes("F", n=1, c=3, k=4, in_spatial=(4, 4), filter_spatial=(1, 1))
    strided_x = TensorDescriptor("float32", (1, 3, 4, 4), strides=(64, 16, 4, 1))
    other = ConvProblem("F", x=strided_x, w=packed.w, y=packed.y, conv=packed.conv)
    assert packed.key == other.key
    assert packed.network_config != other.network_config


def test_three_d_key_and_from_key() -> None:
    p = ConvProblem.from_sizes(
        "F",
        n=2,
        c=4,
        k=6,
        in_spatial=(3, 8, 9),
        filter_spatial=(3, 3, 3),
        pads=(1, 1, 1),
        dtype="bfloat16",
        layout="NDHWC",
    )
    assert p.key == "4-3-8-9-3x3x3-6-3-8-9-2-1x1x1-1x1x1-1x1x1-0-NDHWC-NDHWC-NDHWC-BF16-F"
    assert ConvProblem.from_key(p.key) == p
    with pytest.raises(InvalidProblemError) as info:
        ConvProblem.from_key("not-a-key")
    assert info.value.field == "key"


def test_problem_channel_mismatch_from_nhwc_ordered_lengths_hints_at_logical_order() -> None:
    # Lengths written in memory order (N, H, W, C) with layout NHWC: x seems to have 12
    # channels where w expects 3. The error names w's lengths and says lengths are logical.
    x = TensorDescriptor("float32", (1, 12, 12, 3), layout="NHWC")
    w = TensorDescriptor("float32", (8, 3, 3, 3), layout="NHWC")
    y = TensorDescriptor("float32", (1, 8, 10, 10), layout="NHWC")
    with pytest.raises(InvalidProblemError) as info:
        ConvProblem("forward", x=x, w=w, y=y)
    message = str(info.value)
    assert "x has 12 channels but w expects 3" in message
    assert "logical order (N, C, H, W) whatever the layout, here NHWC" in message
    assert info.value.field == "w.lengths" and info.value.value == (8, 3, 3, 3)
    # The same sizes in logical order build the problem.
    good = TensorDescriptor("float32", (1, 3, 12, 12), layout="NHWC")
    assert ConvProblem("forward", x=good, w=w, y=y).key.endswith("-NHWC-FP32-F")
    # A plain mismatch in NCHW, with nothing pointing at a layout mix-up, gets no hint.
    with pytest.raises(InvalidProblemError) as info:
        ConvProblem(
            "forward",
            x=TensorDescriptor("float32", (1, 5, 12, 12)),
            w=TensorDescriptor("float32", (8, 3, 3, 3)),
            y=TensorDescriptor("float32", (1, 8, 10, 10)),
        )
    assert "x has 5 channels" in str(info.value) and "logical order" not in str(info.value)
