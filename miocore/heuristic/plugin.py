"""The learned heuristic as an immediate-mode plug-in (the ``miocore_heuristics`` hook).

For a device it looks for ``<device>.heuristic.npz`` (the model) and ``<device>.wti.json``
(fitted WTI corrections) in the user database folder, then in the system one (the shipped
files). It is applicable when either exists for the device; it ranks the candidates the model
knows by its ranking score (predicted time, or time and the chance to be near the fastest:
:meth:`TreeModel.rank_log_ms`) and the others by fitted WTI where fitted; solvers neither knows are
left to the chain's plain WTI ranking. Files are reread when they change.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from miocore.db._common import default_system_dir, default_user_dir
from miocore.env import MIOPEN_ALIASES
from miocore.problem.conv import ConvProblem
from miocore.solver.hookspecs import HeuristicRecord, hookimpl
from miocore.solver.interface import ExecutionContext

if TYPE_CHECKING:  # imported where a file is read: a plugin scan must not import numpy
    from miocore.heuristic.model import TreeModel
    from miocore.heuristic.wti import WtiTable

log = logging.getLogger("miocore.heuristic")

NAME = "miocore.learned"
MODEL_SUFFIX = ".heuristic.npz"
WTI_SUFFIX = ".wti.json"

_cache: dict[str, tuple[tuple[int, int], Any]] = {}
#: The variables the two folders follow (miocore.db._common, miocore.paths).
_FOLDER_VARIABLES = (
    *(
        name
        for switch in ("MIOCORE_USER_DB_PATH", "MIOCORE_SYSTEM_DB_PATH")
        for name in (switch, MIOPEN_ALIASES[switch])
    ),
    "XDG_CACHE_HOME",
    "HOME",
)
_folders: dict[tuple[str | None, ...], tuple[str, str]] = {}


def _folder_names() -> tuple[str, str]:
    """(user, system) database folders, worked out once per setting of their variables:
    immediate mode asks for the files four times a call, and working the folders out each
    time cost 12 µs an ask."""
    key = tuple(os.environ.get(name) for name in _FOLDER_VARIABLES)
    folders = _folders.get(key)
    if folders is None:
        folders = _folders[key] = (str(default_user_dir()), str(default_system_dir()))
    return folders


def _file_names(device: str, suffix: str) -> list[str]:
    return [os.path.join(folder, device + suffix) for folder in _folder_names()]


def model_paths(device: str, suffix: str) -> list[Path]:
    """Where a device's file is looked for: the user database folder, then the system one."""
    return [Path(name) for name in _file_names(device, suffix)]


def _load(device: str, suffix: str, reader: Any) -> Any:
    for path in _file_names(device, suffix):
        try:
            st = os.stat(path)
        except OSError:
            continue
        sig = (st.st_mtime_ns, st.st_size)
        cached = _cache.get(path)
        if cached is not None and cached[0] == sig:
            return cached[1]
        try:
            value = reader(Path(path))
        except Exception as exc:  # a bad file must not break immediate mode
            log.warning("heuristic file %s is unusable and ignored: %s", path, exc)
            value = None
        _cache[path] = (sig, value)
        if value is not None:
            return value
    return None


def load_model(device: str) -> TreeModel | None:
    """The device's model (user folder first), or None."""
    return _load(device, MODEL_SUFFIX, _read_model)


def load_wti_table(device: str) -> WtiTable | None:
    """The device's fitted WTI table (user folder first), or None."""
    return _load(device, WTI_SUFFIX, _read_wti_table)


def _read_model(path: Path) -> TreeModel:
    from miocore.heuristic.model import TreeModel  # numpy: only where a model file exists

    return TreeModel.load(path)


def _read_wti_table(path: Path) -> WtiTable:
    from miocore.heuristic.wti import WtiTable

    return WtiTable.load(path)


def is_applicable(ctx: ExecutionContext, problem: ConvProblem) -> bool:
    """Whether a model or a fitted WTI table exists for the context's device."""
    device = ctx.device.identity
    return load_model(device) is not None or load_wti_table(device) is not None


def rank(
    ctx: ExecutionContext, problem: ConvProblem, candidates: Sequence[str]
) -> list[tuple[str, float]]:
    """``candidates`` this heuristic can estimate, fastest first, with estimated ms."""
    device = ctx.device.identity
    return rank_with(load_model(device), load_wti_table(device), ctx, problem, candidates)


def rank_with(
    model: TreeModel | None,
    table: WtiTable | None,
    ctx: ExecutionContext,
    problem: ConvProblem,
    candidates: Sequence[str],
    solvers: Mapping[str, Any] | None = None,
) -> list[tuple[str, float]]:
    """Rank ``candidates`` by ``model`` where it knows them, else by ``table``'s fitted WTI
    (solver objects from ``solvers``, default: the installed ones); the rest are left out."""
    # (ranking score, name, estimated ms): a model may rank by more than the time it predicts
    # (TreeModel.rank_log_ms); a WTI estimate ranks by its time.
    out: list[tuple[float, str, float]] = []
    rest = list(candidates)
    if model is not None:
        known = [c for c in candidates if model.knows(c)]
        if known:
            from miocore.heuristic.features import problem_features

            features = problem_features(problem, ctx.math_mode)
            log_ms, score = model.rank_log_ms(features, known)
            for name, t, s in zip(known, log_ms, score, strict=True):
                out.append((math.exp(s), name, math.exp(t)))
            rest = [c for c in candidates if not model.knows(c)]
    if table is not None and rest:
        if solvers is None:
            from miocore.solver.registry import default_registry

            solvers = {r.name: r.solver for r in default_registry().solvers}
        for name in rest:
            solver = solvers.get(name)
            try:
                estimate = None if solver is None else table.estimate_ms(ctx, solver, problem)
            except Exception:  # a WTI that raises: left to the chain
                estimate = None
            if estimate is not None:
                out.append((estimate, name, estimate))
    out.sort()
    return [(name, ms) for _, name, ms in out]


@hookimpl
def miocore_heuristics() -> Iterable[HeuristicRecord]:
    """The learned heuristic of miocore's own distribution."""
    yield HeuristicRecord(name=NAME, is_applicable=is_applicable, rank=rank)
