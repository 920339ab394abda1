"""The accuracy policy in find, on the CPU: planted wrong solvers (zeros, off by one pixel,
NaN) are never recorded in any find mode, are reported with their plugin and denied; strict
and deterministic filter by numerical notes; measured errors reach explain() and the FindDb;
denied solvers are skipped by find, immediate mode and FindDb hits."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fake_solvers import TimedSolver, buffers, small_problem

import miocore
from miocore import NotApplicableError, Registry, reference
from miocore.db.deny_entries import DenyEntry
from miocore.db.denylist import DenyList
from miocore.errors import InvalidArgumentError
from miocore.find.accuracy import REFERENCE_FLOPS
from miocore.find.verify import _reduced_selection
from miocore.solver.interface import ConvSolution, InvokeParams
from miocore.solver.numerics import error_bound, reduction_length

MODES = ("NORMAL", "FAST", "HYBRID", "DYNAMIC_HYBRID")


class Planted(TimedSolver):
    """Fastest of all (no delay), and wrong in the way ``kind`` says."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"test.planted_{kind}", delay_s=0.0, dynamic=True)
        self.kind = kind

    def get_solution(self, ctx: Any, problem: Any, perf_config: Any = None) -> ConvSolution:
        def factory(_kernels: Any) -> Any:
            def invoker(_handle: Any, params: InvokeParams) -> None:
                p = params.problem
                out = getattr(params, p.direction.output_tensor)
                inputs = {
                    k: getattr(params, k) for k in ("x", "w", "y") if k != p.direction.output_tensor
                }
                exact = reference.convolution(p, **inputs)
                if self.kind == "zeros":
                    out[...] = 0
                elif self.kind == "shifted":  # off by one pixel along the width
                    out[...] = np.roll(exact, 1, axis=-1).astype(out.dtype)
                elif self.kind == "nan":
                    exact[(0,) * exact.ndim] = np.nan  # one NaN is enough
                    out[...] = exact.astype(out.dtype)
                elif self.kind == "silent":  # writes nothing at all
                    return

            return invoker

        return ConvSolution(solver=self.name, workspace_size=0, invoker_factory=factory)


class Spoiled(TimedSolver):
    """The exact answer, then :meth:`spoil` applied to the output in place."""

    def spoil(self, out: np.ndarray) -> None:
        raise NotImplementedError

    def get_solution(self, ctx: Any, problem: Any, perf_config: Any = None) -> ConvSolution:
        exact = super().get_solution(ctx, problem, perf_config)

        def factory(kernels: Any) -> Any:
            run = exact.invoker_factory(kernels)

            def invoker(handle: Any, params: InvokeParams) -> None:
                run(handle, params)
                self.spoil(getattr(params, params.problem.direction.output_tensor))

            return invoker

        return ConvSolution(solver=self.name, workspace_size=0, invoker_factory=factory)


class Coarse(Spoiled):
    """Right to 1e-3 only: over the fp32 bound, far from wrong."""

    numerical_notes = frozenset({"winograd"})

    def spoil(self, out: np.ndarray) -> None:
        out[...] = out * (1 + 1e-3)


class Atomic(TimedSolver):
    numerical_notes = frozenset({"nondeterministic"})


def _handle(*solvers: Any) -> miocore.Handle:
    return miocore.Handle("cpu", registry=Registry.from_solvers(list(solvers)))


@pytest.mark.parametrize("kind", ["zeros", "shifted", "nan", "silent"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_planted_wrong_solver_never_recorded(kind: str, mode: str, direction: str) -> None:
    good = TimedSolver("test.good", delay_s=0.002, dynamic=True)
    planted = Planted(kind)
    h = _handle(planted, good)
    p = small_problem(direction)
    sols = h.find_solutions(p, find_mode=mode)
    if mode == "FAST":  # a miss in FAST mode measures nothing and records nothing
        assert not sols.report.benchmarked and h.find_db.record(p.key) is None
        sols = h.find_solutions(p, find_mode="NORMAL")
    assert [s.solver for s in sols] == ["test.good"]
    failed = sols.report.failed[planted.name]
    assert "wrong answer" in failed and p.key in failed and "plugin" in failed
    assert ("NaN" in failed) == (kind in ("nan", "silent"))
    record = h.find_db.record(p.key)
    assert [e.solver for e in record.entries] == ["test.good"]
    # denied from now on: a second find skips it without running it, immediate mode refuses it
    runs = planted.runs
    again = h.find_solutions(p, find_mode="NORMAL")
    assert "denied by the user deny list" in again.report.skipped[planted.name]
    assert planted.runs == runs
    with pytest.raises(NotApplicableError, match="deny list"):
        h.immediate(p, planted.name, **buffers(p))
    assert planted.name not in [s.solver for s in h.get_solutions(p)]


def _overflowing_backward_weights() -> tuple[miocore.ConvProblem, dict[str, np.ndarray]]:
    """fp16 backward weights whose exact dW passes 65,504 in output channel 0 (positive,
    correlated data: ~4,400 products of ~25 each) and stays small in channel 1."""
    p = miocore.ConvProblem.from_sizes(
        "backward_weights", n=2, c=3, k=2, in_spatial=(48, 48), filter_spatial=(3, 3),
        pads=(1, 1), dtype="float16",
    )  # fmt: skip
    rng = np.random.default_rng(5)
    x = rng.uniform(4.0, 6.0, size=p.x.lengths).astype(np.float16)
    y = rng.standard_normal(p.y.lengths).astype(np.float16)
    y[:, 0] = rng.uniform(4.0, 6.0, size=y[:, 0].shape)
    exact = reference.convolution(p, x=x, y=y)
    assert np.abs(exact[0]).min() > 65504 and np.abs(exact[1]).max() < 65504
    return p, {"x": x, "w": np.zeros(p.w.lengths, np.float16), "y": y}


class Infinite(Spoiled):
    """Right, but for one infinity where the exact value is a small number."""

    def spoil(self, out: np.ndarray) -> None:
        out[1, 0, 0, 0] = np.inf


def test_an_infinity_where_the_exact_value_overflows_is_the_right_answer() -> None:
    """Every right fp16 kernel writes infinity where dW overflows; find keeps them (it used to
    call each a wrong answer and deny them all), and still denies an infinity elsewhere."""
    p, arrays = _overflowing_backward_weights()
    good = TimedSolver("test.good", delay_s=0.002, dynamic=True)
    wrong = Infinite("test.infinite", dynamic=True)
    h = _handle(good, wrong)
    sols = h.find_solutions(p, find_mode="NORMAL", **arrays)
    assert [s.solver for s in sols] == ["test.good"]
    assert list(sols.report.failed) == ["test.infinite"]
    assert "NaN where the reference has none" in sols.report.failed["test.infinite"]
    h.run_solution(sols[0], **arrays)
    w = arrays["w"]  # fp16's answer: infinity in channel 0, numbers in channel 1
    assert np.isposinf(w[0]).all() and np.isfinite(w[1]).all()


def test_planted_wrong_solvers_under_strict_too() -> None:
    h = _handle(Planted("zeros"), TimedSolver("test.good", delay_s=0.002))
    sols = h.find_solutions(small_problem(), find_mode="NORMAL", accuracy="strict")
    assert [s.solver for s in sols] == ["test.good"]


def test_fast_policy_checks_nothing() -> None:
    """``fast`` is the policy that trusts: the planted solver wins (which is why it is not
    the default)."""
    h = _handle(Planted("zeros"), TimedSolver("test.good", delay_s=0.002))
    sols = h.find_solutions(small_problem(), find_mode="NORMAL", accuracy="fast")
    assert sols[0].solver == "test.planted_zeros" and not sols.report.failed


def test_over_the_bound_is_left_out_with_both_numbers_and_not_denied() -> None:
    coarse = Coarse("test.coarse", delay_s=0.0)
    h = _handle(coarse, TimedSolver("test.good", delay_s=0.002))
    p = small_problem()
    sols = h.find_solutions(p, find_mode="NORMAL")
    assert [s.solver for s in sols] == ["test.good"]
    why = sols.report.skipped["test.coarse"]
    bound = error_bound("float32", reduction_length(p))
    assert "relative error 0.001 over the bound" in why and f"{bound:.3g}" in why
    assert "reduction length 36" in why
    assert not DenyList(h.state.device.identity, user_dir=h.state.user_db_path).entries()
    # fast takes it; strict refuses it for its note, without running it
    assert h.find_solutions(p, find_mode="NORMAL", accuracy="fast")[0].solver == "test.coarse"
    runs = coarse.runs
    strict = h.find_solutions(p, find_mode="NORMAL", accuracy="strict")
    assert "accuracy=strict" in strict.report.skipped["test.coarse"] and coarse.runs == runs


def test_error_in_explain_and_provenance() -> None:
    h = _handle(TimedSolver("test.good", delay_s=0.001))
    p = small_problem(dtype="float16")
    (s,) = h.find_solutions(p, find_mode="NORMAL")
    assert "relative error" in s.explain() and "bound" in s.explain()
    (entry,) = h.find_db.record(p.key).entries
    assert entry.provenance["accuracy"] == "default"
    error, bound = float(entry.provenance["error"]), float(entry.provenance["error_bound"])
    assert 0 < error <= bound  # float16 rounding of the exact answer
    assert entry.provenance["numerical_notes"] == "-"


def test_deterministic_leaves_out_nondeterministic() -> None:
    h = _handle(Atomic("test.atomic", delay_s=0.0), TimedSolver("test.good", delay_s=0.002))
    p = small_problem()
    assert h.find_solutions(p, find_mode="NORMAL")[0].solver == "test.atomic"
    sols = h.find_solutions(p, find_mode="NORMAL", deterministic=True)
    assert [s.solver for s in sols] == ["test.good"]
    assert "deterministic=True" in sols.report.skipped["test.atomic"]


def test_denied_solver_skipped_on_a_findb_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = TimedSolver("test.fast", delay_s=0.0)
    h = _handle(fast, TimedSolver("test.good", delay_s=0.002))
    p = small_problem()
    assert h.find_solutions(p, find_mode="NORMAL")[0].solver == "test.fast"
    DenyList(h.state.device.identity, user_dir=h.state.user_db_path).add(
        DenyEntry(solver="test.fast", reason="by hand", key_pattern="*-F")
    )
    hit = h.find_solutions(p, find_mode="FAST")
    assert hit.report.db_hit and [s.solver for s in hit] == ["test.good"]
    monkeypatch.setenv("MIOCORE_ACCURACY", "nonsense")
    with pytest.raises(Exception, match="MIOCORE_ACCURACY"):
        h.find_solutions(p)
    with pytest.raises(InvalidArgumentError, match="accuracy"):
        h.find_solutions(p, accuracy="loose")


def test_reduced_reference_keeps_the_reduction_and_the_budget() -> None:
    big = miocore.ConvProblem.from_sizes(
        "forward", n=32, c=256, k=256, in_spatial=(56, 56), filter_spatial=(3, 3), pads=(1, 1)
    )
    images, channels = _reduced_selection(big)
    per_element = reduction_length(big)
    assert per_element == 256 * 9
    assert images == 1 and 4 <= channels < 256
    assert images * channels * 56 * 56 * per_element <= max(
        REFERENCE_FLOPS, 4 * 56 * 56 * per_element
    )
    wrw = miocore.ConvProblem.from_sizes(
        "backward_weights", n=8, c=64, k=64, in_spatial=(28, 28), filter_spatial=(3, 3), pads=(1, 1)
    )
    assert _reduced_selection(wrw)[0] == 1  # images are the reduction: never cut
    small = small_problem()
    assert _reduced_selection(small) == (small.n, small.k)


def test_a_fault_of_the_check_itself_never_fails_a_candidate(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from miocore.find import verify

    def broken(self: Any) -> Any:
        raise MemoryError("no room for the reference")

    monkeypatch.setattr(verify.AccuracyCheck, "_compute_reference", broken)
    h = _handle(TimedSolver("test.good", delay_s=0.001))
    sols = h.find_solutions(small_problem(), find_mode="NORMAL")
    assert [s.solver for s in sols] == ["test.good"] and not sols.report.failed
    assert "accuracy check off" in caplog.text and "no room" in caplog.text


def test_immediate_mode_follows_the_policy_and_determinism() -> None:
    """get_solutions measures nothing: strict leaves out lossy notes, deterministic the
    non-deterministic, each with its reason; MIOCORE_ACCURACY is the default."""
    h = _handle(
        Coarse("test.coarse", delay_s=0.0),
        Atomic("test.atomic", delay_s=0.0),
        TimedSolver("test.good", delay_s=0.0),
    )
    p = small_problem()
    assert {s.solver for s in h.get_solutions(p)} == {"test.coarse", "test.atomic", "test.good"}
    strict = h.get_solutions(p, accuracy="strict")
    assert "test.coarse" not in {s.solver for s in strict}
    assert "accuracy=strict" in strict.report.skipped["test.coarse"]
    steady = h.get_solutions(p, deterministic=True)
    assert {s.solver for s in steady} == {"test.coarse", "test.good"}
    assert "deterministic=True" in steady.report.skipped["test.atomic"]
    with pytest.raises(InvalidArgumentError, match="accuracy"):
        h.get_solutions(p, accuracy="loose")


def test_immediate_mode_reads_the_policy_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = _handle(Coarse("test.coarse", delay_s=0.0), TimedSolver("test.good", delay_s=0.0))
    monkeypatch.setenv("MIOCORE_ACCURACY", "strict")
    assert [s.solver for s in h.get_solutions(small_problem())] == ["test.good"]


class Blurred(TimedSolver):
    """Right to a relative ``level`` only (an output scaled by 1 + level), with ``notes``."""

    def __init__(self, name: str, level: float, notes: frozenset[str], **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.level = level
        self.numerical_notes = notes  # type: ignore[misc]

    def get_solution(self, ctx: Any, problem: Any, perf_config: Any = None) -> ConvSolution:
        exact = super().get_solution(ctx, problem, perf_config)

        def factory(kernels: Any) -> Any:
            run = exact.invoker_factory(kernels)

            def invoker(handle: Any, params: InvokeParams) -> None:
                run(handle, params)
                out = getattr(params, params.problem.direction.output_tensor)
                out[...] = out * (1 + self.level)

            return invoker

        return ConvSolution(solver=self.name, workspace_size=0, invoker_factory=factory)


def test_a_lossy_candidate_over_twice_the_plain_paths_error_is_left_out() -> None:
    """Within the estimated bound but 2x worse than the plain candidate measured on the same
    data: left out with both numbers (default only); a plain candidate as coarse stays."""
    p = small_problem()
    bound = error_bound("float32", reduction_length(p))
    level = bound / 2  # inside the bound, far over a plain fp32 path's ~1e-7
    lossy = Blurred("test.lossy", level, frozenset({"winograd"}), delay_s=0.0)
    plain_coarse = Blurred("test.plain_coarse", level, frozenset(), delay_s=0.001)
    good = TimedSolver("test.good", delay_s=0.01)  # far behind: a pause cannot swap them
    h = _handle(lossy, plain_coarse, good)
    sols = h.find_solutions(p, find_mode="NORMAL")
    assert [s.solver for s in sols] == ["test.plain_coarse", "test.good"]
    why = sols.report.skipped["test.lossy"]
    assert "over 2x the plain path's" in why and "test.good" in why
    fast = h.find_solutions(p, find_mode="NORMAL", accuracy="fast")
    assert fast[0].solver == "test.lossy"
    # No plain candidate measured: the bound alone decides, and the lossy one is kept.
    alone = _handle(Blurred("test.lossy", level, frozenset({"winograd"}), delay_s=0.0))
    assert alone.find_solutions(p, find_mode="NORMAL")[0].solver == "test.lossy"


def test_tf32_is_no_loss_in_the_tf32_math_mode() -> None:
    p = small_problem()
    level = error_bound("float32", reduction_length(p), tf32=True) / 2
    tf32 = Blurred("test.tf32", level, frozenset({"tf32"}), delay_s=0.0)
    h = miocore.Handle(
        "cpu",
        registry=Registry.from_solvers([tf32, TimedSolver("test.good", delay_s=0.002)]),
        math_mode="tf32",
    )
    assert h.find_solutions(p, find_mode="NORMAL")[0].solver == "test.tf32"


class Promised(Coarse):
    """Off by 10% (past the wrong-answer line), as its own declared error says it may be."""

    def get_solution(self, ctx: Any, problem: Any, perf_config: Any = None) -> ConvSolution:
        exact = TimedSolver.get_solution(self, ctx, problem, perf_config)

        def factory(kernels: Any) -> Any:
            run = exact.invoker_factory(kernels)

            def invoker(handle: Any, params: InvokeParams) -> None:
                run(handle, params)
                out = getattr(params, params.problem.direction.output_tensor)
                out[...] = out * 1.1

            return invoker

        return ConvSolution(solver=self.name, workspace_size=0, invoker_factory=factory)

    def expected_error(self, ctx: Any, problem: Any, perf_config: Any = None) -> float | None:
        return self.declared


@pytest.mark.parametrize("declared", [0.5, 0.01])
def test_an_error_within_the_solvers_own_declared_error_is_not_a_wrong_answer(
    declared: float,
) -> None:
    promised = Promised("test.promised", delay_s=0.0)
    promised.declared = declared  # type: ignore[attr-defined]
    h = _handle(promised, TimedSolver("test.good", delay_s=0.002))
    p = small_problem()
    sols = h.find_solutions(p, find_mode="NORMAL")
    assert [s.solver for s in sols] == ["test.good"]  # over the bound either way
    if declared >= 0.1:  # the 10% it makes is what it declared: left out, not denied
        why = sols.report.skipped["test.promised"]
        assert "over the bound" in why and "declared error 0.5" in why
        assert "test.promised" not in sols.report.failed
        again = h.find_solutions(p, find_mode="NORMAL")
        assert "denied" not in again.report.skipped["test.promised"]
    else:  # beyond its own declaration: a wrong answer, denied
        assert "wrong answer" in sols.report.failed["test.promised"]
        again = h.find_solutions(p, find_mode="NORMAL")
        assert "denied by the user deny list" in again.report.skipped["test.promised"]
