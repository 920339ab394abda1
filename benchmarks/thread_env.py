"""Thread counts fixed before numpy or torch load: every BLAS and OpenMP pool of a benchmark's
process then gets the same size. Imports nothing heavy."""

from __future__ import annotations

import os
import sys

_POOL_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def threads_from_argv(default: int = 1) -> int:
    """``--threads N`` of the command line (else ``default``), written into the pool-size
    variables the BLAS and OpenMP libraries read when they load."""
    threads = default
    if "--threads" in sys.argv:
        threads = int(sys.argv[sys.argv.index("--threads") + 1])
    for name in _POOL_VARIABLES:
        os.environ[name] = str(threads)
    return threads
