"""The numba kernels' OpenMP threads sleep at once when idle unless the caller chose a policy
(see ``miocore_direct.openmp``): checked in fresh processes, since OpenMP reads it on loading."""

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
print(os.environ.get("OMP_WAIT_POLICY"))
"""


@pytest.mark.parametrize(("given", "expected"), [(None, "PASSIVE"), ("active", "active")])
def test_depthwise_runs_leave_a_callers_policy_and_default_to_passive(
    given: str | None, expected: str, tmp_path: object
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["MIOCORE_USER_DB_PATH"] = str(tmp_path)
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == expected
