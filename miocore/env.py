"""Environment switches (``MIOCORE_*``), parsed strictly: a bad value is an error naming it.

MIOpen's own names (``MIOPEN_FIND_MODE``, ``MIOPEN_USER_DB_PATH``, ...) are honoured as
aliases: :func:`get` is the one lookup every reader uses. A ``MIOCORE_*`` value wins over its
alias; when both are set and differ, the conflict is logged once.
"""

from __future__ import annotations

import logging
import os
from enum import IntEnum
from typing import Any, TypeVar

from miocore.errors import InvalidEnvironmentError

_log = logging.getLogger(__name__)

_CONV_FAMILIES = ("DIRECT", "WINOGRAD", "IMPLICIT_GEMM", "FFT", "GEMM")

#: ``MIOCORE_*`` switch -> the MIOpen variable honoured in its place (same values).
MIOPEN_ALIASES: dict[str, str] = {
    "MIOCORE_FIND_MODE": "MIOPEN_FIND_MODE",
    "MIOCORE_FIND_ENFORCE": "MIOPEN_FIND_ENFORCE",
    "MIOCORE_FIND_ONLY_SOLVER": "MIOPEN_DEBUG_FIND_ONLY_SOLVER",
    "MIOCORE_USER_DB_PATH": "MIOPEN_USER_DB_PATH",
    "MIOCORE_SYSTEM_DB_PATH": "MIOPEN_SYSTEM_DB_PATH",
    "MIOCORE_LOG_LEVEL": "MIOPEN_LOG_LEVEL",
    "MIOCORE_DISABLE_CACHE": "MIOPEN_DISABLE_CACHE",
    "MIOCORE_KERNEL_CACHE_PATH": "MIOPEN_CUSTOM_CACHE_DIR",
    "MIOCORE_COMPILE_PARALLEL_LEVEL": "MIOPEN_COMPILE_PARALLEL_LEVEL",
    **{f"MIOCORE_DEBUG_CONV_{f}": f"MIOPEN_DEBUG_CONV_{f}" for f in _CONV_FAMILIES},
}

_conflicts_logged: set[str] = set()


def lookup(name: str) -> tuple[str, str] | None:
    """``(variable, value)`` of switch ``name`` or of its MIOpen alias; None when neither is set.

    Blank values count as unset. The variable is returned so an error can name the one the
    user actually set.
    """
    own = os.environ.get(name, "")
    alias = MIOPEN_ALIASES.get(name)
    other = os.environ.get(alias, "") if alias else ""
    if own.strip():
        conflict = bool(alias) and bool(other.strip()) and other.strip() != own.strip()
        if conflict and name not in _conflicts_logged:
            _conflicts_logged.add(name)
            _log.warning("%s=%r and %s=%r disagree: %s wins", name, own, alias, other, name)
        return name, own
    if alias and other.strip():
        return alias, other
    return None


def get(name: str, default: str = "") -> str:
    """The value of switch ``name`` (a ``MIOCORE_*`` name), else of its MIOpen alias, else
    ``default``. Every reader of a ``MIOCORE_*`` variable goes through this."""
    found = lookup(name)
    return found[1] if found is not None else default


_E = TypeVar("_E", bound=IntEnum)


class FindMode(IntEnum):
    """How find uses the FindDb (design guide, section 4). 4 is reserved."""

    NORMAL = 1
    FAST = 2
    HYBRID = 3
    DYNAMIC_HYBRID = 5

    @classmethod
    def parse(cls, value: Any, field: str = "MIOCORE_FIND_MODE") -> FindMode:
        """Accept a FindMode, a number, or a name in any case."""
        return _parse_enum(cls, value, field, reserved={4: "find mode 4 is reserved"})


class FindEnforce(IntEnum):
    """Overrides of the find mode for (re)tuning and cleaning (design guide, section 4)."""

    NONE = 1
    DB_UPDATE = 2
    SEARCH = 3
    SEARCH_DB_UPDATE = 4
    DB_CLEAN = 5

    @classmethod
    def parse(cls, value: Any, field: str = "MIOCORE_FIND_ENFORCE") -> FindEnforce:
        """Accept a FindEnforce, a number, or a name in any case."""
        return _parse_enum(cls, value, field)


def _parse_enum(
    cls: type[_E], value: Any, field: str, reserved: dict[int, str] | None = None
) -> _E:
    if isinstance(value, cls):
        return value
    text = str(value).strip()
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif text.isdigit():
        number = int(text)
    if number is not None:
        if reserved and number in reserved:
            raise InvalidEnvironmentError(reserved[number], field=field, value=value)
        try:
            return cls(number)
        except ValueError:
            pass
    else:
        name = text.upper().replace("-", "_")
        if name in cls.__members__:
            return cls.__members__[name]
    choices = ", ".join(f"{m.name}={m.value}" for m in cls)
    raise InvalidEnvironmentError(f"expected one of {choices}", field=field, value=value)


def find_mode() -> FindMode:
    """``MIOCORE_FIND_MODE`` or ``MIOPEN_FIND_MODE`` (default DYNAMIC_HYBRID)."""
    found = lookup("MIOCORE_FIND_MODE")
    if found is None:
        return FindMode.DYNAMIC_HYBRID
    return FindMode.parse(found[1].strip(), found[0])


def find_enforce() -> FindEnforce:
    """``MIOCORE_FIND_ENFORCE`` or ``MIOPEN_FIND_ENFORCE`` (default NONE)."""
    found = lookup("MIOCORE_FIND_ENFORCE")
    if found is None:
        return FindEnforce.NONE
    return FindEnforce.parse(found[1].strip(), found[0])


def _names(var: str) -> frozenset[str]:
    raw = get(var)
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def disabled_plugins() -> frozenset[str]:
    """``MIOCORE_DISABLE_PLUGINS``: comma-separated plugin or distribution names, or ``all``."""
    return _names("MIOCORE_DISABLE_PLUGINS")


def only_solver() -> str | None:
    """``MIOCORE_FIND_ONLY_SOLVER``: restrict find and immediate mode to one solver name or id."""
    raw = get("MIOCORE_FIND_ONLY_SOLVER").strip()
    return raw or None


_TRUE = {"1", "true", "yes", "on", "enabled"}
_FALSE = {"0", "false", "no", "off", "disabled"}


def flag(var: str, default: bool) -> bool:
    """A boolean switch: 1/0, true/false, yes/no, on/off (or its MIOpen alias)."""
    found = lookup(var)
    if found is None:
        return default
    var, raw = found
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidEnvironmentError(
        "expected 1/0, true/false, yes/no or on/off", field=var, value=raw
    )


def algorithm_enabled(algorithm: str) -> bool:
    """Per-family switch ``MIOCORE_DEBUG_CONV_<FAMILY>`` (e.g. ``MIOCORE_DEBUG_CONV_GEMM=0``)."""
    return flag(f"MIOCORE_DEBUG_CONV_{algorithm.upper()}", True)


def positive_int(var: str, default: int) -> int:
    """An integer switch that must be >= 1 (or its MIOpen alias)."""
    found = lookup(var)
    if found is None:
        return default
    var, raw = found[0], found[1].strip()
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidEnvironmentError("expected an integer >= 1", field=var, value=raw)
    return value
