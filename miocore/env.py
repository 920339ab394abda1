"""Environment switches (``MIOCORE_*``), parsed strictly: a bad value is an error naming it."""

from __future__ import annotations

import os
from enum import IntEnum
from typing import Any

from miocore.errors import InvalidEnvironmentError


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


def _parse_enum(cls: Any, value: Any, field: str, reserved: dict[int, str] | None = None) -> Any:
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
    """``MIOCORE_FIND_MODE`` (default DYNAMIC_HYBRID)."""
    raw = os.environ.get("MIOCORE_FIND_MODE", "").strip()
    return FindMode.parse(raw) if raw else FindMode.DYNAMIC_HYBRID


def find_enforce() -> FindEnforce:
    """``MIOCORE_FIND_ENFORCE`` (default NONE)."""
    raw = os.environ.get("MIOCORE_FIND_ENFORCE", "").strip()
    return FindEnforce.parse(raw) if raw else FindEnforce.NONE


def _names(var: str) -> frozenset[str]:
    raw = os.environ.get(var, "")
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def disabled_plugins() -> frozenset[str]:
    """``MIOCORE_DISABLE_PLUGINS``: comma-separated plugin or distribution names, or ``all``."""
    return _names("MIOCORE_DISABLE_PLUGINS")


def only_solver() -> str | None:
    """``MIOCORE_FIND_ONLY_SOLVER``: restrict find and immediate mode to one solver name or id."""
    raw = os.environ.get("MIOCORE_FIND_ONLY_SOLVER", "").strip()
    return raw or None


_TRUE = {"1", "true", "yes", "on", "enabled"}
_FALSE = {"0", "false", "no", "off", "disabled"}


def flag(var: str, default: bool) -> bool:
    """A boolean switch: 1/0, true/false, yes/no, on/off."""
    raw = os.environ.get(var)
    if raw is None or not raw.strip():
        return default
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
    """An integer switch that must be >= 1."""
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidEnvironmentError("expected an integer >= 1", field=var, value=raw)
    return value
