"""The GEMM view of a forward or backward-data problem for ``kernels/igemm_mma.cu``.

The kernel's parameter struct (``MioIgemmParams``), the stride phases of backward data, the
32-bit reach of a tap, the vector width of the loads, the warp grid of a tile, and the tile
arithmetic the solver's config space and cost model use (shared memory, blocks, occupancy,
workspace). ``gpu.py`` holds the solvers built on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from miocore import ConvProblem, Direction, ExecutionContext, InvalidArgumentError, PerfConfig
from miocore_igemm.gpu_common import SHARED_LIMIT, THREADS, pack_fields

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    pass

#: Warp grids (rows x columns of 8 warps) a tile may use, in order of preference.
_WARP_GRIDS = ((2, 4), (4, 2), (1, 8), (8, 1))

#: The fields of ``MioIgemmParams`` in ``kernels/igemm_mma.cu``, in declaration order (a CPU
#: test parses the struct and checks this order: the kernel reads them by position).
PARAM_FIELDS = (
    *("n", "groups", "ih", "iw", "icg", "is_n", "is_h", "is_w", "is_c"),
    *("oh", "ow", "ocg", "rh", "rw", "phases", "mo", "os_n", "os_h", "os_w", "os_c"),
    *("bs_col", "bs_y", "bs_x", "bs_c", "bs_grp"),
    *("fy", "fx", "ph", "pw", "sh", "sw", "dh", "dw"),
    *("ws_k", "ws_c", "ws_y", "ws_x"),
    *("m", "kred", "tiles_per_split", "splits"),
)


def pack_params(values: dict[str, int]) -> bytes:
    """``MioIgemmParams`` by value: every field an int64, in :data:`PARAM_FIELDS` order."""
    return pack_fields(PARAM_FIELDS, values)


def gemm_params(p: ConvProblem) -> dict[str, int]:
    """The GEMM view of ``p`` (forward or backward data), every field but the split ones.

    Forward gathers A from x and reads B from w; backward data gathers A from dy (held in y)
    and reads B from w transposed to ``[g][c][fy][fx][k]`` (contiguous, in the workspace).
    """
    n, _, h, w = p.x.lengths
    k, cg, fy, fx = p.w.lengths
    g = p.groups
    kg = k // g
    ho, wo = p.y.lengths[2:]
    xs, ws, ys = p.x.strides, p.w.strides, p.y.strides
    common = {
        "n": n,
        "groups": g,
        "fy": fy,
        "fx": fx,
        "ph": p.conv.pads[0],
        "pw": p.conv.pads[1],
        "sh": p.conv.strides[0],
        "sw": p.conv.strides[1],
        "dh": p.conv.dilations[0],
        "dw": p.conv.dilations[1],
        "ws_k": ws[0],
        "ws_c": ws[1],
        "ws_y": ws[2],
        "ws_x": ws[3],
    }
    if p.direction is Direction.BACKWARD_DATA:
        sh, sw = p.conv.strides
        # one GEMM per stride phase: rows ih = phase + sh * i, taps fy = fy0 + sh * t only
        rh, rw, phases, kred = h, w, 1, fy * fx * kg
        if is_phased(p):
            rh, rw, phases = -(-h // sh), -(-w // sw), sh * sw
            kred = -(-fy // sh) * -(-fx // sw) * kg  # the largest phase's reduction
        return {
            **common,
            **{"ih": ho, "iw": wo, "icg": kg},
            **{"is_n": ys[0], "is_h": ys[2], "is_w": ys[3], "is_c": ys[1]},
            **{"oh": h, "ow": w, "ocg": cg, "rh": rh, "rw": rw, "phases": phases},
            "mo": n * h * w,
            **{"os_n": xs[0], "os_h": xs[2], "os_w": xs[3], "os_c": xs[1]},
            **{"bs_col": fy * fx * kg, "bs_y": fx * kg, "bs_x": kg, "bs_c": 1},
            "bs_grp": cg * fy * fx * kg,
            "m": n * rh * rw,
            "kred": kred,
        }
    return {
        **common,
        **{"ih": h, "iw": w, "icg": cg},
        **{"is_n": xs[0], "is_h": xs[2], "is_w": xs[3], "is_c": xs[1]},
        **{"oh": ho, "ow": wo, "ocg": kg, "rh": ho, "rw": wo, "phases": 1},
        "mo": n * ho * wo,
        **{"os_n": ys[0], "os_h": ys[2], "os_w": ys[3], "os_c": ys[1]},
        **{"bs_col": ws[0], "bs_y": ws[2], "bs_x": ws[3], "bs_c": ws[1]},
        "bs_grp": kg * ws[0],
        "m": n * ho * wo,
        "kred": fy * fx * cg,
    }


def is_phased(p: ConvProblem) -> bool:
    """Backward data with a stride above 1 and no dilation runs as one dense GEMM per stride
    phase (``sh * sw`` of them, grid z); dilated strided problems skip taps instead (slower)."""
    return (
        p.direction is Direction.BACKWARD_DATA
        and max(p.conv.strides) > 1
        and max(p.conv.dilations) == 1
    )


def tap_reach(p: ConvProblem) -> int:
    """The largest offset the kernel adds to a row's (or column's) base pointer in 32-bit
    arithmetic: every tap's displacement plus every reduction channel, in A and in B."""
    s = gemm_params(p)
    fy, fx = s["fy"], s["fx"]
    a = (fy - 1) * s["dh"] * abs(s["is_h"]) + (fx - 1) * s["dw"] * abs(s["is_w"])
    a += s["icg"] * abs(s["is_c"])
    b = (fy - 1) * abs(s["bs_y"]) + (fx - 1) * abs(s["bs_x"]) + s["icg"] * abs(s["bs_c"])
    return max(a, b)


def vector_width(p: ConvProblem) -> int:
    """Elements per 16-byte load when the reduction channels are innermost and they and the
    strides are multiples of 16 bytes, else 1 (scalar loads through any strides)."""
    vec = 16 // p.dtype.itemsize
    s = gemm_params(p)
    if s["is_c"] != 1 or s["bs_c"] != 1 or s["icg"] % vec:
        return 1
    strides = (s["is_n"], s["is_h"], s["is_w"], s["bs_col"], s["bs_y"], s["bs_x"])
    return 1 if any(st % vec for st in strides) else vec


def warp_grid(bm: int, bn: int) -> tuple[int, int]:
    """Warps along rows and columns (8 in all) whose warp tile is most nearly square, rows
    preferred (an A fragment is reused across more columns); each warp tile side a multiple
    of 16 (ldmatrix.x4 loads B for two 8-column tiles at once), and an even number of warps
    along columns (the MFMA path pairs them into waves of 64)."""
    import numpy as np

    best = None
    for wm, wn in _WARP_GRIDS:
        if bm % (16 * wm) or bn % (16 * wn) or wn % 2:
            continue
        tm, tn = bm // wm, bn // wn
        key = (abs(np.log2(tm / tn)), tm < tn)
        if best is None or key < best[0]:
            best = (key, (wm, wn))
    if best is None:
        raise InvalidArgumentError("no 8-warp grid for this tile", field="bm x bn", value=(bm, bn))
    return best[1]


def min_blocks(bm: int, bn: int) -> int:
    """Blocks per SM the kernel's register budget is bounded for: 2 for warp tiles up to
    64 x 32 (they fit in 128 registers without spills), 1 for 64 x 64 (about 240)."""
    wm, wn = warp_grid(bm, bn)
    return 2 if (bm // wm) * (bn // wn) <= 2048 else 1


def shared_bytes(p: ConvProblem, cfg: PerfConfig) -> int:
    """Dynamic shared memory of one block: ``stages`` x (bm + bn) rows of ``bk`` + 16 B."""
    item = p.dtype.itemsize
    return cfg["stages"] * (cfg["bm"] + cfg["bn"]) * (cfg["bk"] * item + 16)


def shared_limit(ctx: ExecutionContext) -> int:
    """Dynamic shared memory one block may use on this device (with the driver's opt-in above
    48 KiB on CUDA): 227 KiB on sm_90, 163 KiB on sm_80/87, 99 KiB on other sm_8x, 64 KiB LDS
    on AMD."""
    if ctx.backend != "cuda":
        return 64 * 1024
    arch = ctx.device.arch
    if arch.startswith("sm9") or arch.startswith("sm1"):
        return 227 * 1024
    if arch in ("sm80", "sm87"):
        return 163 * 1024
    if arch.startswith("sm8"):
        return 99 * 1024
    return SHARED_LIMIT


def ktiles(p: ConvProblem, bk: int) -> int:
    return -(-gemm_params(p)["kred"] // bk)


def tile_blocks(p: ConvProblem, bm: int, bn: int) -> int:
    s = gemm_params(p)
    return -(-s["m"] // bm) * s["groups"] * -(-s["ocg"] // bn) * s["phases"]


def transposed_filter_bytes(p: ConvProblem) -> int:
    """Backward data: the transposed filter, rounded up to 256 bytes (partials follow it)."""
    import numpy as np

    if p.direction is not Direction.BACKWARD_DATA:
        return 0
    return -(-int(np.prod(p.w.lengths)) * p.dtype.itemsize // 256) * 256


def split_bytes(p: ConvProblem, split: int) -> int:
    s = gemm_params(p)
    return 0 if split == 1 else split * s["mo"] * s["groups"] * s["ocg"] * 4


def occupancy(ctx: ExecutionContext, p: ConvProblem, cfg: PerfConfig) -> int:
    """Blocks per SM: by shared memory and by registers (estimated from the warp tile)."""
    wm, wn = warp_grid(cfg["bm"], cfg["bn"])
    warp_elems = (cfg["bm"] // wm) * (cfg["bn"] // wn)
    regs = 240 if warp_elems >= 4096 else 128 if warp_elems >= 2048 else 96
    by_regs = 65536 // (THREADS * regs)
    by_smem = shared_limit(ctx) // max(1, shared_bytes(p, cfg))
    return max(1, min(by_regs, by_smem, 4))
