"""A plugin whose import fails: a dependency it needs is missing."""

import miocore_fake_dependency_that_is_not_installed  # noqa: F401
