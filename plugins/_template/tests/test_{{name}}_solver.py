"""{{name}}.direct beyond the contract: the plugin registers, find picks it, its kernel exists."""

from __future__ import annotations

from pathlib import Path

import miocore
import pytest
from miocore.testing import check_solver

from miocore_{{name}} import {{Name}}Direct
from miocore_{{name}}.plugin import KERNELS
from miocore_{{name}}.solver import gpu_kernel

SOLVER = {{Name}}Direct()


def test_installed_plugin_is_discovered() -> None:
    """pip installed the entry point: miocore lists the plugin and its solver."""
    miocore.solver.registry.reset_default_registry()
    reg = miocore.default_registry().get("{{name}}.direct")
    assert reg.distribution == "miocore-{{name}}" and reg.plugin == "{{name}}"
    info = next(p for p in miocore.default_registry().plugins if p.name == "{{name}}")
    assert info.status == "active" and info.solvers == ("{{name}}.direct",)


def test_find_benchmarks_and_picks_it(miocore_cpu_handle) -> None:  # type: ignore[no-untyped-def]
    """A handle holding only this solver finds, measures and runs it."""
    handle = miocore_cpu_handle(SOLVER)
    problem = miocore.ConvProblem.from_sizes(
        "forward", n=2, c=8, k=16, in_spatial=(9, 9), filter_spatial=(3, 3), pads=(1, 1)
    )
    (solution,) = handle.find_solutions(problem, find_mode="NORMAL")
    assert solution.solver == "{{name}}.direct" and solution.source == "measured"
    arrays = miocore.reference.random_inputs(problem, seed=1)
    handle.run_solution(solution, **arrays)
    expected = miocore.reference.convolution(problem, x=arrays["x"], w=arrays["w"])
    assert miocore.reference.relative_error(arrays["y"], expected) < 2e-5


@pytest.mark.parametrize("config", [{"block_k": 4}, {"block_k": 8}, {"block_k": 16}])
def test_block_sizes_agree(config: dict[str, int]) -> None:
    """Every block size computes the same convolution (grouped, strided, NHWC)."""
    problem = miocore.ConvProblem.from_sizes(
        "forward",
        n=1,
        c=8,
        k=32,
        in_spatial=(7, 7),
        filter_spatial=(3, 3),
        strides=(2, 2),
        groups=2,
        layout="NHWC",
    )
    check_solver(SOLVER, problem, perf_config=miocore.PerfConfig(config))


def test_gpu_kernel_source_ships_with_the_package() -> None:
    """The KernelInfo names a source in the declared kernel folder that defines the kernel."""
    problem = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=4, k=4, in_spatial=(5, 5), filter_spatial=(3, 3), dtype="float16"
    )
    kernel = gpu_kernel(problem)
    source = Path(KERNELS) / kernel.source
    assert source.is_file()
    assert f"MIO_KERNEL void {kernel.kernel_name}(" in source.read_text()
    assert kernel.options == ("-DMIO_DTYPE_FP16",)


@pytest.mark.gpu
def test_runs_on_a_gpu() -> None:
    """On a CUDA or HIP machine, once "cuda"/"hip" are in the solver's backends."""
    from miocore.testing.plugin import gpu_device

    device = gpu_device()
    if device not in SOLVER.backends:
        pytest.skip(f"{{name}}.direct does not list {device} in its backends yet")
    handle = miocore.Handle(device, registry=miocore.Registry.from_solvers([SOLVER]))
    problem = miocore.ConvProblem.from_sizes(
        "forward", n=2, c=8, k=8, in_spatial=(9, 9), filter_spatial=(3, 3), pads=(1, 1)
    )
    assert handle.find_solutions(problem, find_mode="NORMAL")[0].solver == "{{name}}.direct"
