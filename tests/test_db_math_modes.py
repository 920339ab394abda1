"""Records per math mode: a tf32 find's record never serves an exact handle, and the
learned heuristic tells the two apart."""

from __future__ import annotations

import io
import math
from pathlib import Path

import needs
import numpy as np
import pytest

import miocore
from miocore.db.finddb import FindDb, FindDbEntry
from miocore.db.mathkeys import TF32_SUFFIX, record_key, split_record_key
from miocore.heuristic.features import FEATURES, problem_features
from miocore.heuristic.model import ModelFormatError, TreeModel, pack_forests
from miocore.heuristic.train import is_held_out, read_samples
from miocore.heuristic.wti import fit_wti
from miocore.problem.conv import ConvProblem


def _problem(dtype: str = "float32") -> ConvProblem:
    return ConvProblem.from_sizes(
        "forward", n=1, c=4, k=8, in_spatial=(6, 6), filter_spatial=(3, 3), pads=(1, 1),
        dtype=dtype,
    )  # fmt: skip


def _entry(solver: str, ms: float) -> FindDbEntry:
    return FindDbEntry(solver=solver, algorithm="direct", time_ms=ms, workspace_size=0, count=3)


def test_only_fp32_in_the_tf32_mode_gets_its_own_key() -> None:
    p32, p16 = _problem(), _problem("float16")
    assert record_key(p32, "exact") == p32.key
    assert record_key(p32, "tf32") == p32.key + TF32_SUFFIX
    assert record_key(p16, "tf32") == p16.key  # no TF32 for half types: MIOpen's key
    assert split_record_key(p32.key + TF32_SUFFIX) == (p32.key, "tf32")
    assert split_record_key(p32.key) == (p32.key, "exact")


def test_the_database_takes_tf32_keys_of_fp32_problems_only(tmp_path: Path) -> None:
    db = FindDb("dev", user_dir=tmp_path, system_dir=tmp_path / "none")
    p32, p16 = _problem(), _problem("float16")
    db.write(p32.key, [_entry("a.exact", 2.0)])
    db.write(p32.key + TF32_SUFFIX, [_entry("a.tf32", 1.0)])
    assert sorted(db.keys()) == sorted([p32.key, p32.key + TF32_SUFFIX])
    with pytest.raises(miocore.MiocoreError) as info:
        db.write(p16.key + TF32_SUFFIX, [_entry("a.tf32", 1.0)])
    assert info.value.field == "key" and "fp32" in str(info.value)
    # MIOpen's text format has no math mode: the tf32 record stays out of an export.
    out = io.StringIO()
    assert db.export_text(out) == 1
    assert out.getvalue().startswith(p32.key + "=a.exact:")
    db.close()


@needs.plugins("direct")
def test_a_tf32_find_never_serves_an_exact_handle(tmp_path: Path) -> None:
    p = _problem()
    user, system = tmp_path / "user", tmp_path / "none"

    def handle(math_mode: str) -> miocore.Handle:
        return miocore.Handle("cpu", user_db_path=user, system_db_path=system, math_mode=math_mode)

    handle("tf32").find_solutions(p, find_mode="NORMAL")
    exact = handle("exact")
    assert exact.find_db.keys() == [p.key + TF32_SUFFIX]
    exact.find_solutions(p, find_mode="FAST")  # FAST: a hit, or a ranking without measuring
    assert exact.last_report.db_hit is None
    tf32 = handle("tf32")
    tf32.find_solutions(p, find_mode="FAST")
    assert tf32.last_report.db_hit is not None  # its own mode's record
    exact.find_solutions(p, find_mode="NORMAL")
    assert sorted(exact.find_db.keys()) == sorted([p.key, p.key + TF32_SUFFIX])
    # DB_CLEAN drops (and finds again) the handle's own mode's record only.
    before = exact.find_db.records(p.key)
    handle("tf32").find_solutions(p, find_mode="FAST", find_enforce="DB_CLEAN")
    assert exact.find_db.records(p.key) == before


def test_the_features_say_the_math_mode_of_fp32_only() -> None:
    col = FEATURES.index("math_tf32")
    assert problem_features(_problem(), "tf32")[col] == 1.0
    assert problem_features(_problem(), "exact")[col] == 0.0
    assert problem_features(_problem("bfloat16"), "tf32")[col] == 0.0


def test_training_samples_and_the_split_read_the_mode_from_the_key(tmp_path: Path) -> None:
    p = _problem()
    db = FindDb("dev", user_dir=tmp_path, system_dir=tmp_path / "none")
    db.write(p.key, [_entry("a.exact", 2.0)])
    db.write(p.key + TF32_SUFFIX, [_entry("a.tf32", 1.0), _entry("a.exact", 2.0)])
    samples = {s.key: s for s in read_samples(db.items())}
    db.close()
    col = FEATURES.index("math_tf32")
    assert samples[p.key].features[col] == 0.0
    assert samples[p.key + TF32_SUFFIX].features[col] == 1.0
    assert set(samples[p.key + TF32_SUFFIX].times) == {"a.tf32", "a.exact"}
    # Both modes of a problem fall on the same side of the held-out split.
    for share in (0.2, 0.5):
        assert is_held_out(p.key, share) == is_held_out(p.key + TF32_SUFFIX, share)


def test_a_model_trained_before_newer_features_still_loads(tmp_path: Path) -> None:
    packed = pack_forests({"a.exact": (math.log(2.0), [])})
    old = TreeModel(device="dev", features=FEATURES[:-1], **packed)
    again = TreeModel.load(old.save(tmp_path / "old.npz"))
    assert again.features == FEATURES[:-1]
    x = problem_features(_problem(), "tf32")
    assert np.isclose(again.predict_ms(x, ["a.exact"])[0], 2.0)
    other = TreeModel(device="dev", features=("something_else",), **packed)
    with pytest.raises(ModelFormatError, match="another feature list"):
        TreeModel.load(other.save(tmp_path / "other.npz"))


class _ModeSolver:
    """A solver whose estimate depends on the math mode (as a TF32-capable one's does)."""

    def wti(self, ctx: miocore.ExecutionContext, problem: ConvProblem) -> float:
        return 0.8 if ctx.math_mode == "tf32" else 0.2


def test_the_wti_fit_asks_each_sample_in_its_own_math_mode() -> None:
    ctx = miocore.Handle("cpu").context
    p = _problem()
    ideal = ctx.ideal_ms(p.canonical)
    # Measured at exactly what each mode's estimate says: the fit must find no correction.
    samples = [(p, {"a.mode": ideal / 0.2}), (p, {"a.mode": ideal / 0.8}, "tf32")] * 3
    table = fit_wti(samples, ctx, {"a.mode": _ModeSolver()}, device="dev")
    assert table.correction("a.mode", "forward") == pytest.approx(0.0)
