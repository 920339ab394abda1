"""NCHW depthwise on the CPU: ``direct.depthwise``'s plane kernels (its NCHW default) against the
same solver with the planes turned off (staged to channels-last, the NHWC tile kernels, staged
back), and oneDNN (PyTorch); one thread, alternating rounds.

    python benchmarks/cpu_depthwise_nchw_paths.py dw384k7@14,dw576s1@14 1,8 FB

Arguments: layer names of the depthwise suites (``shapes.py``), batches, direction letters.
Each row prints both paths' times and ratios (oneDNN time / ours), their largest relative
difference, and the first call's time (numba compiles).
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import miocore  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from common import median_ms  # noqa: E402
from cpu_vs_onednn import DIRECTIONS, torch_runner  # noqa: E402
from shapes import SUITES, problem  # noqa: E402

SUITE_NAMES = ("convnext_t_dw", "efficientnet_b0_dw", "mobilenetv2_dw")
OUTPUT = {"forward": "y", "backward_data": "x", "backward_weights": "w"}


def staged_run(handle: miocore.Handle, p: miocore.ConvProblem, arrays: dict[str, Any]) -> None:
    """The first call of ``p`` on ``handle`` with the plane kernels declared inapplicable, so
    its invoker (kept in the handle's cache) stages through channels-last."""
    import miocore_direct.depthwise as dw

    saved = (dw._plane_applies, dw._plane_bwd2_applies)
    dw._plane_applies = dw._plane_bwd2_applies = lambda *a, **k: False
    try:
        handle.immediate(p, "direct.depthwise", **arrays)
    finally:
        dw._plane_applies, dw._plane_bwd2_applies = saved


def row(name: str, p: miocore.ConvProblem, plane: Any, staged: Any, letter: str) -> None:
    arrays = miocore.reference.random_inputs(p, 0)
    out = OUTPUT[p.direction.value]
    plane.immediate(p, "direct.depthwise", **arrays)
    first = arrays[out].copy()
    start = time.perf_counter()
    staged_run(staged, p, arrays)
    first_s = time.perf_counter() - start
    diff = float(np.max(np.abs(first - arrays[out])) / (np.max(np.abs(first)) + 1e-30))
    onednn = torch_runner(p, arrays)
    times: dict[str, list[float]] = {"plane": [], "staged": [], "onednn": []}
    for _ in range(3):
        for label, run in (
            ("plane", lambda: plane.immediate(p, "direct.depthwise", **arrays)),
            ("staged", lambda: staged.immediate(p, "direct.depthwise", **arrays)),
            ("onednn", onednn),
        ):
            times[label].append(median_ms(run, min_total_s=0.1))
    a, b, t = (statistics.median(times[k]) for k in ("plane", "staged", "onednn"))
    print(
        f"{name:12s} b{p.n} {letter}  oneDNN {t:7.3f}  plane {a:7.3f} ({t / a:4.2f})  "
        f"staged {b:7.3f} ({t / b:4.2f})  diff {diff:.1e}  first {first_s:.0f} s",
        flush=True,
    )


def main() -> None:
    names = sys.argv[1].split(",")
    batches = [int(b) for b in sys.argv[2].split(",")]
    letters = sys.argv[3] if len(sys.argv) > 3 else "FB"
    torch.set_num_threads(1)
    layers = {layer.name: layer for suite in SUITE_NAMES for layer in SUITES[suite]}
    folder = tempfile.mkdtemp()
    plane = miocore.Handle("cpu", user_db_path=f"{folder}/plane")
    staged = miocore.Handle("cpu", user_db_path=f"{folder}/staged")
    for handle in (plane, staged):
        handle.backend.set_threads(1)
    for name in names:
        for batch in batches:
            for letter in letters:
                p = problem(layers[name], batch, DIRECTIONS[letter], "float32", "NCHW")
                row(name, p, plane, staged, letter)


if __name__ == "__main__":
    main()
