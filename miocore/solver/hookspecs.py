"""Plugin hooks. Each hook is named after what it collects and yields small typed records.

A plugin is a module (or object) registered under the ``miocore`` entry point group::

    [project.entry-points.miocore]
    myfamily = "myfamily.plugin"

whose functions carry ``@miocore.hookimpl``. Hooks only collect registrations; the find loop
never goes through pluggy. The plugin module should import nothing heavy: every process that
uses miocore imports it, so its solvers are best declared lazily (``SolverRecord(factory=
"myfamily.solver:MySolver", name=..., algorithm=..., backends=...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import pluggy

from miocore.problem.conv import ConvProblem
from miocore.solver.interface import Algorithm, ExecutionContext, Solver
from miocore.values import field, frozen

PROJECT = "miocore"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


#: What a lazy record's ``factory`` may be: ``"module:attr"`` (imported on first use), or the
#: Solver subclass or zero-argument callable itself.
SolverFactory = str | Callable[[], Solver]


@frozen(kw_only=True)
class SolverRecord:
    """Registers one solver, in one of two forms.

    * ``solver``: an instance of a :class:`miocore.Solver` subclass (the eager form).
    * ``factory``, ``name``, ``algorithm``, ``backends``: the lazy form. miocore registers the
      declared ``name``, ``algorithm`` (an :class:`~miocore.Algorithm` or its value, such as
      ``"winograd"``) and ``backends`` (such as ``("cpu",)``) without importing anything, and
      makes the solver the first time a find asks it a question. ``factory`` is
      ``"package.module:attr"`` naming a Solver subclass or a zero-argument callable that
      returns an instance (or that class or callable itself). The solver it makes must
      declare the same name, algorithm and backends; a mismatch or an import error is a
      :class:`~miocore.PluginError` naming the plugin, and find goes on with the other
      solvers. A CPU handle then never imports a GPU solver's module, and a FindDb hit
      imports only the solvers its record names.

    The ``name`` must be unique across all plugins and must not change between releases
    (databases store it).

    ``library`` marks a vendor library's engine (cuDNN's, MIOpen's): the library decides per
    problem and per release which of its engines it offers, so a shipped system database that
    never recorded one says the library did not offer it there, not that the engine is new. A
    solver of miocore's own that such a database never recorded is a newcomer: a find that
    hits the database measures it beside the recorded ones (docs/find-modes.md).
    """

    solver: Solver | None = None
    factory: SolverFactory | None = None
    name: str | None = None
    algorithm: Algorithm | str | None = None
    backends: Iterable[str] = ()
    library: bool = False

    @property
    def is_lazy(self) -> bool:
        """Whether this record names a factory (made on first use) rather than an instance."""
        return self.solver is None and self.factory is not None


@frozen(kw_only=True)
class BuiltKernel:
    """What a :class:`KernelBuilder` makes of one kernel of a source: ``image``, what the driver
    loads (a cubin, a hsaco), and ``meta``, the launch facts only the compiler knows (JSON-able,
    such as the dynamic shared memory the kernel was laid out with; the solver's invoker reads
    them from ``CompiledKernel.meta``). The binary cache stores both."""

    image: bytes
    meta: dict[str, Any] = field(factory=dict)


class KernelBuilder(Protocol):
    """A compiler other than the driver's (NVRTC, hiprtc) for the sources of one folder, such
    as a kernel language embedded in Python. miocore keys its binary cache on the source's
    bytes, the options, the target and :meth:`version`, exactly as for its own sources."""

    def version(self) -> str:
        """The compiler and its version (a new version invalidates cached binaries)."""
        ...

    def build(
        self, source: Path, kernel_name: str, options: tuple[str, ...], backend: str, target: str
    ) -> BuiltKernel:
        """Compile ``kernel_name`` of ``source`` with ``options`` for ``backend`` (``"cuda"``,
        ``"hip"``) and ``target`` (``"sm_90"``, ``"gfx90a"``); raise with the compiler's
        message on failure (miocore reports it as a :class:`~miocore.CompileError`)."""
        ...


@frozen(kw_only=True)
class KernelSourceRecord:
    """Declares where a plugin's kernel sources live, for the GPU backends.

    ``name``: the plugin's kernel namespace (``KernelInfo.source`` is looked up in ``path``);
    ``path``: a folder inside the plugin's installed package; ``builder``: the compiler of
    that folder's sources where the driver's is not it, a :class:`KernelBuilder` or
    ``"package.module:attribute"`` naming one (imported on the first compile, so declaring
    the folder costs no import).
    """

    name: str
    path: Path
    builder: KernelBuilder | str | None = None


@frozen(kw_only=True)
class HeuristicRecord:
    """A learned model that ranks solvers for immediate mode on a FindDb miss.

    ``name``: unique name, shown as the source of its estimates.
    ``is_applicable(ctx, problem) -> bool``: whether the model covers this device and problem.
    ``rank(ctx, problem, candidates) -> [(solver_name, estimated_ms), ...]``: the candidates'
    names it can rank, fastest first; names it does not know are left out.
    """

    name: str
    is_applicable: Callable[[ExecutionContext, ConvProblem], bool]
    rank: Callable[[ExecutionContext, ConvProblem, Sequence[str]], Sequence[tuple[str, float]]]


class MiocoreSpecs:
    """Hook specifications (bodies are docstrings only)."""

    @hookspec
    def miocore_solvers(self) -> Iterable[SolverRecord]:
        """Yield a :class:`SolverRecord` for every solver the plugin provides."""

    @hookspec
    def miocore_kernel_sources(self) -> Iterable[KernelSourceRecord]:
        """Yield a :class:`KernelSourceRecord` for each folder of GPU kernel sources."""

    @hookspec
    def miocore_heuristics(self) -> Iterable[HeuristicRecord]:
        """Yield a :class:`HeuristicRecord` for each immediate-mode ranking model."""
