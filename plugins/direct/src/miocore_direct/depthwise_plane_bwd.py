"""NCHW backward data at stride 2 of ``direct.depthwise`` (multiplier 1, no dilation): the
phases of :mod:`miocore_direct.depthwise_phases` on the plane layout of
:mod:`miocore_direct.depthwise_plane`, with no staging transposes.

Per (image, channel): dy goes into a zero-padded plane once; each of dx's four phases (even
or odd rows by even or odd columns) is a stride-1 correlation of that plane with the phase's
sub-filter, computed on a grid of the plane's pitch in one long vectorised loop per filter row
(the grid's margin columns are computed and dropped); then each dx row is written from the
two column phases of its row phase, interleaved (``dx[2b] = g0[b]``, ``dx[2b + 1] = g1[b]``,
a loop LLVM vectorises with unsigned indices). Every tap is in exactly one phase: no
multiply-add on an inserted zero. One kernel per filter width (compiled once per machine).
"""

from __future__ import annotations

import functools
from typing import Any

from miocore_direct.depthwise_blocked import _HEADER, MAX_WIDTH, load_generated

#: Channels per parallel item: its planes and grids are allocated once for them (one
#: allocation per plane cost 14x14 layers at batch 8 a third of their time).
CHANNEL_BLOCK = 8


#: Smallest dx plane (pixels) that takes this kernel: on 14x14 planes the grids' loops are a
#: few vectors long and batch 8 ran at 0.70 of oneDNN against 0.73-0.83 for the phase tiles
#: on staged channels-last tensors (docs/performance-cpu-depthwise.md).
MIN_PIXELS = 24 * 24


def applies(mult: int, filter_hw: tuple[int, int], strides: tuple[int, int],
            dilations: tuple[int, int], size: tuple[int, int]) -> bool:  # fmt: skip
    """Stride 2 both ways, no dilation, multiplier 1, filters 2x2 to 8x8 (every phase then
    has a tap), dx planes of at least :data:`MIN_PIXELS`."""
    return (
        mult == 1
        and size[0] * size[1] >= MIN_PIXELS
        and strides == (2, 2)
        and dilations == (1, 1)
        and min(filter_hw) >= 2
        and max(filter_hw) <= MAX_WIDTH
    )


def _axis(var: str, residue: int, filt: str, pad: str, size: str) -> list[str]:
    """Phase ``residue`` of one axis (the formulas of ``depthwise_phases.phases_1d`` at stride
    2): first tap ``{var}f``, tap count ``{var}t``, padding ``{var}p``, dx count ``{var}c``."""
    return [
        f"    {var}f = ({residue} + {pad}) % 2",
        f"    {var}t = ({filt} - {var}f + 1) // 2",
        f"    {var}p = {var}t - 1 - ({residue} + {pad} - {var}f) // 2",
        f"    {var}c = ({size} - {residue} + 1) // 2",
    ]


def source(fw: int) -> str:
    """The kernel module for filter width ``fw``.

    ``kernel(dy, wt, dx, dxf, ph, pw)``: ``dx[n, k, ih, iw] = sum dy[n, k, (ih + ph - fy) / 2,
    (iw + pw - fx) / 2] * w[k, fy, fx]`` over the taps where both divisions are exact and in
    range; dy, dx packed NCHW float32, ``dxf`` dx flat, ``wt`` the *flipped* filter
    ``(K, FY, FX)`` (``wt[k, FY-1-fy, FX-1-fx] = w[k, fy, fx]``, as the stride-1 plane
    kernels take it)."""
    lines = [
        "def kernel(dy, wt, dx, dxf, ph, pw):",
        "    n_img, chans, out_h, out_w = dy.shape",
        "    _, _, height, width = dx.shape",
        "    fy_n = wt.shape[1]",
        *_axis("r0", 0, "fy_n", "ph", "height"),
        *_axis("r1", 1, "fy_n", "ph", "height"),
        *_axis("s0", 0, str(fw), "pw", "width"),
        *_axis("s1", 1, str(fw), "pw", "width"),
        "    top = max(r0p, r1p, 0)",
        "    left = max(s0p, s1p, 0)",
        "    wq = max(left + out_w, s0c + left - s0p + s0t - 1, s1c + left - s1p + s1t - 1)",
        "    hq = max(top + out_h, r0c + top - r0p + r0t - 1, r1c + top - r1p + r1t - 1)",
        "    size = hq * wq + wq",
        "    pitch = np.uint64(wq)",
        "    span_max = r0c * wq",
        f"    blocks = (chans + {CHANNEL_BLOCK - 1}) // {CHANNEL_BLOCK}",
        "    for item in prange(n_img * blocks):",
        "        n = item // blocks",
        f"        k0 = (item % blocks) * {CHANNEL_BLOCK}",
        "        q = np.empty(size, np.float32)",
        "        g0 = np.empty(span_max, np.float32)",
        "        g1 = np.empty(span_max, np.float32)",
        f"        for k in range(k0, min(chans, k0 + {CHANNEL_BLOCK})):",
        "            q[:] = ZERO",
        "            for oh in range(out_h):",
        "                row = np.uint64(top + oh) * pitch + np.uint64(left)",
        "                for ow in range(out_w):",
        "                    q[row + np.uint64(ow)] = dy[n, k, oh, ow]",
        "            plane = np.uint64((n * chans + k) * height) * np.uint64(width)",
        "            for r in range(2):",
        "                rf, rt, rp, rc = (r0f, r0t, r0p, r0c) if r == 0 else (r1f, r1t, r1p, r1c)",
        "                if rc == 0:",
        "                    continue",
        "                span = np.uint64(rc * wq)",
        "                for u in range(rt):",
        "                    fy = rf + 2 * (rt - 1 - u)",
        "                    base = np.uint64(top - rp + u) * pitch",
    ]
    ind = " " * 20
    for s, grid in ((0, "g0"), (1, "g1")):
        # the column phase's tap count is one of two values: a body for each, literal taps
        variants = sorted({(fw + 1) // 2, fw // 2} - {0}, reverse=True)
        for i, taps in enumerate(variants):
            lines.append(f"{ind}if s{s}t == {taps}:" if i == 0 else f"{ind}else:")
            body = ind + "    "
            lines.append(f"{body}off = base + np.uint64(left - s{s}p)")
            for v in range(taps):
                # tap v of the phase reads column fx = s_f + 2 * (taps - 1 - v) of w, which is
                # wt[k, fy_n - 1 - fy, fw - 1 - fx] in the flipped filter
                lines.append(
                    f"{body}w{v} = wt[k, fy_n - 1 - fy, {fw - 1} - (s{s}f + {2 * (taps - 1 - v)})]"
                )
            terms = " + ".join(f"q[i + off + np.uint64({v})] * w{v}" for v in range(taps))
            lines += [
                f"{body}if u == 0:",
                f"{body}    for i in range(span):",
                f"{body}        {grid}[i] = {terms}",
                f"{body}else:",
                f"{body}    for i in range(span):",
                f"{body}        {grid}[i] += {terms}",
            ]
    lines += [
        "                for a in range(rc):",
        "                    src = np.uint64(a) * pitch",
        "                    dst = plane + np.uint64(r + 2 * a) * np.uint64(width)",
        "                    for b in range(np.uint64(s1c)):",
        "                        dxf[dst + np.uint64(2) * b] = g0[src + b]",
        "                        dxf[dst + np.uint64(2) * b + np.uint64(1)] = g1[src + b]",
        "                    if s0c > s1c:",
        "                        dxf[dst + np.uint64(2 * s1c)] = g0[src + np.uint64(s1c)]",
    ]
    return _HEADER + "\n".join(lines) + "\n"


def spec(fw: int) -> tuple[str, str]:
    """The name prefix and source of :func:`kernel`."""
    return f"miocore_dw_plane_bwd2_{fw}", source(fw)


@functools.cache
def kernel(fw: int) -> Any:
    """The compiled NCHW stride-2 backward-data plane kernel for filter width ``fw``."""
    return load_generated(*spec(fw))


def run(dy: Any, wt: Any, dx: Any, ph: int, pw: int) -> None:
    """Run the kernel on packed NCHW float32 ``dy`` and ``dx`` and the flipped ``wt``."""
    if not dx.flags.c_contiguous:  # flat indexing needs a packed dx
        raise ValueError("plane backward-data kernel needs a C-contiguous dx")
    kernel(wt.shape[2])(dy, wt, dx, dx.reshape(-1), ph, pw)
