"""A learned heuristic for immediate mode: features, training, a pickle-free model, the plug-in.

``train`` (needs scikit-learn, ``miocore[train]``) fits per-solver tree ensembles on any FindDb;
``TreeModel`` saves and loads them as NPZ without pickle and predicts with numpy alone;
``fit_wti`` fits per-solver WTI corrections; ``plugin`` registers the heuristic on the
``miocore_heuristics`` hook, applicable where a model or a WTI table exists for the device.

Sits beside find: may import db, solver, problem (and backends), never find.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from miocore.solver.lazy import lazy_exports

if TYPE_CHECKING:
    from miocore.heuristic.features import FEATURES, problem_features
    from miocore.heuristic.model import ModelFormatError, TreeModel
    from miocore.heuristic.wti import WtiTable, fit_wti

#: Each public name and the module that defines it, imported on first use: the plug-in
#: (``miocore.heuristic.plugin``) loads with every plugin scan, and a scan must not import
#: numpy for a model that may not exist.
__getattr__ = lazy_exports(
    __name__,
    {
        "FEATURES": "miocore.heuristic.features",
        "problem_features": "miocore.heuristic.features",
        "ModelFormatError": "miocore.heuristic.model",
        "TreeModel": "miocore.heuristic.model",
        "WtiTable": "miocore.heuristic.wti",
        "fit_wti": "miocore.heuristic.wti",
    },
)


__all__ = [
    "FEATURES",
    "ModelFormatError",
    "TreeModel",
    "WtiTable",
    "fit_wti",
    "problem_features",
]
