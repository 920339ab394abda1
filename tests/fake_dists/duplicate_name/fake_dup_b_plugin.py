"""The other of two plugins registering the same solver name."""

from _fake_common import FakeSolver

import miocore


class Same(FakeSolver):
    name = "fakedup.same"


@miocore.hookimpl
def miocore_solvers():
    yield miocore.SolverRecord(solver=Same())
