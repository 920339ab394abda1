"""Plugin discovery and the solver registry.

Plugins are found through the ``miocore`` entry point group. A plugin that fails to import, or
whose hook raises or yields a malformed record, is logged with its distribution and version
and skipped; the others load. Two solvers with one name are refused, naming every provider.
"""

from __future__ import annotations

import logging
import re
import threading
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import pluggy

from miocore import env
from miocore._digest import blake2b
from miocore.errors import PluginError, UnknownSolverError
from miocore.solver import lazy
from miocore.solver.entry_points import entry_points
from miocore.solver.hookspecs import (
    PROJECT,
    HeuristicRecord,
    KernelSourceRecord,
    MiocoreSpecs,
    SolverRecord,
)
from miocore.solver.interface import Algorithm, Solver
from miocore.values import evolve, frozen

log = logging.getLogger("miocore.plugins")

ENTRY_POINT_GROUP = "miocore"
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


class PluginWarning(UserWarning):
    """A plugin was skipped or one of its records was refused."""


def solver_id(name: str) -> int:
    """Stable numeric id of a solver name: 31 bits of its BLAKE2b digest."""
    digest = blake2b(name.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


@frozen(kw_only=True)
class PluginInfo:
    """One plugin as the registry saw it: where it came from and how loading went."""

    name: str
    distribution: str
    version: str
    status: str  # "active", "disabled" or "failed"
    error: str | None = None
    solvers: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``name (distribution version)`` for messages."""
        return f"{self.name} ({self.distribution} {self.version})"


class RegisteredSolver:
    """A solver with its stable id and provenance.

    ``name``, ``algorithm`` and ``backends`` are known without the solver: for a lazy record
    (``SolverRecord(factory=...)``) they are the declared ones, and ``solver`` makes the solver
    on first access (once, thread-safe), checking it against them; a failure is a
    :class:`~miocore.PluginError` naming the plugin, raised again on every access.
    """

    def __init__(
        self,
        *,
        id: int,
        plugin: str,
        distribution: str,
        version: str,
        solver: Solver | None = None,
        factory: Any = None,
        name: str | None = None,
        algorithm: Algorithm | None = None,
        backends: frozenset[str] | None = None,
        library: bool = False,
    ) -> None:
        self.id = id
        #: A vendor library's engine (``SolverRecord.library``).
        self.library = library
        self.plugin = plugin
        self.distribution = distribution
        self.version = version
        self._solver = solver
        self._factory = factory
        self._error: PluginError | None = None
        self._lock = threading.Lock() if solver is None else None
        #: The solver's stable name.
        self.name: str = solver.name if solver is not None else str(name)
        #: The solver's algorithm family.
        self.algorithm: Algorithm = solver.algorithm if solver is not None else algorithm  # type: ignore[assignment]
        #: The backends it runs on.
        self.backends: frozenset[str] = frozenset(
            solver.backends if solver is not None else (backends or ())
        )

    @property
    def is_made(self) -> bool:
        """Whether the solver exists already (always, for an instance record)."""
        return self._solver is not None

    @property
    def factory(self) -> Any:
        """What a lazy record declared as its factory (``"module:attr"`` or a callable); None
        for a solver registered as an instance."""
        return self._factory

    @property
    def solver(self) -> Solver:
        """The solver instance, made on first access for a lazy record."""
        solver = self._solver
        if solver is not None:
            return solver
        with self._lock:  # type: ignore[union-attr]
            if self._solver is None:
                if self._error is None:
                    try:
                        self._solver = lazy.make(
                            self._factory,
                            name=self.name,
                            algorithm=self.algorithm,
                            backends=self.backends,
                            label=self.label,
                        )
                    except PluginError as exc:
                        log.warning("%s", exc)
                        self._error = exc
                if self._error is not None:  # a broken import does not heal in a process
                    raise self._error.with_traceback(None)
            return self._solver  # type: ignore[return-value]

    @property
    def label(self) -> str:
        """``plugin (distribution version)`` for messages."""
        return f"{self.plugin} ({self.distribution} {self.version})"

    def _key(self) -> tuple[str, int, str, str, str]:
        return (self.name, self.id, self.plugin, self.distribution, self.version)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RegisteredSolver):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        state = "made" if self._solver is not None else "lazy"
        return (
            f"RegisteredSolver(name={self.name!r}, id={self.id}, plugin={self.plugin!r}, "
            f"distribution={self.distribution!r}, version={self.version!r}, {state})"
        )


@frozen(kw_only=True)
class _Plugin:
    name: str
    module: Any
    distribution: str
    version: str


class Registry:
    """The installed solvers, kernel source folders and heuristics, in a stable order."""

    def __init__(
        self,
        solvers: Sequence[RegisteredSolver] = (),
        plugins: Sequence[PluginInfo] = (),
        kernel_sources: Sequence[tuple[PluginInfo, KernelSourceRecord]] = (),
        heuristics: Sequence[tuple[PluginInfo, HeuristicRecord]] = (),
    ) -> None:
        self.solvers: tuple[RegisteredSolver, ...] = tuple(solvers)
        self.plugins: tuple[PluginInfo, ...] = tuple(plugins)
        self.kernel_sources = tuple(kernel_sources)
        self.heuristics = tuple(heuristics)
        self._by_name = {s.name: s for s in self.solvers}
        self._by_id = {s.id: s for s in self.solvers}

    # -- lookups ---------------------------------------------------------------------------

    def get(self, name_or_id: str | int) -> RegisteredSolver:
        """The registered solver with this name or numeric id."""
        found = None
        if isinstance(name_or_id, int) or (isinstance(name_or_id, str) and name_or_id.isdigit()):
            found = self._by_id.get(int(name_or_id))
        if found is None and isinstance(name_or_id, str):
            found = self._by_name.get(name_or_id)
        if found is None:
            known = ", ".join(sorted(self._by_name)) or "none (no solver plugin is installed)"
            raise UnknownSolverError(
                f"no installed solver has this name or id; installed: {known}",
                field="solver",
                value=name_or_id,
            )
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.solvers)

    def __len__(self) -> int:
        return len(self.solvers)

    def names(self) -> list[str]:
        """Solver names in registration order."""
        return [s.name for s in self.solvers]

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def from_solvers(
        cls,
        solvers: Iterable[Solver],
        *,
        plugin: str = "local",
        distribution: str = "local",
        version: str = "0",
    ) -> Registry:
        """A registry holding exactly the given solver instances (for tests and embedding)."""
        info = PluginInfo(name=plugin, distribution=distribution, version=version, status="active")
        records = [SolverRecord(solver=s) for s in solvers]
        providers: dict[str, list[str]] = {}
        registered = _register(records, info, providers)
        _refuse_duplicates(providers)
        names = tuple(r.name for r in registered)
        return cls(registered, [evolve(info, solvers=names)])

    @classmethod
    def from_plugins(
        cls, plugins: Iterable[tuple[str, Any, str, str]], disabled: Iterable[str] = ()
    ) -> Registry:
        """Build from ``(name, module_or_object, distribution, version)`` plugin tuples."""
        return _build(
            [_Plugin(name=n, module=m, distribution=d, version=v) for n, m, d, v in plugins],
            [],
            frozenset(disabled),
        )

    @classmethod
    def discover(cls) -> Registry:
        """Load every plugin of the ``miocore`` entry point group, honouring
        ``MIOCORE_DISABLE_PLUGINS``."""
        disabled = env.disabled_plugins()
        loaded: list[_Plugin] = []
        failed: list[PluginInfo] = []
        seen: set[tuple[str, str]] = set()
        for ep in entry_points(ENTRY_POINT_GROUP):  # sorted by name; a cached scan
            dist, version = ep.distribution, ep.version
            if (ep.name, dist) in seen:  # the same distribution found twice on sys.path
                continue
            seen.add((ep.name, dist))
            if _is_disabled(ep.name, dist, disabled):
                failed.append(
                    PluginInfo(
                        name=ep.name,
                        distribution=dist,
                        version=version,
                        status="disabled",
                        error="MIOCORE_DISABLE_PLUGINS",
                    )
                )
                continue
            try:
                module = ep.load()
            except Exception as exc:  # a broken plugin must not take miocore down
                message = f"{type(exc).__name__}: {exc}"
                _warn(
                    f"plugin {ep.name} ({dist} {version}) failed to import and is skipped: "
                    f"{message}"
                )
                failed.append(
                    PluginInfo(
                        name=ep.name,
                        distribution=dist,
                        version=version,
                        status="failed",
                        error=message,
                    )
                )
                continue
            loaded.append(_Plugin(name=ep.name, module=module, distribution=dist, version=version))
        return _build(loaded, failed, frozenset())


def _is_disabled(name: str, dist: str, disabled: frozenset[str]) -> bool:
    lowered = {d.lower() for d in disabled}
    return "all" in lowered or name.lower() in lowered or dist.lower() in lowered


def _warn(message: str) -> None:
    log.warning(message)
    warnings.warn(message, PluginWarning, stacklevel=3)


def _build(plugins: list[_Plugin], infos: list[PluginInfo], disabled: frozenset[str]) -> Registry:
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(MiocoreSpecs)
    solvers: list[RegisteredSolver] = []
    providers: dict[str, list[str]] = {}
    kernel_sources: list[tuple[PluginInfo, KernelSourceRecord]] = []
    heuristics: list[tuple[PluginInfo, HeuristicRecord]] = []
    infos = list(infos)
    for plugin in plugins:
        info = PluginInfo(
            name=plugin.name,
            distribution=plugin.distribution,
            version=plugin.version,
            status="active",
        )
        if _is_disabled(plugin.name, plugin.distribution, disabled):
            infos.append(evolve(info, status="disabled", error="disabled by the caller"))
            continue
        try:
            pm.register(plugin.module, name=plugin.name)
        except Exception as exc:  # pluggy validates hook signatures here
            message = f"{type(exc).__name__}: {exc}"
            _warn(f"plugin {info.label} is malformed and is skipped: {message}")
            infos.append(evolve(info, status="failed", error=message))
            continue
        try:
            solver_records = _collect(pm, plugin.name, "miocore_solvers")
            kernel_records = _collect(pm, plugin.name, "miocore_kernel_sources")
            heuristic_records = _collect(pm, plugin.name, "miocore_heuristics")
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            _warn(f"plugin {info.label} raised while registering and is skipped: {message}")
            infos.append(evolve(info, status="failed", error=message))
            pm.unregister(name=plugin.name)
            continue
        registered = _register(solver_records, info, providers)
        for rec in kernel_records:
            if isinstance(rec, KernelSourceRecord):
                kernel_sources.append((info, rec))
            else:
                _warn(
                    f"plugin {info.label} yielded {rec!r} from miocore_kernel_sources; "
                    "expected a KernelSourceRecord; ignored"
                )
        for rec in heuristic_records:
            if isinstance(rec, HeuristicRecord):
                heuristics.append((info, rec))
            else:
                _warn(
                    f"plugin {info.label} yielded {rec!r} from miocore_heuristics; "
                    "expected a HeuristicRecord; ignored"
                )
        solvers.extend(registered)
        infos.append(evolve(info, solvers=tuple(r.name for r in registered)))
    _refuse_duplicates(providers)
    return Registry(solvers, infos, kernel_sources, heuristics)


def _collect(pm: pluggy.PluginManager, plugin_name: str, hook: str) -> list[Any]:
    caller = getattr(pm.hook, hook)
    records: list[Any] = []
    for impl in caller.get_hookimpls():
        if impl.plugin_name != plugin_name:
            continue
        result = impl.function()
        if result is not None:
            records.extend(result)
    return records


def _register(
    records: Iterable[Any], info: PluginInfo, providers: dict[str, list[str]]
) -> list[RegisteredSolver]:
    out: list[RegisteredSolver] = []
    for rec in records:
        problem = _record_problem(rec)
        if problem:
            _warn(f"plugin {info.label} registered a malformed solver record ({problem}); ignored")
            continue
        if rec.solver is not None:
            reg = RegisteredSolver(
                solver=rec.solver,
                id=solver_id(rec.solver.name),
                plugin=info.name,
                distribution=info.distribution,
                version=info.version,
                library=rec.library,
            )
        else:  # lazy: nothing of the solver is imported here
            reg = RegisteredSolver(
                factory=rec.factory,
                name=rec.name,
                algorithm=lazy.declared_algorithm(rec.algorithm),
                backends=lazy.declared_backends(rec.backends),
                id=solver_id(rec.name),
                plugin=info.name,
                distribution=info.distribution,
                version=info.version,
                library=rec.library,
            )
        providers.setdefault(reg.name, []).append(info.label)
        out.append(reg)
    return out  # the caller refuses duplicates once, over every plugin's names


def _record_problem(rec: Any) -> str | None:
    if not isinstance(rec, SolverRecord):
        return f"expected miocore.SolverRecord, got {type(rec).__name__}"
    if not isinstance(rec.library, bool):
        return f"library={rec.library!r} must be True or False"
    if rec.solver is None and rec.factory is not None:
        return _lazy_problem(rec)
    if rec.factory is not None or rec.name is not None or rec.algorithm is not None:
        return "give either solver=<instance> or factory=... with name, algorithm and backends"
    solver = rec.solver
    if not isinstance(solver, Solver):
        return f"solver must be a miocore.Solver instance, got {type(solver).__name__}"
    name = getattr(solver, "name", None)
    if not isinstance(name, str) or not _NAME_RE.match(name):
        return f"solver name {name!r} must be a dotted identifier such as 'family.variant'"
    if not isinstance(getattr(solver, "algorithm", None), Algorithm):
        algorithm = getattr(solver, "algorithm", None)
        return f"solver {name!r} has algorithm {algorithm!r}, expected a miocore.Algorithm"
    backends = getattr(solver, "backends", None)
    if not isinstance(backends, (frozenset, set, tuple)) or not backends:
        return f"solver {name!r} must list its backends"
    return None


def _lazy_problem(rec: SolverRecord) -> str | None:
    """What is wrong with a lazy record (the same rules as an instance's, on what it declares)."""
    name = rec.name
    if not isinstance(name, str) or not _NAME_RE.match(name):
        return f"name={name!r}: must be a dotted identifier such as 'family.variant'"
    flaw = lazy.factory_problem(rec.factory)
    if flaw:
        return f"solver {name!r}: {flaw}"
    if lazy.declared_algorithm(rec.algorithm) is None:
        known = ", ".join(a.value for a in Algorithm)
        return f"solver {name!r}: algorithm={rec.algorithm!r} is not one of {known}"
    if lazy.declared_backends(rec.backends) is None:
        return (
            f"solver {name!r}: backends={rec.backends!r} must be a non-empty tuple of backend "
            "names such as ('cpu',)"
        )
    return None


def _refuse_duplicates(providers: dict[str, list[str]]) -> None:
    duplicates = {name: who for name, who in providers.items() if len(who) > 1}
    if duplicates:
        lines = "; ".join(
            f"{name!r} is provided by {', '.join(who)}" for name, who in duplicates.items()
        )
        raise PluginError(
            f"duplicate solver names: {lines}. Uninstall one of the plugins or disable it with "
            "MIOCORE_DISABLE_PLUGINS=<plugin>"
        )
    ids: dict[int, str] = {}
    for name in providers:
        other = ids.setdefault(solver_id(name), name)
        if other != name:
            raise PluginError(
                f"solver names {other!r} and {name!r} hash to the same id; rename one"
            )


_default: Registry | None = None
_default_key: str | None = None
_lock = threading.Lock()


def default_registry() -> Registry:
    """The process-wide registry of installed plugins (rebuilt when MIOCORE_DISABLE_PLUGINS
    changes)."""
    global _default, _default_key
    key = ",".join(sorted(env.disabled_plugins()))
    with _lock:
        if _default is None or key != _default_key:
            _default = Registry.discover()
            _default_key = key
        return _default


def reset_default_registry() -> None:
    """Forget the discovered plugins, so the next use discovers them again."""
    global _default
    with _lock:
        _default = None
