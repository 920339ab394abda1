"""``MIOCORE_LOG_LEVEL``: route miocore's log records to stderr at the chosen level."""

from __future__ import annotations

import logging
import os

from miocore.errors import InvalidEnvironmentError

_LEVELS = {"0": "CRITICAL", "1": "ERROR", "2": "WARNING", "3": "INFO", "4": "DEBUG", "5": "DEBUG"}


def configure_from_env() -> None:
    """Apply ``MIOCORE_LOG_LEVEL`` (a name such as ``info`` or a number 0-5) once at import."""
    raw = os.environ.get("MIOCORE_LOG_LEVEL", "").strip()
    if not raw:
        return
    name = _LEVELS.get(raw, raw.upper())
    level = logging.getLevelName(name)
    if not isinstance(level, int):
        raise InvalidEnvironmentError(
            "expected a level name (debug, info, warning, error, critical) or 0-5",
            field="MIOCORE_LOG_LEVEL",
            value=raw,
        )
    logger = logging.getLogger("miocore")
    logger.setLevel(level)
    if not any(getattr(h, "_miocore", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("miocore %(levelname)s %(name)s: %(message)s"))
        handler._miocore = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
