"""Tuning at scale: NORMAL find over many problems on Dask workers, into a FindDb.

``tune(problems, out_dir=...)`` runs on a ``LocalCluster`` (one worker per GPU or CPU socket)
or an existing scheduler; each worker writes its own shard, shards are merged as the run goes,
and a run resumes where it stopped. Problems come from :mod:`miocore.tune.sources`. Dask is an
optional extra (``pip install miocore[tune]``), imported only when a run starts.

A front end: may import everything below it (find, db, solver, problem, corpus).
"""

from miocore.tune.runner import (
    TuneProgress,
    TuneResult,
    TuneUnavailableError,
    local_cluster,
    tune,
    worker_environments,
)
from miocore.tune.sources import (
    expand,
    problems_from_corpus,
    problems_from_finddb_text,
    problems_from_torch,
    unique,
)

__all__ = [
    "TuneProgress",
    "TuneResult",
    "TuneUnavailableError",
    "expand",
    "local_cluster",
    "problems_from_corpus",
    "problems_from_finddb_text",
    "problems_from_torch",
    "tune",
    "unique",
    "worker_environments",
]
