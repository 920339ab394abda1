"""A solution made ready to run many times: the per-call path with everything done once.

``Handle.prepare(solution)`` builds the invoker, takes the workspace and remembers the
canonical problem. Each call computes one cheap signature per array (device address, shape,
strides, dtype, device) and compares it with the last call's:

- all equal: the invoker runs with the arguments it already checked;
- only addresses changed (a framework handing new tensors of the same layout each step): the
  checked views move to the new memory without checking again (``backend.rebind``);
- anything else: the full checks of ``run_solution``, once.

On a GPU whose driver records graphs, the second call alike records the invoker's launches
as one graph (where it makes more than one) and every later call alike replays it with one
driver call: a multi-kernel solution costs one launch.

A caller that vouches for the layout itself (the torch front end, whose own cache of call
signatures already told shapes, strides, dtype and device) calls ``run_at`` with the three
device addresses alone, once a checked call has been made: nothing is compared but the
addresses, an invoker that takes raw addresses (``invoker.at``) gets them directly, and an
address triple seen a second time is recorded as a graph kept under it and replayed from then
on. On the CPU the same caller hands its numpy views to ``run_views``.
"""

from __future__ import annotations

from typing import Any

from miocore.errors import InvalidArgumentError, MiocoreError
from miocore.find.blame import solver_failure
from miocore.find.invoker_cache import CachedInvoker
from miocore.find.runner import Runner, signature_of
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import InvokeParams

#: Graphs kept per prepared run by ``run_at`` (one per address triple; the oldest goes first).
#: A run is shared by every layer of its problem and sees each layer's triple per allocator
#: state (inference and training steps hand different addresses; ResNet-50's busiest run sees
#: 6 per mode): room for several states of a program that alternates training and evaluation.
MAX_GRAPHS = 64
#: Graphs a run may drop for new ones before it stops recording: addresses that never settle
#: would otherwise cost a recording per call; the graphs kept still replay.
MAX_EVICTIONS = MAX_GRAPHS
#: Address triples remembered as seen once (cleared when full: addresses that never repeat).
MAX_SEEN = 64
#: Recordings refused (a BLAS a capture misses, one launch not worth it) before giving up.
MAX_GRAPH_FAILURES = 2


class PreparedRun:
    """``run(x=..., w=..., y=...)`` runs one solution of one problem on the caller's buffers.

    Made by :meth:`miocore.Handle.prepare`. The workspace is taken once (the caller's, or a new
    one of the solution's size). Arrays follow ``run_solution``'s rules; a call with arrays of
    another shape, layout, dtype or device is checked in full and raises as ``run_solution``
    would.
    """

    __slots__ = (
        "_at",
        "_at_params",
        "_detach",
        "_evictions",
        "_graph",
        "_graph_failures",
        "_graph_tried",
        "_graphs",
        "_invoker",
        "_owner",
        "_params",
        "_pointers",
        "_rebind",
        "_relocatable",
        "_runner",
        "_seen",
        "_signature",
        "_swapped",
        "_views",
        "_workspace_ptr",
        "problem",
        "solver",
        "workspace",
        "workspace_size",
    )

    def __init__(
        self, runner: Runner, problem: ConvProblem, entry: CachedInvoker, workspace: Any
    ) -> None:
        self._runner = runner
        self._owner = runner.owner
        self._invoker = entry.invoker
        self.problem = problem
        self.solver = entry.solver
        self.workspace_size = entry.workspace_size
        self.workspace = runner.workspace(workspace, entry.workspace_size)
        self._signature: tuple[Any, ...] | None = None
        self._params: InvokeParams | None = None
        self._views: dict[str, Any] | None = None
        self._rebind = getattr(runner.state.backend, "rebind", lambda *_: None)
        self._detach = getattr(runner.state.backend, "detach", lambda view: view)
        self._graph: Any = None
        self._graph_tried = False
        # run_at's state: the addresses of the last call and the invoker's raw-address entry.
        self._pointers: tuple[int, int, int] | None = None
        self._at_params: InvokeParams | None = None
        self._at = getattr(self._invoker, "at", None)
        self._graphs: dict[tuple[int, int, int], Any] = {}
        self._seen: set[tuple[int, int, int]] = set()
        self._graph_failures = 0
        self._evictions = 0
        self._relocatable = runner.state.backend.name != "cpu"  # device addresses only
        self._swapped = problem.is_transposed  # the canonical problem swaps x and y
        self._workspace_ptr = getattr(self.workspace, "ptr", 0) if self.workspace is not None else 0

    def __repr__(self) -> str:
        return f"PreparedRun({self.solver!r}, {self.problem.key!r})"

    def __call__(self, *, x: Any, w: Any, y: Any) -> None:
        signature = (signature_of(x), signature_of(w), signature_of(y))
        if signature == self._signature:
            graph = self._graph
            if graph is not None and graph.replay():
                return
            params = self._params
            if not self._graph_tried:  # the second call alike: record it once
                self._graph_tried = True
                if self._record(params):
                    return
            self._invoke(params)
            return
        views = self._moved(signature, (x, w, y))
        if views is None:
            views = self._runner.checked_views(self.problem, {"x": x, "w": w, "y": y})
        # Only arrays whose signature names their memory may skip the checks next time. What
        # is kept holds no caller's tensor: a later call alike passes its own.
        known = None not in signature
        if known:
            views = {name: self._detach(view) for name, view in views.items()}
        params = self._runner.params(self.problem, views, self.workspace)
        self._signature = signature if known else None
        self._views = views if known else None
        self._params = params if known else None
        self._graph = None
        self._graph_tried = False
        self._pointers = None
        self._invoke(params)

    @property
    def ready(self) -> bool:
        """True once a checked call's layout is known on a device backend, so :meth:`run_at`
        may be called."""
        return self._views is not None and self._relocatable

    @property
    def checked(self) -> bool:
        """True once a checked call's layout is known, so :meth:`run_views` may be called."""
        return self._views is not None

    def run_views(self, x: Any, w: Any, y: Any) -> None:
        """Run on arrays already in the backend's own form (the CPU backend's numpy views),
        laid out exactly as the last checked call's: the caller vouches for shapes, strides
        and dtype, so nothing is compared (the torch front end on the CPU); see
        :attr:`checked`."""
        if self._views is None:
            raise InvalidArgumentError(
                "run_views needs a checked call first (see checked)",
                field="run_views",
                value=repr(self),
            )
        self._signature = None  # the next checked call compares in full
        views = {"x": x, "w": w, "y": y}
        self._invoke(self._runner.params(self.problem, views, self.workspace))

    def run_at(self, x: int, w: int, y: int) -> None:
        """Run on device memory at addresses ``x``, ``w`` and ``y`` (as the caller names
        them) laid out exactly as the last checked call's arrays: the caller vouches for the
        shapes, strides, dtype and device, and keeps the memory alive for the call. Only the
        addresses are compared; see :attr:`ready` (device backends only: the CPU's solvers
        take arrays, not addresses).

        A framework hands the same addresses again step after step (its allocator repeats
        itself), so the second time an address triple is seen its launches are recorded as a
        graph kept under that triple (up to ``MAX_GRAPHS``; a run that has dropped
        ``MAX_EVICTIONS`` of them for new ones records no more), and later calls at those
        addresses replay it: one driver call instead of the invoker's host work.
        """
        pointers = (x, w, y)
        graph = self._graphs.get(pointers)
        if graph is not None and graph.replay():
            return
        if pointers != self._pointers:
            if not self.ready:
                raise InvalidArgumentError(
                    "run_at needs a checked call first (see ready)",
                    field="run_at",
                    value=repr(self),
                )
            self._pointers = pointers
            self._at_params = None
            self._signature = None  # the next checked call compares in full
        if graph is None and self._graph_failures < MAX_GRAPH_FAILURES:
            if pointers in self._seen:
                if self._record_at(pointers):
                    return
            else:
                if len(self._seen) >= MAX_SEEN:
                    self._seen.clear()
                self._seen.add(pointers)
        at = self._at
        if at is None:
            self._invoke(self._params_at(pointers))
            return
        if self._swapped:
            x, y = y, x
        try:
            at(self._owner, x, w, y, self._workspace_ptr)
        except MiocoreError:
            raise
        except Exception as exc:
            raise solver_failure(self._runner.state.registry.get(self.solver), "run", exc) from exc

    def _record_at(self, pointers: tuple[int, int, int]) -> bool:
        """Record the call at ``pointers`` as a graph, keep it and run it; False when not
        recorded (nothing ran)."""
        backend = self._runner.state.backend
        capture = getattr(backend, "capture", None)
        if capture is None:
            self._graph_failures = MAX_GRAPH_FAILURES
            return False
        capturing = getattr(getattr(backend, "driver", None), "is_capturing", None)
        if capturing is not None and capturing(backend.stream_object):
            return False  # the caller records a graph of its own: launches go into it
        params = self._params_at(pointers)
        graph = self._runner.record(self._invoker, params)
        if graph is None:
            self._graph_failures += 1
            return False
        graphs = self._graphs
        if len(graphs) >= MAX_GRAPHS:
            del graphs[next(iter(graphs))]  # the oldest
            self._evictions += 1
            if self._evictions >= MAX_EVICTIONS:  # addresses that never settle: stop here
                self._graph_failures = MAX_GRAPH_FAILURES
        graphs[pointers] = graph
        self._seen.discard(pointers)
        if not graph.replay():
            self._invoke(params)
        return True

    def _params_at(self, pointers: tuple[int, int, int]) -> InvokeParams:
        """The invoker's arguments with the checked views moved to ``pointers``."""
        params = self._at_params
        if params is None:
            views = self._views
            assert views is not None
            moved = {
                name: self._rebind(views[name], None, ptr)
                for name, ptr in zip(("x", "w", "y"), pointers, strict=True)
            }
            params = self._at_params = self._runner.params(self.problem, moved, self.workspace)
        return params

    def _moved(self, signature: tuple[Any, ...], arrays: tuple[Any, ...]) -> Any:
        """The last call's checked views moved to these arrays' memory, when only their
        addresses differ from the last call's; else None."""
        last, views = self._signature, self._views
        if last is None or views is None or None in signature:
            return None
        moved = {}
        rebind = self._rebind
        for name, new, old, array in zip(("x", "w", "y"), signature, last, arrays, strict=True):
            if new[1:] != old[1:]:
                return None
            view = views[name] if new[0] == old[0] else rebind(views[name], array, new[0])
            if view is None:
                return None
            moved[name] = view
        return moved

    def _invoke(self, params: Any) -> None:
        try:
            self._invoker(self._owner, params)
        except MiocoreError:
            raise
        except Exception as exc:
            raise solver_failure(self._runner.state.registry.get(self.solver), "run", exc) from exc

    def _record(self, params: Any) -> bool:
        """Record this call's launches as a graph and run it; False when not recorded."""
        graph = self._runner.record(self._invoker, params)
        if graph is None:
            return False
        self._graph = graph
        if not graph.replay():
            self._invoke(params)
        return True
