"""A plugin whose solvers return malformed solutions."""

import dataclasses

from _fake_common import FakeSolver

import miocore


class NotASolution(FakeSolver):
    name = "fakebad.not_a_solution"

    def get_solution(self, ctx, problem, perf_config=None):
        return {"solver": self.name, "workspace_size": 0}


class WrongName(FakeSolver):
    name = "fakebad.wrong_name"

    def get_solution(self, ctx, problem, perf_config=None):
        return dataclasses.replace(
            super().get_solution(ctx, problem, perf_config), solver="someone.else"
        )


class NoFactory(FakeSolver):
    name = "fakebad.no_factory"

    def get_solution(self, ctx, problem, perf_config=None):
        return miocore.ConvSolution(solver=self.name, workspace_size=0, invoker_factory=None)


class BadKernels(FakeSolver):
    name = "fakebad.bad_kernels"

    def get_solution(self, ctx, problem, perf_config=None):
        solution = super().get_solution(ctx, problem, perf_config)
        return dataclasses.replace(solution, kernels=["kernel.cu"])


@miocore.hookimpl
def miocore_solvers():
    for cls in (NotASolution, WrongName, NoFactory, BadKernels):
        yield miocore.SolverRecord(solver=cls())
