"""The per-user cache folder that holds miocore's databases, kernel binaries and plugin scan.

On Linux it is computed here, as ``platformdirs.user_cache_dir("miocore")`` computes it
(``$XDG_CACHE_HOME``, else ``~/.cache``, + ``/miocore``): importing platformdirs pulls in
``tempfile``, ``shutil``, ``random``, ``bz2`` and ``lzma``, about 13 ms of every new process
that opens a database (a third of a FindDb hit in a new process on the development machine).
Elsewhere platformdirs answers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def user_cache_dir() -> Path:
    """miocore's per-user cache folder, as ``platformdirs.user_cache_dir("miocore")``."""
    if sys.platform == "linux" and "ANDROID_DATA" not in os.environ:
        base = os.environ.get("XDG_CACHE_HOME", "").strip()
        if not base or not os.path.isabs(base):
            base = os.path.expanduser("~/.cache")
        return Path(base) / "miocore"
    import platformdirs

    return Path(platformdirs.user_cache_dir("miocore"))
