"""Drop-in convolution modules: ``torch.nn``'s own classes with only the convolution call
replaced by miocore's, so constructors, parameters, ``state_dict`` and ``repr`` are PyTorch's.

Only ``padding_mode="zeros"`` is supported (checked at construction and by ``convert``).
"""

from __future__ import annotations

from typing import Any

import torch

from miocore.errors import InvalidArgumentError
from miocore.torch.functional import convolution

__all__ = [
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "check_supported",
]


def check_supported(module: torch.nn.Module, name: str | None = None) -> None:
    """Refuse a convolution module miocore cannot run: a padding mode other than zeros."""
    mode = getattr(module, "padding_mode", "zeros")
    if mode != "zeros":
        label = name or type(module).__name__
        raise InvalidArgumentError(
            f"module {label!r} ({type(module).__name__}) pads with {mode!r}; miocore convolves"
            " with padding_mode='zeros' only (keep this layer on torch.nn, or pad the input"
            " with F.pad first)",
            field=f"{label}.padding_mode",
            value=mode,
        )


class _Conv:
    """The convolution call shared by the forward modules."""

    padding_mode: str

    def _conv_forward(
        self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        check_supported(self)  # type: ignore[arg-type]
        return convolution(
            input,
            weight,
            bias,
            self.stride,  # type: ignore[attr-defined]
            self.padding,  # type: ignore[attr-defined]
            self.dilation,  # type: ignore[attr-defined]
            self.groups,  # type: ignore[attr-defined]
        )


class Conv1d(_Conv, torch.nn.Conv1d):
    """``torch.nn.Conv1d`` through miocore (run as a 2-D convolution with H=1)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_supported(self)


class Conv2d(_Conv, torch.nn.Conv2d):
    """``torch.nn.Conv2d`` through miocore."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_supported(self)


class Conv3d(_Conv, torch.nn.Conv3d):
    """``torch.nn.Conv3d`` through miocore."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_supported(self)


class _ConvTranspose:
    """The forward shared by the transposed modules (``output_size`` as in PyTorch)."""

    def forward(self, input: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        """The layer's output; ``output_size`` picks the output padding as PyTorch does."""
        check_supported(self)  # type: ignore[arg-type]
        spatial = len(self.kernel_size)  # type: ignore[attr-defined]
        output_padding = self._output_padding(  # type: ignore[attr-defined]
            input,
            output_size,
            self.stride,  # type: ignore[attr-defined]
            self.padding,  # type: ignore[attr-defined]
            self.kernel_size,  # type: ignore[attr-defined]
            spatial,
            self.dilation,  # type: ignore[attr-defined]
        )
        return convolution(
            input,
            self.weight,  # type: ignore[attr-defined]
            self.bias,  # type: ignore[attr-defined]
            self.stride,  # type: ignore[attr-defined]
            self.padding,  # type: ignore[attr-defined]
            self.dilation,  # type: ignore[attr-defined]
            self.groups,  # type: ignore[attr-defined]
            transposed=True,
            output_padding=output_padding,
        )


class ConvTranspose1d(_ConvTranspose, torch.nn.ConvTranspose1d):
    """``torch.nn.ConvTranspose1d`` through miocore (as 2-D with H=1)."""


class ConvTranspose2d(_ConvTranspose, torch.nn.ConvTranspose2d):
    """``torch.nn.ConvTranspose2d`` through miocore."""


class ConvTranspose3d(_ConvTranspose, torch.nn.ConvTranspose3d):
    """``torch.nn.ConvTranspose3d`` through miocore."""


#: torch.nn's convolution classes and the miocore class each becomes.
REPLACEMENTS: dict[type[torch.nn.Module], type[torch.nn.Module]] = {
    torch.nn.Conv1d: Conv1d,
    torch.nn.Conv2d: Conv2d,
    torch.nn.Conv3d: Conv3d,
    torch.nn.ConvTranspose1d: ConvTranspose1d,
    torch.nn.ConvTranspose2d: ConvTranspose2d,
    torch.nn.ConvTranspose3d: ConvTranspose3d,
}
