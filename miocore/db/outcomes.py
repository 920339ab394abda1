"""What an import into the FindDb or a merge of another database did (loaded with either)."""

from __future__ import annotations

from collections.abc import Mapping

from miocore.db.text import BadLine
from miocore.values import field, frozen

__all__ = ["ImportResult", "MergeResult"]


@frozen(kw_only=True)
class ImportResult:
    """What :meth:`FindDb.import_text` did: records and entries written, lines skipped.

    ``skip_counts`` counts skipped lines per reason; ``skipped`` holds the first examples of
    each reason (all of them in strict mode's error). ``lines`` read, ``seconds`` taken.
    """

    records: int
    entries: int
    skipped: tuple[BadLine, ...] = ()
    skip_counts: Mapping[str, int] = field(factory=dict)
    lines: int = 0
    seconds: float = 0.0

    @property
    def skipped_total(self) -> int:
        """How many lines were skipped, all reasons together."""
        return sum(self.skip_counts.values())


@frozen(kw_only=True)
class MergeResult:
    """What :meth:`FindDb.merge_from` did.

    ``added``: entries for solvers the user record lacked; ``replaced``: entries whose faster
    time won; ``kept``: source entries not faster than the user's; ``keys``: records changed;
    ``perf_added``: PerfDb entries copied (SQLite sources only); ``skipped``: bad text lines.
    """

    keys: int
    added: int
    replaced: int
    kept: int
    perf_added: int = 0
    skipped: tuple[BadLine, ...] = ()
