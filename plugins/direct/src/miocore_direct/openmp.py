"""OpenMP's wait policy for the plugin's numba kernels: the passive policy, set before the
first kernel starts its threads (:func:`miocore.backends.cpu_generated.prefer_passive_wait`
says why)."""

from __future__ import annotations

from miocore.backends.cpu_generated import WAIT_POLICY_ENV, prefer_passive_wait

__all__ = ["WAIT_POLICY_ENV", "prefer_passive_wait"]
