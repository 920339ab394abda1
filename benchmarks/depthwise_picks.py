"""Which configs of ``direct.gpu_depthwise`` a run of ``gpu_depthwise_bench.py`` times for one
layer and direction, and how many kernels that costs to compile.

The picks are the solver's default first, then (by the bench's options) configs one key away
from it, the whole space or its staged tiles, runs of tiles, TMA twins, register caps, or the
tiles that differ from a reference tile only in chosen keys (``--vary``: the tile the default
rule picks at ``--ref-batch``, so a sweep at another batch asks only "which run length, which
channel block" instead of timing the whole space). Each config is about one kernel, and cold
compiles ran under 7 a second on the GPU machine (16 threads), so the kernel count decides what
fits one device call: :func:`unique_kernels` counts them on the host.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from miocore_direct.gpu_depthwise_defaults import default_nhwc_plain
from miocore_direct.gpu_depthwise_geometry import NHWC_MIN_BLOCKS
from miocore_direct.gpu_depthwise_nhwc_tile import (
    NHWC_TILE_RUNS,
    default_nhwc_tile,
    is_nhwc_tile,
    nhwc_tile_configs,
)
from shapes import problem

import miocore
from miocore import ConvProblem, ExecutionContext, PerfConfig
from miocore.testing import cpu_context

#: Keys ``--vary`` may name: a staged tile's shape, channel block, outputs a thread, strips,
#: run length, register cap and staging.
VARY_KEYS = ("ch", "toh", "tow", "pix", "py", "nt", "mb", "tma")


def add_pick_options(parser: argparse.ArgumentParser) -> None:
    """The options that choose the configs of a row."""
    parser.add_argument(
        "--configs", type=int, default=3, help="neighbours of the default tried (0: all)"
    )
    parser.add_argument(
        "--nhwc-tiles",
        type=int,
        default=0,
        help="also the first N staged-tile configs of dw_nhwc_tile (each capped and uncapped)",
    )
    parser.add_argument(
        "--tile-runs",
        action="store_true",
        help="with --nhwc-tiles N: the first N tiles whose two staging buffers fit (capped and "
        "not) also in runs of 2, 4 and 8 tiles a block (the nt key: the next tile's input "
        "copied while one computes)",
    )
    parser.add_argument(
        "--space-runs",
        action="store_true",
        help="also every run of staged tiles in the solver's space (each tile shape, channel "
        "block and outputs a thread, capped for 3 blocks, in runs of 2, 4 and 8)",
    )
    parser.add_argument(
        "--minb",
        action="store_true",
        help="also every channels-innermost pick with its registers capped (the mb key)",
    )
    parser.add_argument(
        "--tma-twins",
        action="store_true",
        help="also each staged-tile pick without tma staged by the tensor memory accelerator",
    )
    parser.add_argument(
        "--tile-only",
        action="store_true",
        help="with --configs 0: the default and the staged-tile configs only (dw_nhwc_tile's, "
        "dw_wrw_tile's)",
    )
    parser.add_argument(
        "--vary",
        nargs="+",
        choices=VARY_KEYS,
        default=None,
        help="also every staged tile of the space that differs from the reference tile (the "
        "default rule's tile at --ref-batch, TMA-staged) in these keys only",
    )
    parser.add_argument(
        "--with-plain",
        action="store_true",
        help="also dw_nhwc's default (channels innermost, no staged tile) where the default "
        "is a staged tile: what the default was before a tile rule took the layer",
    )
    parser.add_argument(
        "--ref-batch",
        type=int,
        default=64,
        help="the batch whose default tile --vary varies (64: the batch the rules were fitted at)",
    )


def stand_in_context(compute_units: int = 132, arch: str = "sm_90") -> ExecutionContext:
    """A context describing a CUDA device of ``compute_units`` SMs and ``arch`` without opening
    one (the H200's by default): enough for the solver's space, defaults and kernel options."""
    device = dataclasses.replace(
        cpu_context().device, backend="cuda", compute_units=compute_units, arch=arch
    )
    return ExecutionContext(device=device)


def reference_tile(layer: Any, direction: str, dtype: str, layout: str, batch: int) -> Any:
    """The default rule's TMA-staged tile for ``layer`` at ``batch`` (None where ``dw_nhwc``
    stays there too)."""
    return default_nhwc_tile(problem(layer, batch, direction, dtype=dtype, layout=layout).canonical,
                             tma=True)  # fmt: skip


def varied(space: Iterable[PerfConfig], ref: PerfConfig, keys: Sequence[str]) -> list[PerfConfig]:
    """The staged tiles of ``space`` equal to ``ref`` but in ``keys`` (present or absent)."""
    fixed = lambda c: {k: v for k, v in c.items() if k not in keys}  # noqa: E731
    return [c for c in space if is_nhwc_tile(c) and fixed(c) == fixed(ref)]


def tile_runs(solver: Any, ctx: Any, canon: Any, count: int) -> list[PerfConfig]:
    """The first ``count`` staged tiles whose two buffers fit, capped and not, in runs of
    every length of ``NHWC_TILE_RUNS``."""

    def valid(cfg: PerfConfig) -> bool:
        return solver.is_valid_perf_config(ctx, canon, cfg)

    tiles = [c for c in nhwc_tile_configs(canon) if "nt" not in c]  # single tiles
    bases = [c for c in tiles if "mb" not in c and valid(PerfConfig(**c, nt=2))][:count]
    out = []
    for cfg in tiles:
        if PerfConfig(**{k: v for k, v in cfg.items() if k != "mb"}) in bases:
            out += [r for r in (PerfConfig(**cfg, nt=nt) for nt in NHWC_TILE_RUNS) if valid(r)]
    return out


def tma_twin(config: PerfConfig) -> PerfConfig:
    """The same staged tile loaded the other way: by TMA if it used cp.async, and back."""
    rest = {k: v for k, v in config.items() if k != "tma"}
    return PerfConfig(**rest) if config.get("tma") else PerfConfig(**rest, tma=1)


def _neighbours(space: list[PerfConfig], default: PerfConfig, count: int) -> list[PerfConfig]:
    """The default and up to ``count`` configs one key away from it (one per key)."""
    near = [c for c in space if sum(c.get(k) != default[k] for k in default) == 1]
    picks = [default]
    for key in ("pix", "py", "tw", "vec", "ct", "by"):
        alt = [c for c in near if key in c and key in default and c[key] != default[key]]
        if key == "vec" and "vec" in default:  # another width, any ct
            alt = [
                c
                for c in space
                if c["vec"] != default["vec"]
                and all(c.get(k) == default[k] for k in default if k not in ("vec", "ct"))
            ]
        if alt and len(picks) <= count:
            picks.append(alt[0])
    return picks


def picks_for(
    args: argparse.Namespace, solver: Any, ctx: ExecutionContext, canon: ConvProblem, row: tuple
) -> list[PerfConfig]:
    """The configs one row times, the solver's default first; ``row`` is (layer, direction,
    dtype, layout) for ``--vary``'s reference tile."""
    space = solver.perf_config_space(ctx, canon)
    default = solver.default_perf_config(ctx, canon)
    picks = _neighbours(space, default, args.configs)
    if args.configs == 0:  # the whole space, the default first
        picks = [default, *(c for c in space if c != default)]
        if args.tile_only:
            staged = [c for c in picks[1:] if "cb" in c or is_nhwc_tile(c)]
            picks = [default, *staged]
    if args.nhwc_tiles:  # dw_nhwc_tile's first base tiles, capped or not
        tiles = [c for c in nhwc_tile_configs(canon) if "nt" not in c]
        base = [c for c in tiles if "mb" not in c][: args.nhwc_tiles]
        uncapped = [PerfConfig(**{k: v for k, v in c.items() if k != "mb"}) for c in tiles]
        chosen = [c for c, u in zip(tiles, uncapped, strict=True) if u in base]
        picks += [c for c in chosen if c not in picks]
        if args.tile_runs:
            picks += tile_runs(solver, ctx, canon, args.nhwc_tiles)
    if args.space_runs:
        picks += [c for c in space if "nt" in c and c not in picks]
    if args.vary:
        ref = reference_tile(*row, args.ref_batch)
        if ref is not None:
            picks += [c for c in varied(space, ref, args.vary) if c not in picks]
    if args.with_plain and is_nhwc_tile(default):
        plain = default_nhwc_plain(canon)
        picks += [plain] if plain in space and plain not in picks else []
    if args.tma_twins:  # a staged tile's twin staged the other way, if any
        twins = [tma_twin(c) for c in picks if is_nhwc_tile(c)]
        picks += [t for t in twins if t in space and t not in picks]
    if args.minb:  # each pick again with dw_nhwc's registers capped
        capped = [PerfConfig(**c, mb=m) for c in picks for m in NHWC_MIN_BLOCKS]
        picks += [c for c in capped if c in space]
    return picks


def unique_kernels(
    solver: Any, ctx: ExecutionContext, canon: ConvProblem, picks: Iterable[PerfConfig]
) -> set[tuple[str, str, tuple[str, ...]]]:
    """The distinct kernels (source, name, options) the picks compile, as the backend's
    ``precompile`` counts them."""
    return {
        (k.source, k.kernel_name, tuple(k.options))
        for cfg in picks
        for k in solver.get_solution(ctx, canon, cfg).kernels
    }


def registered_solver(name: str) -> Any:
    """The solver ``name`` as its plugin registers it (loaded through the entry points)."""
    return miocore.Handle("cpu").registry.get(name).solver
