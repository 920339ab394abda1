"""The {{name}} convolution solver family for miocore (plugin ``{{name}}``).

The names below load on first access (PEP 562): importing the package, as the plugin scan
does, imports none of its solver modules."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from miocore_{{name}}.solver import BLOCKS, {{Name}}Direct

#: Public name -> the module that defines it.
_EXPORTS = {
    "BLOCKS": "miocore_{{name}}.solver",
    "{{Name}}Direct": "miocore_{{name}}.solver",
}

__all__ = ["BLOCKS", "{{Name}}Direct"]


def __getattr__(name: str) -> Any:
    """Import the module of a public name on first access."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip this function
    return value
