"""CPU checks of ``igemm.gpu_wgmma_wrw``'s fix-up (the ``fix`` key): where the parts' fp32 sums
go through the workspace, the last part of each tile to finish adds them in part order and
stores the filter, so the solution has no reduce kernel, and the workspace holds one count of
arrived parts per tile after the slabs. The space offers a twin of every such configuration;
the defaults stay with the reduce until a GPU has timed the twins. No device is needed (the
kernel runs in ``tests/test_gpu_igemm_wgmma_wrw.py``'s every-config tests)."""

from __future__ import annotations

import pytest
from wgmma_wrw_fixtures import sm90_context, wrw_problem

import miocore

wrw = pytest.importorskip("miocore_igemm.gpu_wgmma_wrw")
wrw_plan = pytest.importorskip("miocore_igemm.gpu_wgmma_wrw_plan")

SOLVER = wrw.GpuWgmmaWrwSolver()


_ctx, _problem = sm90_context, wrw_problem


def test_space_offers_a_fixup_twin_of_every_configuration_that_reduces() -> None:
    ctx, p = _ctx(), _problem().canonical
    space = SOLVER.perf_config_space(ctx, p)
    fixed = [c for c in space if c.get("fix")]
    plain = [c for c in space if "fix" not in c and "sk" not in c]
    reducing = [c for c in plain if not wrw_plan._direct(p, (c["bm"], c["bn"]), c["split"])]
    assert fixed and [{k: v for k, v in c.items() if k != "fix"} for c in fixed] == reducing
    # after the split-K configurations, before the stream-K shares
    first_share = next(i for i, c in enumerate(space) if "sk" in c)
    assert space.index(plain[-1]) < space.index(fixed[0])
    assert space.index(fixed[-1]) < first_share
    assert all(SOLVER.is_valid_perf_config(ctx, p, c) for c in fixed)
    direct = next(c for c in plain if c not in reducing)  # one part, straight into the filter
    assert not SOLVER.is_valid_perf_config(ctx, p, miocore.PerfConfig(**direct, fix=1))
    share = next(c for c in space if c.get("sk"))
    assert not SOLVER.is_valid_perf_config(ctx, p, miocore.PerfConfig(**share, fix=1))
    assert not SOLVER.is_valid_perf_config(ctx, p, miocore.PerfConfig(**reducing[0], fix=2))
    # not ranked yet: neither the default nor a normal find's alternative
    assert not SOLVER.default_perf_config(ctx, p).get("fix")
    assert not any(c.get("fix") for c in SOLVER.find_configs(ctx, p))


def test_fixup_solution_has_no_reduce_and_counts_each_tile_after_the_slabs() -> None:
    ctx, p = _ctx(), _problem().canonical
    space = SOLVER.perf_config_space(ctx, p)
    twin = next(c for c in space if c.get("fix") and (c["bm"], c["bn"]) == (128, 256))
    plain = miocore.PerfConfig(**{k: v for k, v in twin.items() if k != "fix"})
    reduced, fixed = SOLVER.get_solution(ctx, p, plain), SOLVER.get_solution(ctx, p, twin)
    assert [k.kernel_name for k in reduced.kernels] == ["igemm_wgmma_wrw", "igemm_wgmma_wrw_reduce"]
    assert [k.kernel_name for k in fixed.kernels] == ["igemm_wgmma_wrw"]
    assert "-DMIO_FIXUP=1" in fixed.kernels[0].options
    assert "-DMIO_FIXUP=1" not in reduced.kernels[0].options
    assert fixed.kernels[0].grid == reduced.kernels[0].grid  # the same persistent units
    tiles = 512 // 128 * (512 // 256) * 9  # k tiles x c tiles x taps: 72
    assert wrw_plan.counter_bytes(p, twin) == tiles * 4 == 288  # already a multiple of 16
    assert fixed.workspace_size == reduced.workspace_size + 288
    assert SOLVER.workspace_size(ctx, p, twin) == fixed.workspace_size
    # the kernel reads the counts right after the slabs: the same geometry as the reduce's
    assert wrw_plan.pack_geometry(p, twin) == wrw_plan.pack_geometry(p, plain)


def test_fixup_counts_round_to_16_bytes_and_halves_keep_two_slabs_a_part() -> None:
    ctx = _ctx()
    p = _problem(c=64, k=64, in_spatial=(56, 56)).canonical  # 64 x 64 tiles: 9 of them
    space = SOLVER.perf_config_space(ctx, p)
    twin = next(c for c in space if c.get("fix") and (c["bm"], c["bn"]) == (64, 64))
    assert wrw_plan.counter_bytes(p, twin) == 48  # 9 counts, 36 bytes, rounded up
    slab = 64 * 9 * 64 * 4
    assert wrw_plan.partial_bytes(p, twin) == 2 * twin["split"] * slab + 48  # one per consumer
