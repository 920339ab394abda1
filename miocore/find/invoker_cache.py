"""In-memory invoker cache of a handle: compiled solutions ready to run, bounded in size."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from miocore.solver.interface import Algorithm, Invoker, PerfConfig
from miocore.values import frozen


@frozen(kw_only=True)
class CachedInvoker:
    """An invoker with what it was built from."""

    invoker: Invoker
    solver: str
    perf_config: PerfConfig | None
    workspace_size: int


class InvokerCache:
    """``(network_config, solver) -> invoker`` and ``(network_config, algorithm) -> solver``.

    Least recently used entries are dropped past ``max_entries`` so a long-running process
    that sees many shapes does not grow without bound. ``generation`` changes whenever an
    invoker is added, replaced or dropped, so a caller may keep what it looked up until then.
    """

    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        #: Bumped by every change to the invokers (see the class docstring).
        self.generation = 0
        self._invokers: OrderedDict[tuple[str, str], CachedInvoker] = OrderedDict()
        self._by_algorithm: OrderedDict[tuple[str, Algorithm], str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, network_config: str, solver: str) -> CachedInvoker | None:
        """The cached invoker of ``solver`` for this network config, if any."""
        with self._lock:
            found = self._invokers.get((network_config, solver))
            if found is not None:
                self._invokers.move_to_end((network_config, solver))
            return found

    def put(self, network_config: str, entry: CachedInvoker) -> None:
        """Remember an invoker (replacing one built with another perf config)."""
        with self._lock:
            self.generation += 1
            self._invokers[(network_config, entry.solver)] = entry
            self._invokers.move_to_end((network_config, entry.solver))
            _trim(self._invokers, self.max_entries)

    def discard(self, network_config: str, solver: str) -> None:
        """Forget ``solver``'s invoker for this network config (find proved it wrong)."""
        with self._lock:
            self.generation += 1
            self._invokers.pop((network_config, solver), None)
            for key in [k for k, v in self._by_algorithm.items() if v == solver]:
                if key[0] == network_config:
                    del self._by_algorithm[key]

    def solver_for(self, network_config: str, algorithm: Algorithm) -> str | None:
        """The solver Find 1.0 chose for ``algorithm`` on this network config."""
        with self._lock:
            return self._by_algorithm.get((network_config, algorithm))

    def set_solver_for(self, network_config: str, algorithm: Algorithm, solver: str) -> None:
        """Record Find 1.0's choice for ``algorithm``."""
        with self._lock:
            self._by_algorithm[(network_config, algorithm)] = solver
            self._by_algorithm.move_to_end((network_config, algorithm))
            _trim(self._by_algorithm, self.max_entries)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self.generation += 1
            self._invokers.clear()
            self._by_algorithm.clear()

    def __len__(self) -> int:
        return len(self._invokers)


def _trim(table: OrderedDict[Any, Any], limit: int) -> None:
    while len(table) > limit:
        table.popitem(last=False)
