"""MIOpenDriver's output lines, as it prints them: the ones scripts grep for.

``MIOpen Forward Conv. Algorithm: 1, Solution: ID/NAME``, ``GPU Kernel Time Forward Conv.
Elapsed: X ms (average)`` and the two ``stats:`` lines.
"""

from __future__ import annotations

from miocore.problem.conv import ConvProblem, Direction

#: MIOpenDriver's names of the directions in its output lines.
MIOPEN_LABELS = {
    Direction.FORWARD: "Forward",
    Direction.BACKWARD_DATA: "Backward Data",
    Direction.BACKWARD_WEIGHTS: "Backward Weights",
}
#: MIOpen's algorithm enum values (miopenConvFwdAlgorithm_t and its backward twins).
MIOPEN_ALGORITHMS = {"gemm": 0, "direct": 1, "fft": 2, "winograd": 3, "implicit_gemm": 5}
_STATS_NAMES = {
    Direction.FORWARD: "fwd-conv",
    Direction.BACKWARD_DATA: "bwdd-conv",
    Direction.BACKWARD_WEIGHTS: "bwdw-conv",
}


def stats_lines(problem: ConvProblem, mean_ms: float) -> list[str]:
    """MIOpenDriver's two ``stats:`` lines (header and values) for a timed direction.

    Bytes read are the direction's two inputs, bytes written its output; GFLOP/s and GB/s are
    over the mean kernel time, as MIOpenDriver computes them.
    """
    x, w, y = problem.x, problem.w, problem.y
    n, c = x.lengths[0], x.lengths[1]
    k = w.lengths[0] if not problem.is_transposed else y.lengths[1]
    out_spatial = y.lengths[2:]
    filt = w.lengths[2:]
    size = problem.dtype.itemsize
    output = problem.direction.output_tensor
    inputs = [t for t in ("x", "w", "y") if t != output]
    read = sum(getattr(problem, t).element_count for t in inputs) * size
    written = getattr(problem, output).element_count * size
    seconds = mean_ms * 1e-3
    gflops = problem.flops / seconds / 1e9 if seconds > 0 else 0.0
    gbs = (read + written) / seconds / 1e9 if seconds > 0 else 0.0
    name = f"{_STATS_NAMES[problem.direction]}{'x'.join(map(str, filt))}u{problem.conv.strides[0]}"
    return [
        "stats: name, n, c, ho, wo, x, y, k, flopCnt, bytesRead, bytesWritten, GFLOPs, GB/s, "
        "timeMs",
        f"stats: {name}, {n}, {c}, {out_spatial[-2]}, {out_spatial[-1]}, {filt[-1]}, "
        f"{filt[-2]}, {k}, {problem.flops}, {read}, {written}, {gflops:.0f}, {gbs:.0f}, "
        f"{mean_ms:f}",
    ]
