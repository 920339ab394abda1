"""The tensor-map helper's argument checks, before any driver call (no GPU needed)."""

from __future__ import annotations

import pytest

from miocore import DataType, MiocoreError
from miocore.backends.cuda_tma import tiled_tensor_map


@pytest.mark.parametrize(
    ("strides", "box", "steps"),
    [
        ((128,), (64, 8, 1), (1, 1, 1)),
        ((128, 256), (64, 8), (1, 1, 1)),
        ((128, 256), (64, 8, 1), (1,)),
    ],
)
def test_mismatched_ranks_are_refused(strides: tuple, box: tuple, steps: tuple) -> None:
    with pytest.raises(MiocoreError, match="one size, box and element stride") as info:
        tiled_tensor_map(DataType.FLOAT16, 0x1000, (64, 8, 4), strides, box, steps)
    assert info.value.field == "strides"


def test_an_element_type_without_a_map_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from miocore.backends import cuda_tma

    # every miocore type has a map today: take one away to see the refusal
    monkeypatch.setattr(cuda_tma, "_DTYPES", {DataType.FLOAT16: "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"})
    with pytest.raises(MiocoreError, match="tensor maps here hold float16") as info:
        tiled_tensor_map(DataType.BFLOAT16, 0x1000, (64, 8), (512,), (64, 8), (1, 1))
    assert info.value.field == "dtype" and info.value.value == "bfloat16"


@pytest.mark.parametrize("promotion", (32, 512, -64))
def test_an_l2_promotion_the_driver_lacks_is_refused(promotion: int) -> None:
    with pytest.raises(MiocoreError, match="L2 promotion is one of 0, 64, 128, 256") as info:
        tiled_tensor_map(DataType.FLOAT16, 0x1000, (64, 8), (128,), (64, 8), (1, 1),
                         l2_promotion=promotion)  # fmt: skip
    assert info.value.field == "l2_promotion" and info.value.value == promotion
