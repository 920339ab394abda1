"""``python -m miocore``: the same command line as the ``miocore`` script."""

from __future__ import annotations

import sys

from miocore.cli import main

if __name__ == "__main__":
    sys.exit(main())
