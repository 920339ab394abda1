"""The depthwise bench's choice of configs (``benchmarks/depthwise_picks.py``), on the host: a
``--vary`` sweep holds the default and exactly the tiles that differ from the batch-64 default
tile in the named keys, and the kernel count is what the backend's precompile would build."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

pytest.importorskip("miocore_direct.gpu_depthwise")
sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))

import depthwise_picks as picks
from shapes import SUITES, problem


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    picks.add_pick_options(parser)
    return parser.parse_args(list(argv))


def _layer(name: str):
    return next(lay for lay in SUITES["mobilenetv3_large_dw"] if lay.name == name)


def test_vary_holds_the_default_and_the_reference_tile_varied_in_the_named_keys_only() -> None:
    solver, ctx = picks.registered_solver("direct.gpu_depthwise"), picks.stand_in_context()
    layer = _layer("dw960k5s1@7")
    canon = problem(layer, 32, "forward", dtype="float16", layout="NHWC").canonical
    ref = picks.reference_tile(layer, "forward", "float16", "NHWC", 64)
    assert ref is not None and ref.get("nt") == 4 and ref.get("tma") == 1
    chosen = picks.picks_for(
        _args("--configs", "0", "--tile-only", "--vary", "nt"),
        solver, ctx, canon, (layer, "forward", "float16", "NHWC"),
    )  # fmt: skip
    space = solver.perf_config_space(ctx, canon)
    assert chosen[0] == solver.default_perf_config(ctx, canon)
    narrow = picks.picks_for(
        _args("--configs", "1", "--vary", "nt"), solver, ctx, canon,
        (layer, "forward", "float16", "NHWC"),
    )  # fmt: skip
    tiles = [c for c in narrow if picks.is_nhwc_tile(c)]
    same = {k: v for k, v in ref.items() if k != "nt"}
    # the run lengths the space has for that tile, the single tile (no nt) among them
    assert {c.get("nt") for c in tiles if {k: v for k, v in c.items() if k != "nt"} == same} >= {
        None, 2, 4
    }  # fmt: skip
    assert all(c in space for c in narrow) and len(narrow) < len(chosen)
    assert len(picks.unique_kernels(solver, ctx, canon, narrow)) >= len(tiles)


def test_varied_keeps_every_other_key_fixed() -> None:
    ref = picks.PerfConfig(ch=64, toh=8, tow=8, pix=4, vec=2, tma=1, nt=4)
    space = [
        picks.PerfConfig(ch=64, toh=8, tow=8, pix=4, vec=2, tma=1),
        picks.PerfConfig(ch=32, toh=8, tow=8, pix=4, vec=2, tma=1, nt=2),
        picks.PerfConfig(ch=64, toh=8, tow=8, pix=2, vec=2, tma=1, nt=2),
        picks.PerfConfig(ct=8, pix=4, py=1, vec=8),  # not a staged tile
    ]
    assert picks.varied(space, ref, ["nt"]) == space[:1]
    assert picks.varied(space, ref, ["nt", "ch"]) == space[:2]


def test_with_plain_adds_dw_nhwc_default_where_a_tile_rule_took_the_layer() -> None:
    solver, ctx = picks.registered_solver("direct.gpu_depthwise"), picks.stand_in_context()
    layer = _layer("dw240k3s2@28")  # the gather: a staged tile at batch 32
    row = (layer, "backward_data", "float16", "NHWC")
    canon = problem(layer, 32, "backward_data", dtype="float16", layout="NHWC").canonical
    default = solver.default_perf_config(ctx, canon)
    assert picks.is_nhwc_tile(default)
    chosen = picks.picks_for(_args("--configs", "1", "--with-plain"), solver, ctx, canon, row)
    plain = [c for c in chosen if not picks.is_nhwc_tile(c)]
    assert chosen[0] == default and plain and "ct" in plain[-1]  # dw_nhwc: all channels a row
    assert picks.picks_for(_args("--configs", "1"), solver, ctx, canon, row) == chosen[:-1]
