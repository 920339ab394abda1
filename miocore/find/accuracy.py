"""The accuracy policy in find: notes filtered, candidates verified, wrong ones denied.

Three hooks, each small:

* :func:`filter_candidates` (the candidates step): denied solvers (``miocore.db.denylist``) are
  left out, then under ``accuracy="strict"`` every solver with a note that loses accuracy
  against a plain fp32-accumulating GEMM, and with ``deterministic=True`` every
  ``nondeterministic`` one; each with its reason in the report. :func:`check_not_denied` is the
  same rule for a solver asked for by name (immediate mode, ``compile_solution``).
* :class:`AccuracyCheck` (the find engine, ``default`` and ``strict`` policies; it lives in
  :mod:`miocore.find.verify`, loaded when find measures, never on a FindDb hit): the trusted
  float64 reference of the problem is computed once, from find's own input buffers; each
  candidate's output buffer is poisoned with NaN before its timed runs and compared with the
  reference afterwards, so checking costs no extra run of any candidate. A candidate whose
  error exceeds :func:`~miocore.solver.numerics.error_bound` is left out (the report gives both
  numbers); one that is plainly wrong (NaN where the reference has none, or an error over
  :data:`~miocore.solver.numerics.WRONG_ERROR`) is reported with its plugin and version and
  added to the user deny list. The measured error goes into the solution's note (so
  ``explain()`` shows it) and into the FindDb record's provenance.
* ``fast`` checks nothing.

**Reduced reference.** A large problem's float64 reference would cost more than its find, so
only a slice of the output is compared: the first images (forward, backward data) and, for
ungrouped problems, the first output channels, chosen so that the reference costs at most
:data:`REFERENCE_FLOPS` multiply-adds. Every compared element is a full output element: its
reduction over C·R·S (K·R·S, N·P·Q) is the problem's own, so the rounding error measured is the
one the whole output carries; only fewer elements are looked at.

**On a GPU** the backend's ``device_reference`` computes that slice in float64 on the device
once per find and compares each candidate's output there, returning three numbers: no numpy
reference, no copy of any output (:mod:`miocore.backends._gpu.reference`). Where it fails, the
host path above runs.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from miocore.db.denylist import DenyList
from miocore.errors import NotApplicableError
from miocore.problem.conv import ConvProblem
from miocore.solver.numerics import (
    LOSSY_NOTES,
    AccuracyPolicy,
    NumericalNote,
    accuracy_from_env,
    format_notes,
)
from miocore.solver.registry import RegisteredSolver

log = logging.getLogger("miocore.find")

#: Multiply-adds the float64 reference may spend per problem (about 20 ms of numpy on a
#: laptop core): larger problems are compared on a slice of their output.
REFERENCE_FLOPS = 2e7

#: Output channels compared at least, however large the problem (statistics need a few).
MIN_CHANNELS = 4

_DENY_LISTS: weakref.WeakKeyDictionary[Any, DenyList] = weakref.WeakKeyDictionary()


def policy_of(accuracy: Any) -> AccuracyPolicy:
    """The policy a call asked for (``accuracy=``), else ``MIOCORE_ACCURACY``."""
    return AccuracyPolicy.parse(accuracy) if accuracy is not None else accuracy_from_env()


def deny_list(state: Any) -> DenyList:
    """The deny list of the handle's device, next to its databases (one per find state)."""
    found = _DENY_LISTS.get(state)
    if found is None:
        found = _DENY_LISTS[state] = DenyList(
            state.device.identity, user_dir=state.user_db_path, system_dir=state.system_db_path
        )
    return found


def _denied_reason(
    state: Any, reg: RegisteredSolver, key: str, entries: list[Any] | None = None
) -> str | None:
    """Why the deny list denies ``reg`` on ``key`` (None when it does not); ``entries`` are
    the list's ``(layer, entry)`` pairs when the caller read them once for many solvers."""
    deny = deny_list(state)
    for layer, entry in deny.entries() if entries is None else entries:
        if entry.matches(reg.name, reg.version, key):
            path = deny.user_path if layer == "user" else deny.system_path
            return f"denied by the {layer} deny list ({path}): {entry.reason} ({entry.when})"
    return None


def filter_candidates(
    state: Any,
    problem: ConvProblem,
    candidates: list[Any],
    report: Any,
    *,
    policy: AccuracyPolicy,
    deterministic: bool,
) -> list[Any]:
    """The candidates the deny list, the policy and ``deterministic`` allow; the rest are
    written into ``report.skipped`` with the reason."""
    kept = []
    entries = deny_list(state).entries()  # both files looked at once per find, not per solver
    # Notes only decide here under strict or deterministic: otherwise none are asked for.
    asks_notes = deterministic or policy is AccuracyPolicy.STRICT
    for cand in candidates:
        reg = cand.reg
        notes = (
            notes_of(reg, state.context, problem.canonical, cand.perf_config)
            if asks_notes
            else frozenset()
        )
        denied = _denied_reason(state, reg, problem.key, entries) if entries else None
        if denied is not None:
            report.skipped[reg.name] = denied
        elif not policy.allows(notes):
            report.skipped[reg.name] = (
                f"accuracy=strict: numerical notes {format_notes(notes & LOSSY_NOTES)} lose "
                "accuracy against a plain fp32-accumulating GEMM"
            )
        elif deterministic and NumericalNote.NONDETERMINISTIC.value in notes:
            report.skipped[reg.name] = (
                "deterministic=True: its sums are unordered (split-K atomics), so runs differ"
            )
        else:
            kept.append(cand)
    return kept


def notes_of(reg: RegisteredSolver, ctx: Any, canon: ConvProblem, config: Any) -> frozenset[str]:
    """``reg``'s numerical notes on ``canon`` with ``config`` (:meth:`Solver.notes_for`); its
    class's notes where the solver has no such method or it raises (logged)."""
    solver = reg.solver
    declared = frozenset(getattr(solver, "numerical_notes", ()))
    method = getattr(solver, "notes_for", None)
    if method is None:
        return declared
    try:
        return frozenset(method(ctx, canon, config))
    except Exception as exc:
        log.warning("%s.notes_for failed, using its declared notes: %s", reg.name, exc)
        return declared


def check_not_denied(state: Any, problem: ConvProblem, reg: RegisteredSolver) -> None:
    """Raise NotApplicableError when the deny list denies ``reg`` on ``problem``."""
    denied = _denied_reason(state, reg, problem.key)
    if denied is not None:
        raise NotApplicableError(denied, field="solver", value=reg.name)
