"""OpenMP's wait policy for the plugin's numba kernels.

numba runs ``prange`` loops on GNU OpenMP, whose threads by default spin at a barrier and then
sleep. On a machine whose cores are shared (a VM's vCPUs, other processes busy), calls right
after a kernel's first run then took a fixed 8 ms per parallel region for tens of calls (a
0.03 ms depthwise layer measured 24 ms), so find recorded the wrong winner. With the passive
policy the threads sleep at once: no stall, a few µs of wake-up per region. OpenMP reads the
setting when it loads, so it is given before the first kernel runs, and only where the caller
has not chosen a policy themselves (``OMP_WAIT_POLICY`` set, even to ``active``, is kept).
"""

from __future__ import annotations

import os

WAIT_POLICY_ENV = "OMP_WAIT_POLICY"


def prefer_passive_wait() -> None:
    """Make OpenMP threads sleep at once when idle, unless ``OMP_WAIT_POLICY`` is set."""
    os.environ.setdefault(WAIT_POLICY_ENV, "PASSIVE")
