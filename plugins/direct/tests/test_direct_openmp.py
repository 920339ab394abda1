"""The numba kernels' OpenMP wait policy (see ``miocore_direct.openmp``): OpenMP's own where the
GEMMs run on OpenMP teams too, passive where they run on another pool, the caller's where the
caller chose one; checked in fresh processes, since OpenMP reads it on loading."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_PROBE = """
import os
import miocore
p = miocore.ConvProblem.from_sizes(
    "forward", n=1, c=8, k=8, in_spatial=(6, 6), filter_spatial=(3, 3), pads=(1, 1), groups=8
)
h = miocore.Handle("cpu")
arrays = miocore.reference.random_inputs(p, 0)
h.immediate(p, "direct.depthwise", **arrays)
from miocore.backends.cpu_gemm import own_blas
lib = own_blas()
print("teams" if lib is not None and lib.openmp is not None else "pool")
print(os.environ.get("OMP_WAIT_POLICY"))
"""


@pytest.mark.parametrize(
    ("given", "gemm_threads", "expected"),
    [
        (None, "auto", {"teams": "None", "pool": "PASSIVE"}),
        (None, "openblas", {"pool": "PASSIVE"}),
        ("active", "auto", {"teams": "active", "pool": "active"}),
    ],
)
def test_depthwise_runs_choose_a_policy_and_leave_a_callers(
    given: str | None, gemm_threads: str, expected: dict[str, str], tmp_path: object
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["MIOCORE_USER_DB_PATH"] = str(tmp_path)
    env["MIOCORE_CPU_BLAS_THREADS"] = gemm_threads
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    gemms, policy = done.stdout.strip().splitlines()[-2:]
    assert policy == expected[gemms], (gemms, policy)
