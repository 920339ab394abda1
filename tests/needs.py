"""Skip marks for tests that need solver plugins: the tox matrix runs the core tests with no
plugin (``core``), with each family alone, and with all of them (``all``)."""

from __future__ import annotations

import pytest

import miocore


def plugins(*names: str) -> pytest.MarkDecorator:
    """Skip unless every named plugin (``direct``, ``gemm``, ...) is installed."""
    have = {reg.plugin for reg in miocore.solvers()}
    missing = [name for name in names if name not in have]
    return pytest.mark.skipif(
        bool(missing), reason=f"needs the {', '.join(missing)} plugin(s) installed"
    )
