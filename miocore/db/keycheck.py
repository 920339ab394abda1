"""A fast check that a FindDb key is valid and canonical, for imports of MIOpen's databases.

:func:`~miocore.db._common.check_key` builds a :class:`~miocore.problem.ConvProblem` from the
key and compares its key with the text: exact, but about 80 us a key, which caps an import of
MIOpen's 100,000-line databases near 12,000 records/s. :func:`key_is_valid` reads the common
canonical forms with one regular expression and checks the same arithmetic (channels split by
groups, the output size the convolution gives) in a few microseconds. It answers True only
when it is sure; anything else (an unusual form, a bad key) goes to the exact check, which also
words the reason. ``tests/test_db_import.py`` holds the two to the same answers.
"""

from __future__ import annotations

import functools
import re

_N = r"[1-9][0-9]*"  # a positive length, no leading zero (canonical)
_Z = r"(?:0|[1-9][0-9]*)"  # a pad
_TYPES = "FP32|FP16|BF16"
_TAIL = (
    rf"-0-(?P<layouts>[A-Z]+(?:-[A-Z]+-[A-Z]+)?)-(?P<dtype>{_TYPES})-(?P<dir>[FBW])"
    rf"(?:_g(?P<g>{_N}))?$"
)

_KEY_2D = re.compile(
    rf"^({_N})-({_N})-({_N})-({_N})x({_N})-({_N})-({_N})-({_N})-({_N})"
    rf"-({_Z})x({_Z})-({_N})x({_N})-({_N})x({_N}){_TAIL}"
)
_KEY_3D = re.compile(
    rf"^({_N})-({_N})-({_N})-({_N})-({_N})x({_N})x({_N})-({_N})-({_N})-({_N})-({_N})-({_N})"
    rf"-({_Z})x({_Z})x({_Z})-({_N})x({_N})x({_N})-({_N})x({_N})x({_N}){_TAIL}"
)
_LAYOUTS = {2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


def key_is_valid(key: str) -> bool:
    """True when ``key`` is certainly a valid canonical MIOpen key; False means "ask
    :func:`~miocore.db._common.check_key`" (it may still be valid)."""
    match = _KEY_2D.match(key)
    rank = 2
    if match is None:
        match = _KEY_3D.match(key)
        rank = 3
        if match is None:
            return False
    numbers = match.groups()[: 15 if rank == 2 else 21]
    g_text = match.group("g")
    if g_text is not None:
        groups = int(g_text)
        src_c, dst_c = int(numbers[0]), int(numbers[1 + 2 * rank])
        if groups == 1 or src_c % groups or dst_c % groups:
            return False  # "_g1" is not canonical; channels must split into the groups
    # Everything else repeats across a database's keys: decided once per distinct geometry.
    return _geometry_ok(rank, numbers[1:], match.group("layouts"), match.group("dir"))


@functools.lru_cache(maxsize=4096)
def _geometry_ok(rank: int, numbers: tuple[str, ...], layouts_text: str, letter: str) -> bool:
    v = [int(t) for t in numbers]  # the key's numbers after the source channels
    src_sp, filt, dst_sp = v[0:rank], v[rank : 2 * rank], v[2 * rank + 1 : 3 * rank + 1]
    base = 3 * rank + 2  # skip the destination channels and the batch
    pads, strides, dils = (v[base + i * rank : base + (i + 1) * rank] for i in range(3))
    layouts = layouts_text.split("-")
    allowed = _LAYOUTS[rank]
    if len(layouts) == 1:
        if layouts[0] != allowed[0]:
            return False
    elif any(t not in allowed for t in layouts) or all(t == allowed[0] for t in layouts):
        return False  # three default tokens are written as one in canonical form
    x_sp, y_sp = (src_sp, dst_sp) if letter == "F" else (dst_sp, src_sp)
    for i in range(rank):
        out = (x_sp[i] + 2 * pads[i] - dils[i] * (filt[i] - 1) - 1) // strides[i] + 1
        if out < 1 or out != y_sp[i]:
            return False
    return True
