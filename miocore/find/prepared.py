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
"""

from __future__ import annotations

from typing import Any

from miocore.errors import MiocoreError
from miocore.find.blame import solver_failure
from miocore.find.invoker_cache import CachedInvoker
from miocore.find.runner import Runner
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import InvokeParams


class PreparedRun:
    """``run(x=..., w=..., y=...)`` runs one solution of one problem on the caller's buffers.

    Made by :meth:`miocore.Handle.prepare`. The workspace is taken once (the caller's, or a new
    one of the solution's size). Arrays follow ``run_solution``'s rules; a call with arrays of
    another shape, layout, dtype or device is checked in full and raises as ``run_solution``
    would.
    """

    __slots__ = (
        "_detach",
        "_graph",
        "_graph_tried",
        "_invoker",
        "_owner",
        "_params",
        "_rebind",
        "_runner",
        "_signature",
        "_views",
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
        self._invoke(params)

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
        capture = getattr(self._runner.state.backend, "capture", None)
        if capture is None:
            return False
        graph = capture(lambda: self._invoker(self._owner, params))
        if graph is None:
            return False
        self._graph = graph
        if not graph.replay():
            self._invoke(params)
        return True


def signature_of(array: Any) -> tuple[Any, ...] | None:
    """What identifies ``array``'s memory and layout, cheaply; None when it cannot be told."""
    kind = type(array)
    if kind.__module__.startswith("torch") and hasattr(array, "data_ptr"):
        return (array.data_ptr(), array.shape, array.stride(), array.dtype, array.device)
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
    if isinstance(ptr, int):
        return (ptr, id(array))
    return None
