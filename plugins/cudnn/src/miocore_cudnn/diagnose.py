"""What cuDNN offers here: ``python -m miocore_cudnn.diagnose [--dtype float16] [--layout NHWC]``.

Prints the frontend and library versions, then for one ResNet-style 3x3 layer in each
direction: the engine count of its graph, every configuration the heuristics list (in their
order) with its workspace or the reason it is refused, and what each ``cudnn.eng<id>`` solver
answers. Exits 1 when cuDNN cannot be used here, with the reason.
"""

from __future__ import annotations

import argparse
import sys

import miocore
from miocore_cudnn import _loader
from miocore_cudnn._plans import PlanError, plans_for
from miocore_cudnn.solvers import SOLVERS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float16", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--layout", default="NHWC", choices=["NCHW", "NHWC"])
    parser.add_argument("--math-mode", default="exact", choices=["exact", "tf32"])
    args = parser.parse_args(argv)
    cudnn, reason = _loader.frontend()
    if cudnn is None:
        print(f"cuDNN unavailable: {reason}")
        return 1
    print(f"cudnn frontend {getattr(cudnn, '__version__', '?')}, library {cudnn.backend_version()}")
    handle = miocore.Handle("cuda", math_mode=args.math_mode)
    ctx = handle.context
    cudnn_handle, reason = _loader.handle_for(ctx.device.identity)
    if cudnn_handle is None:
        print(f"no cuDNN handle: {reason}")
        return 1
    print(f"device {ctx.device.name} ({ctx.device.identity}), math mode {ctx.math_mode}")
    for direction in ("forward", "backward_data", "backward_weights"):
        p = miocore.ConvProblem.from_sizes(
            direction, n=32, c=64, k=64, in_spatial=(56, 56), filter_spatial=(3, 3),
            pads=(1, 1), dtype=args.dtype, layout=args.layout,
        )  # fmt: skip
        print(f"\n{p.key}")
        try:
            plans = plans_for(cudnn, cudnn_handle, ctx.device.identity, p, ctx.math_mode)
        except PlanError as exc:
            print(f"  {exc}")
            continue
        print(f"  {plans.engine_count} engines; heuristics offer {plans.ranking}")
        for engine in plans.ranking:
            for config in plans.by_engine[engine]:
                try:
                    print(f"  {config.tag}: workspace {plans.build(config)} B")
                except PlanError as exc:
                    print(f"  refused {exc}")
        applicable = [s.name for s in SOLVERS if s.is_applicable(ctx, p)]
        print(f"  applicable solvers: {applicable}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
