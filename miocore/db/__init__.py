"""miocore's databases: FindDb (measured solutions) and PerfDb (tuned configurations).

Both are per device and layered: a writable **user** layer (``$MIOCORE_USER_DB_PATH`` or the
user cache folder) over a read-only **system** layer shipped in ``miocore/data/db/`` (or
``$MIOCORE_SYSTEM_DB_PATH``). Each layer is one SQLite file, ``<device>.db``, holding both
tables. See ``docs/databases.md``.
"""

from typing import TYPE_CHECKING

from miocore.db._common import (
    default_system_dir,
    default_user_dir,
    make_provenance,
    miocore_version,
)
from miocore.db._sqlite import SCHEMA_VERSION, DatabaseWarning
from miocore.db.finddb import FindDb, FindDbEntry, FindDbRecord
from miocore.db.perfdb import PerfDb, PerfDbEntry
from miocore.db.storage import StorageDegradedWarning, StorageStatus
from miocore.solver.lazy import lazy_exports

if TYPE_CHECKING:
    from miocore.db.outcomes import ImportResult, MergeResult
    from miocore.db.text import BadLine, TextFormatError

#: Names loaded on first use, with their module: the text format and the results of an import
#: or a merge (a FindDb hit in a new process needs none of them).
__getattr__ = lazy_exports(
    __name__,
    {
        "BadLine": "miocore.db.text",
        "TextFormatError": "miocore.db.text",
        "ImportResult": "miocore.db.outcomes",
        "MergeResult": "miocore.db.outcomes",
    },
)


__all__ = [
    "SCHEMA_VERSION",
    "BadLine",
    "DatabaseWarning",
    "FindDb",
    "FindDbEntry",
    "FindDbRecord",
    "ImportResult",
    "MergeResult",
    "PerfDb",
    "PerfDbEntry",
    "StorageDegradedWarning",
    "StorageStatus",
    "TextFormatError",
    "default_system_dir",
    "default_user_dir",
    "make_provenance",
    "miocore_version",
]
