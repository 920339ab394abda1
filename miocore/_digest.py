"""BLAKE2b for the plugin registry and its scan cache, without importing ``hashlib``.

``hashlib``'s import initialises OpenSSL (about 3 ms of every new process on the development
machine) and a FindDb hit needs no other digest: CPython's built-in ``_blake2`` module gives
the same function (the one ``hashlib.blake2b`` is), so solver ids are unchanged.
"""

from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:  # another interpreter: hashlib's is the same algorithm
    from hashlib import blake2b

__all__ = ["blake2b"]
