"""A plugin that yields one good record and two malformed ones."""

from _fake_common import FakeSolver

import miocore


class Good(FakeSolver):
    name = "fakemalformed.good"


@miocore.hookimpl
def miocore_solvers():
    yield miocore.SolverRecord(solver=Good())
    yield Good()  # not wrapped in a SolverRecord
    yield miocore.SolverRecord(solver="fakemalformed.not_a_solver")
