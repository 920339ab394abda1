"""The {{name}} convolution solver family for miocore (plugin ``{{name}}``).

The names below load on first access (PEP 562): importing the package, as the plugin scan
does, imports none of its solver modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from miocore import lazy_exports

if TYPE_CHECKING:
    from miocore_{{name}}.solver import BLOCKS, {{Name}}Direct

#: Public name -> the module that defines it.
_EXPORTS = {
    "BLOCKS": "miocore_{{name}}.solver",
    "{{Name}}Direct": "miocore_{{name}}.solver",
}

__all__ = ["BLOCKS", "{{Name}}Direct"]


__getattr__ = lazy_exports(__name__, _EXPORTS)
