"""``direct.gpu_depthwise``'s tuning configurations: the space of each kernel and whether a
config fits a problem (the default rules: ``gpu_depthwise_defaults``).

A config names one kernel's tile: ``dw_nhwc`` (channels innermost) ``vec`` x ``pix`` x ``py``
x ``ct``; ``dw_nchw`` (channels outer) ``tw`` x ``by`` x ``py`` and optionally ``pp`` planes per
block; backward weights ``vec`` x ``ct`` x ``py`` x ``pix`` (``dw_wrw``) or the staged tiles
``vec`` x ``cb`` x ``tp`` x ``tq`` [x ``pg``, ``tma``, ``wv``, ``bs``] (``dw_wrw_tile``). None
of it needs a device: the rules read only the problem.
"""

from __future__ import annotations

from miocore import ConvProblem, Direction, PerfConfig
from miocore.backends.gpu_kernels import channels_last
from miocore_direct.gpu_depthwise_geometry import (
    GRID_YZ_LIMIT,
    INT32_MAX,
    MAX_NCHW_OUTPUTS,
    MAX_TILE_GROUP_TAPS,
    NCHW_PLANES,
    NHWC_MIN_BLOCKS,
    ROWS_MAX_TAPS,
    ROWS_MAX_WINDOW,
    ROWS_OX,
    ROWS_OY,
    SHARED_LIMIT,
    ct_for,
    esize,
    is_rows,
    is_tile,
    kernel_kind,
    nchw_shared_bytes,
    pow2_at_least,
    problem_sizes,
    role,
    rows_apply,
    rows_window,
    tap_count,
    vec_ok,
    vecs,
    wrw_taps_per_block,
    wrw_tile_applies,
    wrw_tile_items,
    wrw_tile_shared_bytes,
    wrw_tile_x_pixels,
)
from miocore_direct.gpu_depthwise_nhwc_tile import (
    is_nhwc_tile,
    nhwc_tile_configs,
    nhwc_tile_fits,
    nhwc_tile_valid,
)


def config_space(problem: ConvProblem) -> list[PerfConfig]:
    """Per kernel: nhwc ``vec`` x ``pix`` x ``ct``; nchw ``tw`` x ``by`` x ``py`` tiles, then
    the narrowest whole-plane tiles with ``pp`` planes per block;
    backward weights ``vec`` x ``ct``. Best guesses first."""
    p = problem
    kind = kernel_kind(p)
    s = problem_sizes(p)
    out: list[PerfConfig] = []
    if kind == "nhwc":
        written = p.x.lengths[1] if p.direction is Direction.BACKWARD_DATA else s["k"]
        gather = role(p)[5]
        for vec in vecs(p):
            for pix in (1,) if gather else (2, 1, 4):
                for py in (1,) if gather else (4, 2, 1):
                    for ct in dict.fromkeys((ct_for(written, vec), 8, 16, 32)):
                        cfg = PerfConfig(vec=vec, pix=pix, py=py, ct=ct)
                        if fits(p, cfg):
                            out.append(cfg)
        # the same tiles with the registers capped for more resident blocks (the kernel is
        # latency-bound at 25% occupancy on 16-bit 3x3 layers: Nsight Compute, H200)
        out += [PerfConfig(**cfg, mb=mb) for mb in NHWC_MIN_BLOCKS for cfg in list(out)]
        # dw_nhwc_tile: the input staged in shared memory with 16-byte loads
        out += nhwc_tile_configs(p)
    elif kind == "nchw":
        # the narrowest tiles that cover the written plane: candidates for several planes
        ho, wo = (s["in"] if p.direction is Direction.BACKWARD_DATA else s["out"])[1:]
        whole = []
        for tw in (32, 16, 8):
            for by in (8, 4, 16, 2):
                for py in (1, 2, 4):
                    cfg = PerfConfig(tw=tw, by=by, py=py)
                    if fits(p, cfg):
                        out.append(cfg)
                        narrow = tw == max(8, pow2_at_least(wo))
                        if narrow and by * py == max(2, pow2_at_least(ho)):
                            whole.append(cfg)
        for pp in NCHW_PLANES:
            for cfg in whole:
                many = PerfConfig(tw=cfg["tw"], by=cfg["by"], py=cfg["py"], pp=pp)
                if cfg["py"] * pp <= MAX_NCHW_OUTPUTS and fits(p, many):
                    out.append(many)
        # dw_nchw_rows: runs of ox outputs x oy rows a thread, from registers
        for ox in ROWS_OX if rows_apply(p) else ():
            for oy in ROWS_OY:
                cfg = PerfConfig(ox=ox, oy=oy)
                if fits(p, cfg):
                    out.append(cfg)
    else:
        if wrw_tile_applies(p):
            for vec in vecs(p)[:1]:  # the widest (a scalar twin is always built)
                for cb in (32, 64, 16):
                    for tp in (2, 1, 4):
                        for tq in (32, 16, 8):
                            cfg = PerfConfig(vec=vec, cb=cb, tp=tp, tq=tq)
                            if fits(p, cfg):
                                out.append(cfg)
            # row groups: every tap in a thread (filters up to 5x5: its registers)
            for vec in vecs(p)[:1] if tap_count(p) <= MAX_TILE_GROUP_TAPS else ():
                for cb in (32, 64):
                    for tp in (4, 2):
                        for tq in (16, 8, 32):
                            for pg in (4, 2):
                                cfg = PerfConfig(vec=vec, cb=cb, tp=tp, tq=tq, pg=pg)
                                if fits(p, cfg):
                                    out.append(cfg)
        cl = channels_last(p.x)
        for vec in vecs(p) if cl else [1]:
            strips = wrw_taps_per_block(p, vec) == tap_count(
                p
            )  # strips need every tap in one block
            cts = dict.fromkeys((ct_for(s["k"], vec), 8, 16, 32) if cl else (1,))
            for pix in (2, 1) if strips else (1,):
                for py in (4, 2, 1) if strips else (1,):
                    for ct in cts:
                        cfg = PerfConfig(vec=vec, ct=ct, py=py, pix=pix)
                        if fits(p, cfg):
                            out.append(cfg)
    return out


def fits(p: ConvProblem, cfg: PerfConfig) -> bool:
    """Whether ``cfg`` fits ``p``: threads, shared memory, grid limits of its kernel."""
    kind = kernel_kind(p)
    s = problem_sizes(p)
    if is_nhwc_tile(cfg):
        return nhwc_tile_fits(p, cfg)
    if kind == "nchw" and is_rows(cfg):
        return (
            rows_apply(p)
            and rows_window(p, cfg["ox"]) <= ROWS_MAX_WINDOW
            and tap_count(p) <= ROWS_MAX_TAPS
            and rows_items(p, cfg)[2] <= INT32_MAX  # the kernel's 32-bit run index
        )
    if kind == "nchw":
        if cfg["tw"] * cfg["by"] > 256 or nchw_shared_bytes(p, cfg) > SHARED_LIMIT:
            return False
        if cfg.get("pp", 1) > 1 and cfg["py"] * cfg["pp"] > MAX_NCHW_OUTPUTS:
            return False
        return nchw_tiles(p, cfg)[2] <= GRID_YZ_LIMIT
    if is_tile(cfg):
        vec, cb, pg, wv = cfg["vec"], cfg["cb"], cfg.get("pg", 0), cfg.get("wv", 1)
        if cfg.get("tma", 1) != 1 or (cfg.get("tma") and vec * esize(p) != 16):
            return False  # TMA: 16-byte vectors (aligned strides; the twin for other buffers)
        if wv not in (1, *WRW_TILE_WV) or cb % wv or (wv > 1 and not cfg.get("tma")):
            return False  # several channels a thread: TMA tiles only
        if "bs" in cfg and (cfg["bs"] not in WRW_TILE_BLOCKS or not cfg.get("tma")):
            return False  # more blocks a compute unit: TMA tiles only
        if pg and not (
            pg <= cfg["tp"]
            # a warp holds one row group, its rows' branch uniform; with wv > 1 each thread
            # walks its own rows
            and (cb >= 32 or wv > 1)
            and tap_count(p) <= MAX_TILE_GROUP_TAPS
            and pg * tap_count(p) <= wrw_tile_x_pixels(p, cfg)  # the groups' sums fit
        ):
            return False
        return (
            wrw_tile_applies(p)
            and vec_ok(p, vec)
            and cb % vec == 0
            and cb // wv * (pg or s["f"][1]) <= 1024
            and wrw_tile_shared_bytes(p, cfg) <= SHARED_LIMIT
            and wrw_tile_items(p, cfg) <= INT32_MAX
            and -(-s["k"] // cb) <= GRID_YZ_LIMIT
        )
    vec, ct = cfg["vec"], cfg["ct"]
    if not vec_ok(p, vec) or not 1 <= ct <= 256:
        return False
    written = p.x.lengths[1] if p.direction is Direction.BACKWARD_DATA else s["k"]
    if -(-written // (vec * ct)) > GRID_YZ_LIMIT:
        return False
    if kind == "nhwc":
        return (cfg["pix"] == 1 and cfg["py"] == 1) or not role(p)[5]
    if (cfg["py"] > 1 or cfg["pix"] > 1) and wrw_taps_per_block(p, vec) != tap_count(p):
        return False
    return -(-tap_count(p) // wrw_taps_per_block(p, vec)) <= GRID_YZ_LIMIT


#: Channels a TMA ``dw_wrw_tile`` thread computes besides one (``wv``): a staged read feeds
#: that many multiply-adds. Only with TMA staging: staged through registers, a block of fewer
#: threads carries more of each tile a thread (165-255 registers, fortieth session).
WRW_TILE_WV = (2, 4)

#: Blocks per compute unit a TMA ``dw_wrw_tile`` split aims at besides the plain rule's 4
#: (``bs``): TMA tiles take 32-80 registers where the register-staged ones took 165-255, so
#: more fit; dw144s1@56's default ran at 25% occupancy, 4 blocks of 4 warps an SM, DRAM at
#: half its peak (Nsight Compute, forty-first session). A launch-size key: same kernels.
WRW_TILE_BLOCKS = (8,)


def in_wrw_tile_tma_space(p: ConvProblem, cfg: PerfConfig, space: list[PerfConfig]) -> bool:
    """Whether ``cfg`` is one of :func:`wrw_tile_tma_configs` (``space``: ``p``'s
    :func:`config_space`), without listing them: its tile without ``tma``, ``wv`` and ``bs`` is
    in the space and it fits."""
    base = PerfConfig(**{k: v for k, v in cfg.items() if k not in ("tma", "wv", "bs")})
    return cfg.get("tma") == 1 and base in space and fits(p, cfg)


def wrw_tile_tma_configs(p: ConvProblem) -> list[PerfConfig]:
    """Every ``dw_wrw_tile`` config of the space again with ``tma`` (its tiles staged by the
    tensor memory accelerator), then each with 2 and 4 channels a thread (``wv``), where they
    fit; then all of those again split for :data:`WRW_TILE_BLOCKS` blocks a compute unit
    (``bs``)."""
    tiles = [c for c in config_space(p) if is_tile(c)]
    twins = [PerfConfig(**c, tma=1) for c in tiles]
    wide = [PerfConfig(**c, wv=wv) for wv in WRW_TILE_WV for c in twins]
    fitting = [c for c in twins + wide if fits(p, c)]
    return fitting + [PerfConfig(**c, bs=bs) for bs in WRW_TILE_BLOCKS for c in fitting]


def valid_config(problem: ConvProblem, config: PerfConfig) -> bool:
    """A config with this kernel's keys, sane values, that fits the problem."""
    if is_nhwc_tile(config):
        return nhwc_tile_valid(problem, config)
    keys = {
        "nhwc": ("vec", "pix", "py", "ct", "mb") if "mb" in config else ("vec", "pix", "py", "ct"),
        "nchw": ("tw", "by", "py", "pp") if "pp" in config else ("tw", "by", "py"),
        "wrw": ("vec", "ct", "py", "pix"),
    }
    kind = kernel_kind(problem)
    if kind == "nchw" and is_rows(config):
        keys["nchw"] = ("ox", "oy")
    if kind == "wrw" and "cb" in config:
        optional = tuple(k for k in ("pg", "tma", "wv", "bs") if k in config)
        keys["wrw"] = ("vec", "cb", "tp", "tq", *optional)
    try:
        values = {k: int(config[k]) for k in keys[kind]}
    except (KeyError, TypeError, ValueError):
        return False
    if any(isinstance(config[k], float) and config[k] != values[k] for k in values):
        return False  # a fraction is no tile size (int() would round it to one)
    if any(v < 1 or v > 256 for v in values.values()):
        return False
    if any(values.get(k, 1) > 8 for k in ("pix", "vec", "py", "tp", "pg")):
        return False
    if values.get("mb", NHWC_MIN_BLOCKS[0]) not in NHWC_MIN_BLOCKS:
        return False
    if values.get("pp", 1) not in (1, *NCHW_PLANES):
        return False
    if "ox" in values and (values["ox"] not in ROWS_OX or values["oy"] not in ROWS_OY):
        return False
    return fits(problem, PerfConfig(**values))


def nchw_tiles(p: ConvProblem, cfg: PerfConfig) -> tuple[int, int, int]:
    """(tiles along W, tiles along H, tiles per plane) of the written tensor."""
    b = role(p)[1]
    h, w = b.lengths[-2], b.lengths[-1]
    tw_n = -(-w // cfg["tw"])
    th_n = -(-h // (cfg["by"] * cfg["py"]))
    return tw_n, th_n, tw_n * th_n


def rows_items(p: ConvProblem, cfg: PerfConfig) -> tuple[int, int, int]:
    """``dw_nchw_rows``: (column runs per row, row groups per plane, all runs) of the written
    tensor."""
    b = role(p)[1]
    h, w = b.lengths[-2], b.lengths[-1]
    runs = -(-w // cfg["ox"])
    groups = -(-h // cfg["oy"])
    return runs, groups, b.lengths[0] * b.lengths[1] * runs * groups
