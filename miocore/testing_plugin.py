"""Kept so plugins written against miocore 0.1 keep working: the pytest plugin now lives in
:mod:`miocore.testing.plugin`."""

from miocore.testing.plugin import *  # noqa: F403
from miocore.testing.plugin import gpu_device  # noqa: F401
