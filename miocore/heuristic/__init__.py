"""A learned heuristic for immediate mode: features, training, a pickle-free model, the plug-in.

``train`` (needs scikit-learn, ``miocore[train]``) fits per-solver tree ensembles on any FindDb;
``TreeModel`` saves and loads them as NPZ without pickle and predicts with numpy alone;
``fit_wti`` fits per-solver WTI corrections; ``plugin`` registers the heuristic on the
``miocore_heuristics`` hook, applicable where a model or a WTI table exists for the device.

Sits beside find: may import db, solver, problem (and backends), never find.
"""

from miocore.heuristic.features import FEATURES, problem_features
from miocore.heuristic.model import ModelFormatError, TreeModel
from miocore.heuristic.wti import WtiTable, fit_wti

__all__ = [
    "FEATURES",
    "ModelFormatError",
    "TreeModel",
    "WtiTable",
    "fit_wti",
    "problem_features",
]
