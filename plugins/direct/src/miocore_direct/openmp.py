"""OpenMP's wait policy for the plugin's numba kernels, chosen before the first kernel starts
its threads (:func:`miocore.backends.cpu_generated.choose_wait_policy` says how and why)."""

from __future__ import annotations

from miocore.backends.cpu_generated import WAIT_POLICY_ENV, choose_wait_policy

__all__ = ["WAIT_POLICY_ENV", "choose_wait_policy"]
