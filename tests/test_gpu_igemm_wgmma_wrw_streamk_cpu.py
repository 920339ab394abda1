"""CPU checks of ``igemm.gpu_wgmma_wrw``'s stream-K shares (the ``sk`` key): the share and
segment arithmetic of ``kernels/igemm_wgmma_wrw_streamk.h`` (the code the kernel and its reduce
run, built here for the host) partitions the (tile, box) iterations exactly, evenly and with
each tile's contributors numbered in order; the plan's slab count matches it; and the solver
offers, validates and builds those configurations. No device is needed (the kernel itself runs
in ``tests/test_gpu_igemm_wgmma_wrw.py``'s every-config tests)."""

from __future__ import annotations

import collections
import itertools
import shutil
import subprocess
from pathlib import Path

import pytest
from wgmma_wrw_fixtures import sm90_context, wrw_problem

import miocore

wrw = pytest.importorskip("miocore_igemm.gpu_wgmma_wrw")
wrw_plan = pytest.importorskip("miocore_igemm.gpu_wgmma_wrw_plan")

SOLVER = wrw.GpuWgmmaWrwSolver()
HOST = Path(__file__).parent / "host_kernels"
KERNELS = Path(wrw.__file__).parent / "kernels"
CXX = shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")


_ctx, _problem = sm90_context, wrw_problem


@pytest.fixture(scope="module")
def shares(tmp_path_factory: pytest.TempPathFactory):
    """Runs the header's arithmetic on the host: (segments, contributors) of a launch."""
    if CXX is None:
        pytest.skip("no C++ compiler")
    exe = tmp_path_factory.mktemp("streamk") / "run_wrw_streamk"
    built = subprocess.run(
        [CXX, "-O1", "-std=c++17", f"-I{KERNELS}", str(HOST / "run_wrw_streamk.cpp"), "-o",
         str(exe)], capture_output=True, text=True,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]

    def run(tiles: int, boxes: int, blocks: int) -> tuple[list, dict]:
        out = subprocess.run([str(exe), str(tiles), str(boxes), str(blocks)], check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        segments, contributors = [], {}
        for line in out.splitlines():
            kind, *values = line.split()
            if kind == "s":
                segments.append(tuple(int(v) for v in values))
            else:
                contributors[int(values[0])] = int(values[1])
        return segments, contributors

    return run


@pytest.mark.parametrize(
    ("tiles", "boxes", "blocks"),
    [
        (72, 196, 132),  # VGG-16 conv4_2 at batch 16: 128 x 256 tiles, 1.64 waves in 3 parts
        (72, 49, 132),  # conv5_1
        (36, 196, 132),  # conv4_1
        (9, 12544, 132),  # conv1_2: 64 x 64 tiles, long sums
        (1, 1, 1),
        (5, 3, 15),  # one iteration a block
        (7, 13, 64),
        (1000, 2, 132),  # more tiles than blocks: shares of several whole tiles
    ],
)
def test_shares_partition_the_iterations_evenly_and_number_each_tiles_contributors(
    shares, tiles: int, boxes: int, blocks: int
) -> None:
    segments, contributors = shares(tiles, boxes, blocks)
    covered = collections.Counter()
    per_block = collections.Counter()
    by_tile = collections.defaultdict(list)
    for block, tile, lo, hi, ordinal in segments:
        assert 0 <= tile < tiles and 0 <= lo < hi <= boxes
        covered.update((tile, box) for box in range(lo, hi))
        per_block[block] += hi - lo
        by_tile[tile].append((block, ordinal, lo, hi))
    # every (tile, box) exactly once
    assert len(covered) == tiles * boxes and set(covered.values()) == {1}
    # every block the same work to one iteration
    assert len(per_block) == blocks and max(per_block.values()) - min(per_block.values()) <= 1
    for tile, pieces in by_tile.items():
        pieces.sort()
        # a tile's contributors are consecutive blocks numbered 0, 1, ... in order, their boxes
        # consecutive too; the reduce adds exactly that many slabs
        assert [o for _, o, _, _ in pieces] == list(range(len(pieces)))
        assert [b for b, *_ in pieces] == list(range(pieces[0][0], pieces[0][0] + len(pieces)))
        assert pieces[0][2] == 0 and pieces[-1][3] == boxes
        assert all(a[3] == b[2] for a, b in itertools.pairwise(pieces))
        assert contributors[tile] == len(pieces)
    assert wrw_plan._most_contributors(tiles, boxes, blocks) == max(contributors.values())


def test_solver_offers_stream_k_after_split_k_and_ranks_it_where_tiles_are_few() -> None:
    # H200, fp16 (2026-11-30): shares beat every split-K part count of the same tile on the
    # narrow layers (a few tiles over many pixel boxes: 0.74-0.96x the time) and lost on
    # VGG-16's 512-channel layers and most per-tap tiles, whose blocks reread the operands
    ctx, p = _ctx(), _problem().canonical  # VGG-16 conv4_2: 72 tiles of 128 x 256
    space = SOLVER.perf_config_space(ctx, p)
    shares = [c for c in space if c.get("sk")]
    assert shares and all(c.get("sk") for c in space[len(space) - len(shares) :])
    assert all(SOLVER.is_valid_perf_config(ctx, p, c) for c in shares)
    assert not SOLVER.default_perf_config(ctx, p).get("sk")
    assert not any(c.get("sk") for c in SOLVER.find_configs(ctx, p))
    narrow = _problem(c=64, k=64, in_spatial=(224, 224)).canonical  # conv1_2: 3 span tiles
    default = SOLVER.default_perf_config(ctx, narrow)
    assert default.get("sk") and default["span"] == 3
    assert all(c["split"] == 1 for c in wrw_plan.ranked(ctx, narrow) if c.get("sk"))
    tiny = _problem(n=1, c=64, k=64, in_spatial=(8, 8)).canonical  # fewer iterations than SMs
    assert not any(c.get("sk") for c in wrw_plan.ranked(ctx, tiny))
    bad = miocore.PerfConfig(**{**dict(shares[0]), "split": 3})
    assert not SOLVER.is_valid_perf_config(ctx, p, bad)  # stream-K has no parts
    assert not SOLVER.is_valid_perf_config(
        ctx, p, miocore.PerfConfig(**{**dict(shares[0]), "sk": 2})
    )


def test_stream_k_solution_launches_one_block_a_sm_and_sums_each_tiles_contributors() -> None:
    ctx, p = _ctx(), _problem().canonical
    cfg = next(c for c in SOLVER.perf_config_space(ctx, p)
               if c.get("sk") and (c["bm"], c["bn"]) == (128, 256))  # fmt: skip
    solution = SOLVER.get_solution(ctx, p, cfg)
    main, reduce = solution.kernels
    assert "-DMIO_STREAMK=1" in main.options and "-DMIO_STREAMK=1" in reduce.options
    boxes = wrw._boxes(p, (cfg["tw"], cfg["th"], 1, cfg["tn"]))
    assert main.grid == (132,)
    tiles = 4 * 2 * 9  # 512 / 128 k tiles, 512 / 256 c tiles, 9 taps
    slabs = wrw_plan._most_contributors(tiles, boxes, 132)
    assert 2 <= slabs <= 3  # 72 x 196 iterations in shares of 106-107: a tile meets 2-3 blocks
    assert solution.workspace_size == slabs * 512 * 9 * 512 * 4
    fields = wrw_plan._GEOMETRY.unpack(wrw_plan.pack_geometry(p, cfg, 132))
    assert fields[19:22] == (132, 0, slabs)  # split holds the blocks; never direct
    # a split-K twin of the same tile keeps its own launch and geometry
    twin = miocore.PerfConfig(**{k: v for k, v in cfg.items() if k != "sk"})
    assert "-DMIO_STREAMK=1" not in SOLVER.get_solution(ctx, p, twin).kernels[0].options


def test_stream_k_on_a_small_launch_takes_fewer_blocks_and_halves_keep_a_slab_each() -> None:
    ctx = _ctx()
    p = _problem(n=1, c=64, k=64, in_spatial=(8, 8)).canonical  # 9 taps x 1 box
    cfg = next(c for c in SOLVER.perf_config_space(ctx, p)
               if c.get("sk") and (c["bm"], c["bn"]) == (64, 64))  # fmt: skip
    blocks = wrw_plan.streamk_blocks(p, cfg, 132)
    assert blocks == 9 == SOLVER.get_solution(ctx, p, cfg).kernels[0].grid[0]
    # one block a tile, each consumer of the 64 x 64 tile its own slab
    assert wrw_plan.streamk_slabs(p, cfg, blocks) == 2
