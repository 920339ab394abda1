"""Fit the cost-model constants of ``fft.overlap_save`` (FFT_EFFICIENCY and friends).

Times the default config on a spread of problems and prints, per problem, the measured time
and the model's terms, then a non-negative least-squares fit of
``time = a * fft_ms@peak + b * gemm_ms@peak + c * traffic_ms@bw + d * chunks + e``.
Run on the machine the constants are for (pinned to its cores), e.g.
``taskset -c 0,1 python plugins/fft/benchmarks/calibrate_fft.py``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from miocore_fft import FftOverlapSave, FftPlan
from scipy.optimize import nnls

from miocore import ConvProblem
from miocore.testing import cpu_context

sys.path.insert(0, str(Path(__file__).parent))
from bench_fft import PROBLEMS, fft_ms

EXTRA = {
    "3x3 128->128 28x28 n=4": dict(
        n=4, c=128, k=128, in_spatial=(28, 28), filter_spatial=(3, 3), pads=(1, 1)
    ),
    "5x5 16->32 28x28 n=8": dict(
        n=8, c=16, k=32, in_spatial=(28, 28), filter_spatial=(5, 5), pads=(2, 2)
    ),
    "3d 3x3x3 16->16 16^3 n=2": dict(
        n=2, c=16, k=16, in_spatial=(16, 16, 16), filter_spatial=(3, 3, 3), pads=(1, 1, 1)
    ),
    "7x7 8->8 20x20 n=1": dict(
        n=1, c=8, k=8, in_spatial=(20, 20), filter_spatial=(7, 7), pads=(3, 3)
    ),
}


def main() -> None:
    """Measure and fit."""
    ctx = cpu_context()
    solver = FftOverlapSave()
    peak = ctx.device.peak_gflops[next(iter(ctx.device.peak_gflops))]
    bw = ctx.device.peak_gbps
    print(f"peak {peak:.1f} GFLOP/s, {bw:.1f} GB/s")
    rows, times = [], []
    for label, sizes in {**PROBLEMS, **EXTRA}.items():
        for d in ("forward", "backward_data", "backward_weights"):
            p = ConvProblem.from_sizes(d, **sizes)
            config = solver.default_perf_config(ctx, p)
            plan = FftPlan(problem=p, fft_len=config["fft_len"])
            t = fft_ms(p, config, 5)
            chunks = 2 * math.ceil(plan.units / plan.a_chunk_units)
            terms = [
                plan.fft_flops / peak / 1e6,
                plan.gemm_flops / peak / 1e6,
                plan.traffic_bytes / bw / 1e6,
                chunks,
                1.0,
            ]
            rows.append(terms)
            times.append(t)
            pred = solver.predicted_ms(ctx, p)
            print(f"{label:40s} {d:16s} {t:8.2f} ms pred {pred:8.2f} terms {np.round(terms, 3)}")
    coef, _ = nnls(np.array(rows), np.array(times))
    print("fit: 1/FFT_EFF, 1/GEMM_EFF, traffic x, ms/chunk, ms/call =", np.round(coef, 4))
    fit = np.array(rows) @ coef
    print("fit ratios measured/fit:", np.round(np.array(times) / fit, 2))


if __name__ == "__main__":
    main()
