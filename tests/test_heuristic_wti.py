"""The fitted WTI table: estimates corrected towards measured times, its file format."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import needs
import pytest
from heuristic_support import heuristic_problems

import miocore
from miocore.heuristic.model import ModelFormatError
from miocore.heuristic.wti import WtiTable, fit_wti
from miocore.problem.conv import ConvProblem

SHIPPED = Path(miocore.__file__).parent / "data" / "db"


@needs.plugins("direct", "gemm")
def test_fitted_wti_moves_estimates_towards_measured_times(tmp_path: Path) -> None:
    h = miocore.Handle("cpu")
    ctx = h.context
    solvers = {r.name: r.solver for r in h.registry.solvers}
    samples = []
    for p in heuristic_problems()[:24]:
        canon = p.canonical
        ideal = ctx.ideal_ms(canon)
        times = {}
        for name in ("direct.naive", "gemm.im2col"):
            score = solvers[name].wti(ctx, canon)
            if score > 0:
                # measured: 3x (naive) and 0.5x (im2col) what WTI predicts
                times[name] = ideal / score * (3.0 if name == "direct.naive" else 0.5)
        samples.append((p, times))
    table = fit_wti(samples, ctx, solvers, device=h.device.identity)
    assert table.correction("direct.naive", "forward") == pytest.approx(math.log(3.0))
    assert table.correction("gemm.im2col", "backward_data") == pytest.approx(math.log(0.5))
    assert table.correction("winograd.rxs", "forward") is None
    path = table.save(tmp_path / "t.wti.json")
    assert WtiTable.load(path) == table
    with pytest.raises(ModelFormatError):
        (tmp_path / "x.json").write_text("{}")
        WtiTable.load(tmp_path / "x.json")


@needs.plugins("direct", "gemm")
def test_fitted_wti_follows_an_error_that_moves_with_the_problem(tmp_path: Path) -> None:
    """One factor per solver cannot rank two solvers whose WTI errs in opposite directions as
    problems grow (here one is 2x slower than its WTI per doubling of the work over the
    middle, the other 2x faster): the linear correction recovers both slopes, ranks each
    problem's faster solver first where the median ranks one solver first everywhere, and
    stays within the range it was fitted on."""
    h = miocore.Handle("cpu")
    ctx = h.context
    solvers = {r.name: r.solver for r in h.registry.solvers}
    names = ("direct.naive", "gemm.im2col")
    forward = [p.canonical for p in heuristic_problems() if p.direction.value == "forward"]
    middle = statistics.median(math.log2(p.flops) for p in forward)

    def measured(name: str, p: ConvProblem) -> float:
        slope = 1.0 if name == names[0] else -1.0
        return (
            ctx.ideal_ms(p)
            / solvers[name].wti(ctx, p)
            * 2.0 ** (slope * (math.log2(p.flops) - middle))
        )

    samples = [(p, {n: measured(n, p) for n in names}) for p in forward]
    table = fit_wti(samples, ctx, solvers, device=h.device.identity)
    assert set(table.linear) == set(names) and len(forward) >= 20
    right_linear = right_median = 0
    for p in forward:
        fastest = min(names, key=lambda n: measured(n, p))
        estimates = {n: table.estimate_ms(ctx, solvers[n], p) for n in names}
        right_linear += min(estimates, key=estimates.__getitem__) == fastest
        median = {
            n: ctx.ideal_ms(p) / solvers[n].wti(ctx, p) * math.exp(table.correction(n, "forward"))
            for n in names
        }
        right_median += min(median, key=median.__getitem__) == fastest
        for n in names:  # the correction is the log error itself, to the ridge's shrinkage
            want = math.log(measured(n, p) * solvers[n].wti(ctx, p) / ctx.ideal_ms(p))
            assert table.correction_for(n, p, "exact") == pytest.approx(want, abs=0.25)
    assert right_linear >= len(forward) - 2
    assert right_median <= len(forward) * 0.75
    # Past the fitted range the correction is clipped, not extrapolated.
    huge = ConvProblem.from_sizes(
        "forward", n=64, c=512, k=512, in_spatial=(64, 64), filter_spatial=(3, 3), pads=(1, 1)
    )
    top = table.linear[names[0]]["forward"][-1]
    assert table.correction_for(names[0], huge.canonical, "exact") == pytest.approx(top)
    path = table.save(tmp_path / "t.wti.json")
    assert WtiTable.load(path) == table


def test_a_wti_table_without_linear_terms_loads_and_a_foreign_one_is_refused(
    tmp_path: Path,
) -> None:
    """Tables written before the linear corrections still load (their medians apply); a table
    naming features this miocore does not compute, or with coefficients of the wrong length,
    is refused with the file named."""
    base = {"format": "miocore-wti-corrections", "device": "d", "provenance": {}}
    old = tmp_path / "old.wti.json"
    old.write_text(json.dumps({**base, "by_solver": {"s": 0.5}, "by_direction": {}}))
    table = WtiTable.load(old)
    assert table.linear == {}
    p = heuristic_problems()[0].canonical
    assert table.correction_for("s", p, "exact") == 0.5
    foreign = tmp_path / "foreign.wti.json"
    linear = {"s": {"forward": [0.0, 1.0, 0.0, 0.0]}}
    foreign.write_text(
        json.dumps({**base, "by_solver": {}, "by_direction": {}, "linear_features": ["warp_size"],
                    "linear": linear})
    )  # fmt: skip
    with pytest.raises(ModelFormatError, match="warp_size") as info:
        WtiTable.load(foreign)
    assert info.value.value == str(foreign)
    linear = {"s": {"forward": [0.0, 1.0, 0.0, 0.0]}}  # two features need 5 numbers
    foreign.write_text(
        json.dumps({**base, "by_solver": {}, "by_direction": {},
                    "linear_features": ["log2_n", "log2_c"], "linear": linear})
    )  # fmt: skip
    with pytest.raises(ModelFormatError, match="length"):
        WtiTable.load(foreign)
