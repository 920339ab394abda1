"""What every step of find shares: one device, its context, the solvers, the databases, caches.

A :class:`FindState` is owned by one :class:`~miocore.find.handle.Handle`; the candidates step,
the find engine, the immediate ranker and the runner each read it and never each other's
internals.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from miocore.db.mathkeys import record_key
from miocore.find.invoker_cache import InvokerCache
from miocore.solver.interface import ExecutionContext
from miocore.solver.registry import Registry, default_registry


class FindState:
    """The device, its execution context, the registry and the lazily opened databases."""

    def __init__(
        self,
        backend: Any,
        context: ExecutionContext,
        *,
        registry: Registry | None,
        user_db_path: Path | None,
        system_db_path: Path | None,
    ) -> None:
        self.backend = backend
        self.context = context
        self.device = context.device
        self._registry = registry
        self.user_db_path = user_db_path
        self.system_db_path = system_db_path
        self._find_db: Any = None
        self._perf_db: Any = None
        self.invoker_cache = InvokerCache()
        #: Called when a problem's records change (a write, a tune, a clean): memos forget it.
        self.forget_hooks: list[Callable[[str], None]] = []

    @property
    def registry(self) -> Registry:
        """The solvers this handle considers (the installed plugins unless one was given)."""
        return self._registry if self._registry is not None else default_registry()

    @property
    def find_db(self) -> Any:
        """The FindDb of this device (user layer first, then system)."""
        if self._find_db is None:
            from miocore.db import FindDb

            self._find_db = FindDb(
                self.device.identity, user_dir=self.user_db_path, system_dir=self.system_db_path
            )
        return self._find_db

    @property
    def perf_db(self) -> Any:
        """The PerfDb (tuned performance configs) of this device."""
        if self._perf_db is None:
            from miocore.db import PerfDb

            # Same file as the FindDb: share its user layer (one fallback, one warning).
            self._perf_db = PerfDb.sharing(self.find_db)
        return self._perf_db

    def record_key(self, problem: Any) -> str:
        """The key of ``problem``'s FindDb and PerfDb records in this handle's math mode
        (:func:`miocore.db.mathkeys.record_key`)."""
        return record_key(problem, self.context.math_mode)

    def forget(self, key: str) -> None:
        """A record of ``key`` changed: drop what any step memoized about it."""
        for hook in self.forget_hooks:
            hook(key)
