"""Verifying find's candidates against the float64 reference (``default`` and ``strict``).

Loaded when find measures, never on a FindDb hit: the policy, the deny list and the candidate
filter are in :mod:`miocore.find.accuracy`, whose module docstring describes the check (the
reduced reference, the device path, what a wrong candidate costs its solver).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from miocore.db.deny_entries import DenyEntry
from miocore.find.accuracy import MIN_CHANNELS, REFERENCE_FLOPS, deny_list
from miocore.problem.conv import ConvProblem, Direction
from miocore.solver.numerics import (
    LOSSY_NOTES,
    PLAIN_PATH_FACTOR,
    UNIT_ROUNDOFF,
    AccuracyPolicy,
    NumericalNote,
    error_bound,
    format_notes,
    is_wrong,
    overflowed,
    reduction_length,
)
from miocore.solver.registry import RegisteredSolver
from miocore.values import frozen

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("miocore.find")


@frozen
class Verdict:
    """The measured error of one candidate and what the policy makes of it."""

    error: float
    bound: float
    wrong: bool
    within: bool

    def note(self) -> str:
        """For the solution's note (``explain()``)."""
        return f"relative error {self.error:.3g} (bound {self.bound:.3g})"


def _reduced_selection(canon: ConvProblem) -> tuple[int, int]:
    """(images, output channels) of the compared slice; see the module docstring."""
    d = canon.direction
    out_channels = canon.k if d is not Direction.BACKWARD_DATA else canon.c
    images = canon.n if d is not Direction.BACKWARD_WEIGHTS else 1
    per_element = reduction_length(canon)
    elements_per_image_channel = (
        math.prod(canon.out_spatial)
        if d is Direction.FORWARD
        else math.prod(canon.in_spatial)
        if d is Direction.BACKWARD_DATA
        else math.prod(canon.filter_spatial) * (canon.c // canon.groups)
    )
    cost_one = max(1, per_element * elements_per_image_channel)  # one image, one channel
    # images first (forward, backward data), then channels (ungrouped problems only: a
    # group's output channels need all of its inputs)
    n_keep = max(1, min(images, int(REFERENCE_FLOPS // (cost_one * out_channels))))
    ch_keep = out_channels
    if canon.groups == 1:
        ch_keep = max(MIN_CHANNELS, int(REFERENCE_FLOPS // (cost_one * n_keep)))
        ch_keep = min(out_channels, ch_keep)
    return n_keep, ch_keep


class AccuracyCheck:
    """Verifies each candidate of one find against a reference computed once."""

    def __init__(self, state: Any, problem: ConvProblem, arrays: dict[str, Any]) -> None:
        self.state = state
        self.problem = problem
        self.canon = canon = problem.canonical
        self.out_name = canon.direction.output_tensor
        self.arrays = arrays
        tf32 = getattr(state.context, "math_mode", "exact") == "tf32"
        self.bound = error_bound(canon.dtype, reduction_length(canon), tf32=tf32)
        self.provenance: dict[str, dict[str, str]] = {}
        #: each kept candidate's measured error and whether a note of it loses accuracy (in the
        #: ``tf32`` math mode the caller accepted TF32's, so that note does not count)
        self.errors: dict[str, tuple[float, bool]] = {}
        self.lossy_notes = LOSSY_NOTES - ({NumericalNote.TF32.value} if tf32 else set())
        self.images, self.channels = _reduced_selection(canon)
        self._reference: np.ndarray | None = None
        #: the reference on the device (GPU backends): made on first use; False once it failed
        self._device: Any = None
        #: set when the check itself failed (a backend without host copies, say)
        self.disabled = False

    # -- buffers --------------------------------------------------------------------------

    def _host(self, name: str, leading: int | None = None) -> np.ndarray:
        """Tensor ``name`` on the host; with ``leading``, only its first entries along the
        outermost dimension (all that is compared or needed, and all that is copied)."""
        import numpy as np  # the check runs when find measures, never on a FindDb hit

        array = self.arrays[name]
        if isinstance(array, np.ndarray):
            return array if leading is None else array[:leading]
        desc = getattr(self.canon, name)
        if leading is not None:
            return self.state.backend.to_host_leading(array, desc, leading)
        return np.asarray(self.state.backend.to_host(array, desc))

    def _give_up(self, what: str, exc: Exception) -> None:
        """A fault of the check itself (not of a candidate): find goes on unchecked."""
        if not self.disabled:
            log.warning(
                "%s: accuracy check off for this find: %s failed: %s", self.problem.key, what, exc
            )
        self.disabled = True

    def poison(self) -> None:
        """Fill the output buffer with NaN: a candidate that writes nothing is caught."""
        if self.disabled:
            return
        import numpy as np

        out = self.arrays[self.out_name]
        try:
            if isinstance(out, np.ndarray):
                out[...] = np.nan
            else:  # on the device: a host-made NaN tensor would cross the bus per candidate
                self.state.backend.fill(out, getattr(self.canon, self.out_name), math.nan)
        except Exception as exc:
            self._give_up("poisoning the output buffer", exc)

    def _slice(self) -> tuple[slice, ...]:
        if self.canon.direction is Direction.BACKWARD_WEIGHTS:
            return (slice(0, self.channels),)
        return (slice(0, self.images), slice(0, self.channels))

    @property
    def reference(self) -> np.ndarray:
        """The float64 reference of the compared slice (computed on first use, once)."""
        if self._reference is None:
            self._reference = self._compute_reference()
        return self._reference

    def _compute_reference(self) -> np.ndarray:
        from miocore import reference

        c = self.canon
        d = c.direction
        n, ch = self.images, self.channels
        sizes = dict(
            n=c.n,
            c=c.c,
            k=c.k,
            in_spatial=c.in_spatial,
            filter_spatial=c.filter_spatial,
            pads=c.conv.pads,
            strides=c.conv.strides,
            dilations=c.conv.dilations,
            groups=c.groups,
            dtype=c.dtype,
        )
        if d is Direction.FORWARD:
            sizes.update(n=n, k=ch)
            inputs = {"x": self._host("x", n), "w": self._host("w", ch)}
        elif d is Direction.BACKWARD_DATA:
            sizes.update(n=n, c=ch)
            inputs = {"y": self._host("y", n), "w": self._host("w")[:, :ch]}
        else:
            sizes.update(k=ch)
            inputs = {"x": self._host("x"), "y": self._host("y")[:, :ch]}
        sub = ConvProblem.from_sizes(d, **sizes)  # type: ignore[arg-type]
        return reference.convolution(sub, **inputs)

    # -- verdicts -------------------------------------------------------------------------

    def measure(self) -> Verdict | None:
        """Compare the output buffer (as the last candidate left it) with the reference;
        None when the check itself could not run (reported once in the log)."""
        import numpy as np

        if self.disabled:
            return None
        measured = self._measure_on_device()
        if measured is not None:
            return self._verdict(*measured)
        try:
            expected = self.reference
            lead = self._slice()[0].stop  # images (or output channels of dW) compared
            got = self._host(self.out_name, lead)[self._slice()].astype(np.float64)
        except Exception as exc:
            self._give_up("the reference or reading the output", exc)
            return None
        ref_nan = bool(np.isnan(expected).any())
        # an infinity where the exact value overflows the type is its right answer: left out
        keep = ~overflowed(expected, got, self.canon.dtype)
        got, expected = got[keep], expected[keep]
        if not ref_nan and not np.isfinite(got).all():
            error = math.nan
        else:
            scale = float(np.nanmax(np.abs(expected))) if expected.size else 0.0
            diff = float(np.nanmax(np.abs(got - expected))) if expected.size else 0.0
            error = diff / scale if scale > 0 else diff
        return self._verdict(error, ref_nan)

    def _verdict(self, error: float, ref_nan: bool) -> Verdict:
        wrong = is_wrong(error, ref_nan) or (math.isnan(error) and not ref_nan)
        within = not wrong and (math.isnan(error) or error <= self.bound)
        return Verdict(error=error, bound=self.bound, wrong=wrong, within=within)

    def _declared_error(self, reg: RegisteredSolver, config: Any) -> float | None:
        """The solver's own error bound for this problem (a finite number), or None."""
        try:
            declared = reg.solver.expected_error(self.state.context, self.canon, config)
        except Exception:  # a solver's estimate must not change a verdict by failing
            return None
        if declared is None or not math.isfinite(declared):
            return None
        return float(declared)

    def _measure_on_device(self) -> tuple[float, bool] | None:
        """(error, whether the reference has a NaN) measured by the backend's own reference
        (``device_reference``: no host reference, no output copy); None where the backend has
        none or it failed (the host path then runs, and the failure is logged once)."""
        device = self._device
        if device is False:
            return None
        if device is None:
            make = getattr(self.state.backend, "device_reference", None)
            if make is None or any(type(a).__module__ == "numpy" for a in self.arrays.values()):
                self._device = False
                return None
            try:
                device = self._device = make(self.canon, self.arrays, self.images, self.channels)
            except Exception as exc:
                log.warning("%s: accuracy check on the host: %s", self.problem.key, exc)
                self._device = False
                return None
        try:
            diff, scale, bad, ref_nan = device.compare()
        except Exception as exc:  # the check's own fault, not the candidate's
            log.warning("%s: accuracy check on the host: %s", self.problem.key, exc)
            self._device = False
            return None
        if bad:  # NaN or infinity where the reference is a number
            return (math.inf if ref_nan else math.nan), ref_nan
        return (diff / scale if scale > 0 else diff), ref_nan

    def reject(
        self, reg: RegisteredSolver, verdict: Verdict, report: Any, config: Any = None
    ) -> None:
        """Report a candidate that is over the bound; deny it when it is wrong. An error past
        the wrong-answer line but within the solver's own declared ``expected_error`` is the
        precision loss it promised (Winograd F(4x4, 3x3) in bf16), not a broken kernel:
        left out, not denied."""
        dtype = self.canon.dtype.value
        length = reduction_length(self.canon)
        declared = self._declared_error(reg, config) if verdict.wrong else None
        if not verdict.wrong or (declared is not None and verdict.error <= declared):
            own = "" if declared is None else f"; within its own declared error {declared:.3g}"
            report.skipped[reg.name] = (
                f"accuracy=default: relative error {verdict.error:.3g} over the bound "
                f"{verdict.bound:.3g} ({dtype}, reduction length {length}){own}"
            )
            return
        what = (
            "NaN where the reference has none"
            if math.isnan(verdict.error)
            else f"relative error {verdict.error:.3g} (bound {verdict.bound:.3g})"
        )
        # immediate mode must not find its invoker in the cache find filled
        self.state.invoker_cache.discard(self.problem.network_config, reg.name)
        deny = deny_list(self.state)
        entry = DenyEntry(
            solver=reg.name,
            versions=f"=={reg.version}" if _plain_version(reg.version) else "*",
            key_pattern=self.problem.key,
            reason=f"find measured a wrong answer: {what}",
        )
        where = ""
        try:
            deny.add(entry)
            where = f"; added to the user deny list {deny.user_path}"
        except OSError as exc:  # a read-only folder must not fail the find
            where = f"; could not add it to the deny list {deny.user_path}: {exc}"
        report.failed[reg.name] = (
            f"wrong answer on {self.problem.key}: {what} (plugin {reg.distribution} "
            f"{reg.version}){where}"
        )
        log.warning("%s: %s", reg.name, report.failed[reg.name])

    def keep(
        self,
        reg: RegisteredSolver,
        verdict: Verdict,
        policy: AccuracyPolicy,
        notes: frozenset[str] | None = None,
    ) -> None:
        """Remember what the FindDb record of ``reg`` says about its accuracy; ``notes``: the
        measured setting's numerical notes (default: the solver's declared ones)."""
        if notes is None:
            notes = frozenset(getattr(reg.solver, "numerical_notes", ()))
        self.errors[reg.name] = (verdict.error, bool(notes & self.lossy_notes))
        self.provenance[reg.name] = {
            "accuracy": policy.value,
            "error": f"{verdict.error:.3g}",
            "error_bound": f"{verdict.bound:.3g}",
            "numerical_notes": format_notes(notes),
        }


def against_plain_paths(check: AccuracyCheck, solutions: list[Any], report: Any) -> list[Any]:
    """``solutions`` less those with a lossy note whose measured error is over
    :data:`~miocore.solver.numerics.PLAIN_PATH_FACTOR` times the best plain candidate's of the
    same find (never below the output type's own rounding); each left out is reported with both
    numbers. Without a measured plain candidate nothing changes (the bound alone decides)."""
    plain = [
        (error, name)
        for name, (error, lossy) in check.errors.items()
        if not lossy and math.isfinite(error)
    ]
    if not plain:
        return solutions
    best, best_name = min(plain)
    limit = PLAIN_PATH_FACTOR * max(best, UNIT_ROUNDOFF[check.canon.dtype])
    kept = []
    for solution in solutions:
        error, lossy = check.errors.get(solution.solver, (math.nan, False))
        if lossy and error > limit:
            report.skipped[solution.solver] = (
                f"accuracy=default: relative error {error:.3g} over {PLAIN_PATH_FACTOR:g}x the "
                f"plain path's {best:.3g} ({best_name}, same data)"
            )
            check.provenance.pop(solution.solver, None)
            continue
        kept.append(solution)
    return kept


def _plain_version(version: str | None) -> bool:
    return bool(version) and all(part.isdigit() for part in str(version).split("."))
