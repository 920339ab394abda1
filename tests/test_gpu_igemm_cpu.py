"""CPU checks of the igemm GPU solvers: the kernel's parameter struct, configs, math mode.

No device is needed: these run in every CI job where ``miocore-igemm`` is importable.
"""

from __future__ import annotations

import re

import attrs
import numpy as np
import pytest

import miocore
from miocore.testing import cpu_context

gpu = pytest.importorskip("miocore_igemm.gpu")


def _ctx(mode: str = "exact", sms: int = 132) -> miocore.ExecutionContext:
    device = attrs.evolve(cpu_context().device, backend="cuda", compute_units=sms)
    return miocore.ExecutionContext(device=device, math_mode=mode)


def _problem(dtype: str = "float16", c: int = 64, k: int = 64, **kw) -> miocore.ConvProblem:
    args = dict(n=2, c=c, k=k, in_spatial=(9, 11), filter_spatial=(3, 3), pads=(1, 1))
    args.update(kw)
    return miocore.ConvProblem.from_sizes("forward", dtype=dtype, layout="NHWC", **args)


def test_param_struct_matches_the_kernel() -> None:
    source = (gpu.KERNEL_DIR / "igemm_mma.cu").read_text()
    body = re.search(r"struct MioIgemmParams \{(.*?)\};", source, re.S).group(1)
    fields = []
    for line in body.splitlines():
        decl = line.split("//")[0].strip()
        if decl:
            assert decl.startswith("mio_index ") and decl.endswith(";"), decl
            fields += [f.strip() for f in decl[len("mio_index ") : -1].split(",")]
    assert tuple(fields) == gpu.PARAM_FIELDS


def test_pack_params_order_and_completeness() -> None:
    values = np.frombuffer(
        gpu.pack_params({f: i for i, f in enumerate(gpu.PARAM_FIELDS)}), np.int64
    )
    assert list(values) == list(range(len(gpu.PARAM_FIELDS)))
    with pytest.raises(ValueError):
        gpu.pack_params({"n": 1})


def test_applicability() -> None:
    mma, tf32 = gpu.GpuMmaIgemmSolver(), gpu.GpuTf32IgemmSolver()
    assert mma.is_applicable(_ctx(), _problem().canonical)
    assert mma.is_applicable(_ctx(), _problem("bfloat16").canonical)
    assert not mma.is_applicable(_ctx(), _problem("float32").canonical)
    nchw = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=8, k=8, in_spatial=(5, 5), filter_spatial=(3, 3), dtype="float16"
    )
    assert "channels innermost" in mma.is_applicable(_ctx(), nchw.canonical).reason
    bwd = miocore.ConvProblem.from_sizes(
        "backward_data",
        n=1,
        c=8,
        k=8,
        in_spatial=(5, 5),
        filter_spatial=(3, 3),
        dtype="float16",
        layout="NHWC",
    )
    assert "forward only" in mma.is_applicable(_ctx(), bwd.canonical).reason
    fp32 = _problem("float32").canonical
    answer = tf32.is_applicable(_ctx("exact"), fp32)
    assert not answer and "math mode is 'exact'" in answer.reason
    assert tf32.is_applicable(_ctx("tf32"), fp32)
    assert not tf32.is_applicable(_ctx("tf32"), _problem().canonical)


def test_configs_fit_and_default_is_in_the_space() -> None:
    mma = gpu.GpuMmaIgemmSolver()
    for prob in (_problem(), _problem(c=4, k=4), _problem(c=256, k=512, groups=2)):
        canon = prob.canonical
        space = mma.perf_config_space(_ctx(), canon)
        assert space
        assert all(gpu.shared_bytes(canon, c) <= gpu.SHARED_LIMIT for c in space)
        default = mma.default_perf_config(_ctx(), canon)
        assert default in space and mma.is_valid_perf_config(_ctx(), canon, default)
        for cfg in space:
            sol = mma.get_solution(_ctx(), canon, cfg)
            assert sol.workspace_size == mma.workspace_size(_ctx(), canon, cfg)
            assert len(sol.kernels) == (2 if cfg["split"] > 1 else 1)
    assert not mma.is_valid_perf_config(_ctx(), _problem().canonical, miocore.PerfConfig(bm=3))


def test_vector_width() -> None:
    assert gpu.vector_width(_problem(c=64).canonical) == 8
    assert gpu.vector_width(_problem(c=4, k=4).canonical) == 1
    assert gpu.vector_width(_problem("float32", c=4, k=4).canonical) == 4
