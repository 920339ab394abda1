"""A plugin whose solvers raise: one in is_applicable, one in get_solution, one when run."""

from _fake_common import FakeSolver

import miocore


class RaisesInApplicable(FakeSolver):
    name = "fakeraising.applicable"

    def is_applicable(self, ctx, problem):
        raise RuntimeError("is_applicable exploded")


class RaisesInGetSolution(FakeSolver):
    name = "fakeraising.get_solution"

    def get_solution(self, ctx, problem, perf_config=None):
        raise RuntimeError("get_solution exploded")


class RaisesWhenRun(FakeSolver):
    name = "fakeraising.run"

    def get_solution(self, ctx, problem, perf_config=None):
        def factory(_kernels):
            def invoker(_handle, _params):
                raise RuntimeError("the invoker exploded")

            return invoker

        return miocore.ConvSolution(solver=self.name, workspace_size=0, invoker_factory=factory)


@miocore.hookimpl
def miocore_solvers():
    yield miocore.SolverRecord(solver=RaisesInApplicable())
    yield miocore.SolverRecord(solver=RaisesInGetSolution())
    yield miocore.SolverRecord(solver=RaisesWhenRun())
