"""The {{name}} convolution solver family for miocore (plugin ``{{name}}``)."""

from __future__ import annotations

from miocore_{{name}}.solver import BLOCKS, {{Name}}Direct

__all__ = ["BLOCKS", "{{Name}}Direct"]
