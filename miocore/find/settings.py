"""The find engine's switches: how hard a find prunes, which settings it also measures, when
it tunes (design guide §4)."""

from __future__ import annotations

from miocore import env
from miocore.env import FindEnforce
from miocore.errors import InvalidEnvironmentError


def _factor(name: str, default: float) -> float:
    """A factor from the environment variable ``name``: 0 (off) or >= 1."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value != 0 and value < 1:
        raise InvalidEnvironmentError("expected 0 (off) or a factor >= 1", field=name, value=raw)
    return value


def prune_factor() -> float:
    """``MIOCORE_FIND_PRUNE_FACTOR`` (default 20; 0 turns pruning off)."""
    return _factor("MIOCORE_FIND_PRUNE_FACTOR", 20.0)


def estimate_prune_factor() -> float:
    """``MIOCORE_FIND_ESTIMATE_PRUNE``: DYNAMIC_HYBRID's miss leaves out a candidate the
    heuristic estimates over this many times its best estimate (default 4; 0 turns it off)."""
    return _factor("MIOCORE_FIND_ESTIMATE_PRUNE", 4.0)


def alternatives_factor() -> float:
    """``MIOCORE_FIND_ALTERNATIVES``: how near the best a solver's default must come for a
    normal find to measure its other listed settings (default 1.3; 0 turns it off)."""
    return _factor("MIOCORE_FIND_ALTERNATIVES", 1.3)


def should_tune(enforce: FindEnforce, exhaustive: bool, has_entry: bool) -> bool:
    """Whether find tunes a tunable solver (design guide §4, find enforce)."""
    if enforce is FindEnforce.SEARCH_DB_UPDATE:
        return True
    if enforce is FindEnforce.SEARCH:
        return not has_entry
    if enforce is FindEnforce.DB_UPDATE:
        return exhaustive
    if enforce is FindEnforce.DB_CLEAN:
        return False
    return exhaustive and not has_entry
