"""The solver contract suite (miocore.testing) on {{name}}.direct: every rule find relies on."""

from __future__ import annotations

from miocore.testing import SolverContract

from miocore_{{name}} import {{Name}}Direct


class Test{{Name}}DirectContract(SolverContract):
    """Registration, pure and fast is_applicable, honest workspace, every perf config,
    correctness against the reference, wti, and declined problems never run."""

    solver = {{Name}}Direct()
