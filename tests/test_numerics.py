"""Numerical notes, accuracy policies and error bounds (miocore.solver.numerics), and the
contract suite's check that every first-party solver declares known notes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import miocore
from miocore import ConvProblem, InvalidArgumentError, MiocoreError, reference
from miocore.errors import InvalidEnvironmentError
from miocore.solver.interface import APPLICABLE, Algorithm, ConvSolution, Solver, TunableSolver
from miocore.solver.numerics import (
    KNOWN_NOTES,
    LOSSY_NOTES,
    AccuracyPolicy,
    accuracy_from_env,
    error_bound,
    is_wrong,
    overflowed,
    parse_notes,
    reduction_length,
    trusted_error,
)
from miocore.testing import cpu_context
from miocore.testing.contract import Contract, ContractViolation


def test_notes_parse_and_reject_unknown() -> None:
    assert parse_notes(["winograd", "tf32"]) == {"winograd", "tf32"}
    with pytest.raises(InvalidArgumentError, match="'winogard'") as info:
        parse_notes(["winogard"])
    assert info.value.field == "numerical_notes"
    with pytest.raises(InvalidArgumentError, match="one string"):
        parse_notes("fft")


def test_strict_refuses_lossy_notes_only() -> None:
    assert "nondeterministic" not in LOSSY_NOTES and LOSSY_NOTES < KNOWN_NOTES
    for note in LOSSY_NOTES:
        assert not AccuracyPolicy.STRICT.allows({note})
        assert AccuracyPolicy.DEFAULT.allows({note}) and AccuracyPolicy.FAST.allows({note})
    assert AccuracyPolicy.STRICT.allows({"nondeterministic"})
    assert AccuracyPolicy.STRICT.allows(frozenset())


def test_policy_parse_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AccuracyPolicy.parse(" Strict ") is AccuracyPolicy.STRICT
    with pytest.raises(InvalidArgumentError, match="accuracy") as info:
        AccuracyPolicy.parse("sloppy")
    assert info.value.value == "sloppy"
    monkeypatch.delenv("MIOCORE_ACCURACY", raising=False)
    assert accuracy_from_env() is AccuracyPolicy.DEFAULT
    monkeypatch.setenv("MIOCORE_ACCURACY", "FAST")
    assert accuracy_from_env() is AccuracyPolicy.FAST
    monkeypatch.setenv("MIOCORE_ACCURACY", "2")
    with pytest.raises(InvalidEnvironmentError, match="MIOCORE_ACCURACY"):
        accuracy_from_env()


def test_reduction_length_per_direction() -> None:
    p = ConvProblem.from_sizes(
        "forward", n=2, c=8, k=6, in_spatial=(7, 7), filter_spatial=(3, 3), pads=(1, 1), groups=2
    )
    assert reduction_length(p) == 4 * 9
    assert reduction_length(ConvProblem.from_sizes("backward_data", **_sizes())) == 3 * 9
    assert reduction_length(ConvProblem.from_sizes("backward_weights", **_sizes())) == 2 * 25


def _sizes() -> dict[str, object]:
    return dict(n=2, c=4, k=3, in_spatial=(5, 5), filter_spatial=(3, 3), pads=(1, 1))


def test_bounds_grow_with_length_and_order_by_dtype() -> None:
    assert error_bound("float32", 9) < error_bound("float32", 9 * 512)
    assert error_bound("float32", 64) < error_bound("float16", 64) < error_bound("bfloat16", 64)
    assert error_bound("float32", 100) == pytest.approx(4 * trusted_error("float32", 100))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_bound_holds_for_a_plain_fp32_gemm_on_random_data(dtype: str) -> None:
    """The trusted path (fp32 accumulation, one rounding to the dtype) stays within the
    bound on random data of a real reduction length, and an off-by-one shift does not."""
    p = ConvProblem.from_sizes(
        "forward", n=2, c=64, k=16, in_spatial=(9, 9), filter_spatial=(3, 3), pads=(1, 1),
        dtype=dtype,
    )  # fmt: skip
    inputs = reference.random_inputs(p, 7)
    exact = reference.convolution(p, x=inputs["x"], w=inputs["w"])
    x32 = inputs["x"].astype(np.float32)
    w32 = inputs["w"].astype(np.float32)
    # im2col + fp32 matmul: the plain GEMM the bound is stated against
    cols = np.lib.stride_tricks.sliding_window_view(
        np.pad(x32, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3)
    )
    y32 = np.einsum("ncpqrs,kcrs->nkpq", cols, w32, dtype=np.float32)
    got = y32.astype(p.dtype.numpy)
    err = reference.relative_error(got, exact)
    bound = error_bound(dtype, reduction_length(p))
    assert 0 < err <= bound, (err, bound)
    shifted = np.roll(got, 1, axis=3)
    assert is_wrong(reference.relative_error(shifted, exact))


def test_is_wrong() -> None:
    assert is_wrong(1.0) and is_wrong(math.nan) and not is_wrong(1e-3)
    assert not is_wrong(math.nan, reference_has_nan=True)


def test_overflowed_accepts_only_the_rounding_of_a_value_beyond_the_range() -> None:
    exact = np.array([70000.0, -70000.0, 65000.0, 100.0, 70000.0])
    got = np.array([np.inf, -np.inf, np.inf, np.inf, -np.inf])
    # beyond fp16's range (or within 1/64 of it) with the same sign: right; a small value or
    # the wrong sign: not
    assert overflowed(exact, got, miocore.DataType.FLOAT16).tolist() == [
        True, True, True, False, False
    ]  # fmt: skip
    assert not overflowed(exact, got, miocore.DataType.BFLOAT16).any()


class _Noted(Solver):
    name = "test.noted"
    algorithm = Algorithm.DIRECT
    numerical_notes = frozenset({"winograd", "quantum"})

    def is_applicable(self, ctx, problem):  # type: ignore[no-untyped-def]
        return APPLICABLE

    def get_solution(self, ctx, problem, perf_config=None):  # type: ignore[no-untyped-def]
        return ConvSolution(solver=self.name, workspace_size=0, invoker_factory=lambda k: None)


def test_contract_rejects_unknown_notes() -> None:
    with pytest.raises(ContractViolation, match="quantum"):
        Contract(_Noted()).check_registration()


#: First-party solvers that declare their notes in their own class (cuDNN's differ per engine
#: configuration, so its solvers declare none at class level).
DECLARED = (
    *("direct.naive", "direct.taps", "direct.depthwise", "direct.gpu_naive", "direct.gpu_tiled"),
    *("direct.gpu_depthwise", "gemm.1x1", "gemm.im2col", "gemm.gpu_im2col", "gemm.gpu_nhwc"),
    *("gemm.gpu_nhwc_tf32", "gemm.gpu_im2col_tf32", "igemm.fwd", "igemm.bwd", "igemm.wrw"),
    "igemm.gpu_mma",
    *("igemm.gpu_tf32", "igemm.gpu_fma", "igemm.gpu_mma_wrw", "igemm.gpu_tf32_wrw"),
    *("winograd.rxs", "winograd.gpu_f2x3", "winograd.gpu_f4x3", "fft.overlap_save"),
    "fft.gpu_rfft",
)


def test_every_first_party_solver_declares_known_notes() -> None:
    """Registration passes the notes check for every installed solver, and the families
    whose arithmetic transforms operands say so."""
    solvers = {s.name: s for s in (r.solver for r in miocore.solvers())}
    for solver in solvers.values():
        assert set(solver.numerical_notes) <= KNOWN_NOTES, solver.name
        if solver.name in DECLARED:
            declared = [
                cls
                for cls in type(solver).__mro__
                if cls not in (Solver, TunableSolver) and "numerical_notes" in vars(cls)
            ]
            assert declared, f"{solver.name} declares no numerical_notes"
    expected = {
        "winograd.rxs": {"winograd"},
        "winograd.gpu_f4x3": {"winograd", "down_convert"},
        "igemm.gpu_tf32": {"tf32"},
        "igemm.gpu_mma_wrw": {"nondeterministic"},
        "gemm.gpu_nhwc_tf32": {"tf32"},
        "gemm.gpu_im2col_tf32": {"tf32"},
        "igemm.wrw": set(),
        "fft.overlap_save": {"fft"},
        "direct.naive": set(),
        "gemm.im2col": set(),
    }
    for name, notes in expected.items():
        if name in solvers:
            assert set(solvers[name].numerical_notes) == notes, name
    assert isinstance(InvalidArgumentError("x"), MiocoreError)
    assert cpu_context().backend == "cpu"


def test_a_tf32_handle_accepts_tf32_rounding_in_fp32_and_an_exact_one_does_not() -> None:
    from miocore.solver.numerics import error_bound

    exact = error_bound("float32", 576)
    tf32 = error_bound("float32", 576, tf32=True)
    # TF32 products measured near 3e-4 relative: inside the tf32 bound, far outside exact's.
    assert exact < 3e-4 < tf32 < 1e-2
    assert error_bound("float16", 576, tf32=True) == error_bound("float16", 576)
