"""The runner: from a chosen solver to a call on the caller's buffers.

``build`` turns a solver's ``ConvSolution`` into a cached invoker (compile, invoker factory);
``run`` checks the caller's arrays against the problem and calls the invoker, blending with
alpha/beta when asked. This is the per-call path of every run call.

On a device backend ``run`` remembers each invoker's last call: a call whose arrays have the
same signature (address, shape, strides, dtype, device) as the remembered one skips the checks
and reuses its arguments; from the second call alike on, its launches are recorded once as a
graph (where the backend has graphs and it pays, :func:`graph_min_nodes`) that later calls
alike replay with one driver call. The remembered arguments hold bare device addresses, never
the caller's tensors; the CPU's numpy views would hold the caller's arrays, so the CPU checks
every call (its checks cost a few microseconds).
"""

from __future__ import annotations

from typing import Any

from miocore.errors import MiocoreError, PluginError
from miocore.find.blame import naming_culprit, solver_failure
from miocore.find.invoker_cache import CachedInvoker
from miocore.find.state import FindState
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import ConvSolution, InvokeParams, KernelInfo, PerfConfig
from miocore.solver.registry import RegisteredSolver

#: Invokers whose last call ``run`` remembers (forgotten all at once past it).
MAX_REMEMBERED = 256
#: What an invoker without a remembered call looks up.
_NOTHING = (None, None, None, None, None, False)


def graph_min_nodes(backend: Any, invoker: Any) -> int:
    """The fewest launches a call's graph must hold to be worth keeping: one where the
    invoker's host side is dear (a library, ``replay_pays``) or the driver replays a graph
    for less than a launch (``graph_replay_beats_launch``), else two."""
    driver = getattr(backend, "driver", None)
    single = getattr(invoker, "replay_pays", False) or getattr(
        driver, "graph_replay_beats_launch", False
    )
    return 1 if single else 2


class Runner:
    """Builds and runs invokers for one handle; ``owner`` is what invokers receive as handle."""

    def __init__(self, state: FindState, owner: Any) -> None:
        self.state = state
        self.owner = owner
        #: id(entry) -> [entry, problem, signature, params, graph, record next time] of the
        #: entry's last call.
        self._remembered: dict[int, list[Any]] = {}
        self._remember = state.backend.name != "cpu"

    def build(
        self, problem: ConvProblem, reg: RegisteredSolver, config: PerfConfig | None
    ) -> CachedInvoker:
        """Compile ``reg``'s solution of ``problem`` and cache its invoker."""
        state = self.state
        canon = problem.canonical
        with naming_culprit(reg, "get_solution"):
            solution = reg.solver.get_solution(state.context, canon, config)
        _check_solution(reg, solution)
        compiled = state.backend.compile(solution.kernels)
        with naming_culprit(reg, "invoker_factory"):
            invoker = solution.invoker_factory(compiled)
        if not callable(invoker):
            raise PluginError(
                f"{_culprit(reg)}: its invoker_factory returned {type(invoker).__name__}, "
                "not a callable",
                field=f"{reg.name}.invoker_factory",
                value=type(invoker).__name__,
            )
        entry = CachedInvoker(
            invoker=invoker,
            solver=reg.name,
            perf_config=config,
            workspace_size=solution.workspace_size,
        )
        state.invoker_cache.put(problem.network_config, entry)
        return entry

    def cached(
        self, problem: ConvProblem, solver: str, config: PerfConfig | None
    ) -> CachedInvoker | None:
        """The cached invoker of ``solver`` built with ``config``, or None."""
        entry = self.state.invoker_cache.get(problem.network_config, solver)
        if entry is not None and entry.perf_config == config:
            return entry
        return None

    def checked_views(self, problem: ConvProblem, arrays: dict[str, Any]) -> dict[str, Any]:
        """The caller's x, w, y checked against ``problem`` (as the caller names them)."""
        backend = self.state.backend
        return {
            name: backend.check_array(getattr(problem, name), arrays[name], name)
            for name in ("x", "w", "y")
        }

    def canonical_arrays(self, problem: ConvProblem, arrays: dict[str, Any]) -> dict[str, Any]:
        """The caller's x, w, y checked against ``problem`` and named as the canonical problem
        names them (a transposed problem swaps x and y)."""
        return _canonical(problem, self.checked_views(problem, arrays))

    def params(self, problem: ConvProblem, views: dict[str, Any], workspace: Any) -> InvokeParams:
        """The invoker's arguments from checked views (as the caller names them)."""
        return InvokeParams(
            problem=problem.canonical, workspace=workspace, **_canonical(problem, views)
        )

    def workspace(self, workspace: Any, needed: int) -> Any:
        """The caller's workspace checked to hold ``needed`` bytes, or a new one."""
        backend = self.state.backend
        if workspace is not None:
            return backend.check_workspace(workspace, needed)
        return backend.allocate_workspace(needed)

    def run(
        self,
        problem: ConvProblem,
        entry: CachedInvoker,
        *,
        x: Any,
        w: Any,
        y: Any,
        workspace: Any,
        alpha: float = 1.0,
        beta: float = 0.0,
    ) -> None:
        """Run ``entry`` on the caller's buffers: ``out = alpha * conv + beta * out``."""
        backend = self.state.backend
        signature: tuple[Any, ...] | None = None
        if self._remember and alpha == 1.0 and beta == 0.0:
            signature = call_signature(x, w, y, workspace)
            last = self._remembered.get(id(entry), _NOTHING)
            if last[0] is entry and last[1] is problem and last[2] == signature:
                graph = last[4]
                if graph is not None:
                    if graph.replay():
                        return
                elif last[5]:  # the second call alike: record it once
                    last[5] = False
                    graph = last[4] = self.record(entry.invoker, last[3])
                    if graph is not None and graph.replay():
                        return
                self._call(entry, last[3])
                return
        arrays = self.canonical_arrays(problem, {"x": x, "w": w, "y": y})
        ws = self.workspace(workspace, entry.workspace_size)
        canon = problem.canonical
        out_name = canon.direction.output_tensor
        # Remembered only when every array could be told (and the workspace, when given).
        if signature is not None:
            self._keep(entry, problem, signature, canon, arrays, ws)
        if alpha == 1.0 and beta == 0.0:
            self._call(entry, InvokeParams(problem=canon, workspace=ws, **arrays))
            return
        target = arrays[out_name]
        scratch = backend.empty(getattr(canon, out_name))
        self._call(
            entry, InvokeParams(problem=canon, workspace=ws, **{**arrays, out_name: scratch})
        )
        backend.blend(target, scratch, alpha, beta)

    def _keep(
        self,
        entry: CachedInvoker,
        problem: ConvProblem,
        signature: tuple[Any, ...],
        canon: ConvProblem,
        arrays: dict[str, Any],
        ws: Any,
    ) -> None:
        """Remember this call's checked arguments, detached from the caller's tensors (a
        workspace ``run`` made itself is kept with them and serves the next call alike)."""
        detach = getattr(self.state.backend, "detach", _same)
        params = InvokeParams(
            problem=canon,
            workspace=None if ws is None else detach(ws),
            **{name: detach(view) for name, view in arrays.items()},
        )
        remembered = self._remembered
        if len(remembered) >= MAX_REMEMBERED:
            remembered.clear()
        remembered[id(entry)] = [entry, problem, signature, params, None, True]

    def record(self, invoker: Any, params: InvokeParams) -> Any:
        """``invoker``'s launches with ``params`` as a graph to keep (nothing runs), or None
        where the backend records none or the call does not pay (see :func:`graph_min_nodes`);
        shared by remembered calls and prepared runs."""
        backend = self.state.backend
        capture = getattr(backend, "capture", None)
        if capture is None:
            return None
        owner = self.owner
        return capture(lambda: invoker(owner, params), min_nodes=graph_min_nodes(backend, invoker))

    def _call(self, entry: CachedInvoker, params: InvokeParams) -> None:
        """Call ``entry``'s invoker; a failure that is not miocore's names the solver."""
        try:
            entry.invoker(self.owner, params)
        except MiocoreError:
            raise
        except Exception as exc:
            raise solver_failure(self.state.registry.get(entry.solver), "run", exc) from exc


def _canonical(problem: ConvProblem, views: dict[str, Any]) -> dict[str, Any]:
    if problem.is_transposed:
        return {"x": views["y"], "w": views["w"], "y": views["x"]}
    return views


def _culprit(reg: RegisteredSolver) -> str:
    return f"solver {reg.name!r} of plugin {reg.plugin} ({reg.distribution} {reg.version})"


def _check_solution(reg: RegisteredSolver, solution: Any) -> None:
    """A malformed solution is the plugin's bug: name the plugin, distribution and version."""
    flaw = None
    if not isinstance(solution, ConvSolution):
        flaw = f"returned {type(solution).__name__}, expected a miocore.ConvSolution"
    elif solution.solver != reg.name:
        flaw = f"returned a solution naming solver {solution.solver!r}"
    elif not callable(solution.invoker_factory):
        flaw = "returned a solution whose invoker_factory is not callable"
    elif not isinstance(solution.kernels, tuple) or not all(
        isinstance(k, KernelInfo) for k in solution.kernels
    ):
        flaw = "returned a solution whose kernels are not a tuple of miocore.KernelInfo"
    if flaw is not None:
        raise PluginError(
            f"{_culprit(reg)} {flaw}",
            field=f"{reg.name}.get_solution",
            value=getattr(solution, "solver", type(solution).__name__),
        )


def call_signature(x: Any, w: Any, y: Any, workspace: Any) -> tuple[Any, ...] | None:
    """What identifies a call's arrays (each one's memory and layout, and the workspace's when
    given), cheaply; None when one of them cannot be told. Three torch tensors of one type, a
    remembered call's usual arguments, are read into one flat tuple: no call per array."""
    kind = type(x)
    flat = _flat_kinds.get(kind)
    if flat is None:
        signature_of(x)  # decides the type's signer
        flat = _flat_kinds[kind] = _signers.get(kind) is _torch_signature
    if flat and type(w) is kind and type(y) is kind:
        head: tuple[Any, ...] = (
            x.data_ptr(),
            x.shape,
            x.stride(),
            x.dtype,
            x.device,
            w.data_ptr(),
            w.shape,
            w.stride(),
            w.dtype,
            w.device,
            y.data_ptr(),
            y.shape,
            y.stride(),
            y.dtype,
            y.device,
        )
    else:
        head = (signature_of(x), signature_of(w), signature_of(y))
        if None in head:
            return None
    if workspace is None:
        return head
    tail = signature_of(workspace)
    return None if tail is None else (*head, tail)


def signature_of(array: Any) -> tuple[Any, ...] | None:
    """What identifies ``array``'s memory and layout, cheaply; None when it cannot be told."""
    kind = type(array)
    signer = _signers.get(kind)
    if signer is None:
        torch_like = kind.__module__.startswith("torch") and hasattr(array, "data_ptr")
        signer = _signers[kind] = _torch_signature if torch_like else _signature
    return signer(array)


def _torch_signature(array: Any) -> tuple[Any, ...]:
    return (array.data_ptr(), array.shape, array.stride(), array.dtype, array.device)


def _signature(array: Any) -> tuple[Any, ...] | None:
    kind = type(array)
    interface = getattr(array, "__array_interface__", None)  # numpy and friends
    if interface is not None:
        return (
            interface["data"][0],
            interface["shape"],
            interface["strides"],
            getattr(array, "dtype", interface["typestr"]),
            kind,
        )
    ptr = getattr(array, "ptr", None)  # miocore's own device buffers
    if isinstance(ptr, int):  # what they describe too: a new buffer may reuse id and address
        return (ptr, id(array), getattr(array, "desc", None), getattr(array, "nbytes", None))
    return None


#: How each array type's signature is read, decided on first sight of the type (a call's
#: four signatures are a good part of a remembered call's host time).
_signers: dict[type, Any] = {}
#: Whether three arrays of a type are read into one flat tuple (torch tensors), per type.
_flat_kinds: dict[type, bool] = {}


def _same(view: Any) -> Any:
    return view
