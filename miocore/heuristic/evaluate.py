"""How well a ranking picks the winner on recorded data: top-1, within 10%, regret.

For each held-out FindDb record, a ranking orders the recorded solvers; its first choice is
compared with the recorded best. Regret is ``time(choice) / best - 1``. This uses the recorded
times; ``benchmarks/find_quality.py`` re-times both choices in one run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from miocore.heuristic.train import Sample
from miocore.values import frozen

Ranking = Callable[[Sample], Sequence[str]]


@frozen(kw_only=True)
class Quality:
    """Share of problems with the best pick, with a pick within 10%, and regret statistics."""

    problems: int
    top1: float
    within_10pct: float
    mean_regret: float
    worst_regret: float
    worst_key: str = ""

    def line(self) -> str:
        """One line for a report."""
        return (
            f"{self.problems} problems: top-1 {100 * self.top1:.1f}%, within 10% "
            f"{100 * self.within_10pct:.1f}%, mean regret {100 * self.mean_regret:.1f}%, "
            f"worst {100 * self.worst_regret:.0f}% ({self.worst_key})"
        )


def quality(samples: Iterable[Sample], ranking: Ranking) -> Quality:
    """Score ``ranking`` (sample -> solver names, best first) on ``samples``."""
    n = top1 = within = 0
    regrets: list[tuple[float, str]] = []
    for s in samples:
        if len(s.times) < 1:
            continue
        order = [name for name in ranking(s) if name in s.times]
        choice = order[0] if order else sorted(s.times)[0]  # no opinion: an arbitrary pick
        best = min(s.times.values())
        regret = s.times[choice] / best - 1.0
        n += 1
        top1 += s.times[choice] == best
        within += regret <= 0.10
        regrets.append((regret, s.key))
    if not n:
        return Quality(problems=0, top1=0.0, within_10pct=0.0, mean_regret=0.0, worst_regret=0.0)
    worst, worst_key = max(regrets)
    return Quality(
        problems=n,
        top1=top1 / n,
        within_10pct=within / n,
        mean_regret=sum(r for r, _ in regrets) / n,
        worst_regret=worst,
        worst_key=worst_key,
    )
