"""Prototype: a TMA-fed Triton forward convolution (``gpu_triton_tma_kernels.py``, not kept in
miocore-triton) against cuDNN and the plugin's present ``triton.igemm_fwd`` on 3x3 stride-1 layers.

Launched through Triton's own launcher (host tensor descriptors), so only device time means
anything here: per layer and precision, cuDNN in benchmark mode, ``triton.igemm_fwd`` at its
default configuration through a miocore handle, and the TMA kernel at each configuration of a
small sweep, all timed by ``gpu_vs_cudnn.device_ms``; every TMA result is checked against
cuDNN's output first. Prints one JSON row per case and geometric means of cuDNN time / time.

    python benchmarks/gpu_triton_tma_prototype.py --dtypes float16 --out tma.json
    TRITON_INTERPRET=1 python benchmarks/gpu_triton_tma_prototype.py --check-only  # CPU
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).parent
KERNEL = HERE / "gpu_triton_tma_kernels.py"

#: (name, C, K, H=W, batch) of 3x3 pad-1 stride-1 layers: ResNet-50 (batch 32), VGG-16 (16).
LAYERS = [
    ("r50.l1.3x3", 64, 64, 56, 32),
    ("r50.l2.3x3", 128, 128, 28, 32),
    ("r50.l3.3x3", 256, 256, 14, 32),
    ("r50.l4.3x3", 512, 512, 7, 32),
    ("vgg.conv1_2", 64, 64, 224, 16),
    ("vgg.conv2_1", 64, 128, 112, 16),
    ("vgg.conv2_2", 128, 128, 112, 16),
    ("vgg.conv3_1", 128, 256, 56, 16),
    ("vgg.conv3_2", 256, 256, 56, 16),
    ("vgg.conv4_1", 256, 512, 28, 16),
    ("vgg.conv4_2", 512, 512, 28, 16),
    ("vgg.conv5_1", 512, 512, 14, 16),
]

#: (BH, BW, BN, num_warps, stages, variant) for 16-bit types; BK is 64 (128 bytes) for them,
#: 32 for TF32. Variants: "plain" (one program per tile), "ws" (its loop warp-specialized),
#: "pers" (one program per SM walking the tiles), "flat" (pers with the loops flattened, so a
#: tile's store overlaps the next one's loads), "flatws" (flat, warp-specialized).
TILES = [
    (8, 16, 128, 8, 4),
    (16, 8, 128, 8, 4),
    (8, 8, 128, 4, 4),
    (4, 16, 128, 4, 4),
    (8, 8, 64, 4, 5),
    (8, 16, 256, 8, 3),
    (16, 16, 128, 8, 3),
]
VARIANTS = ("plain", "ws", "pers", "flat", "flatws")
CONFIGS = [(*t, v) for t in TILES for v in VARIANTS]


def _kernel_module() -> Any:
    spec = importlib.util.spec_from_file_location("conv_tma_prototype", KERNEL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def tma_call(mod: Any, x: Any, w: Any, y: Any, cfg: tuple[int, ...], precision: str) -> Any:
    """A closure launching the TMA kernel once on NCHW-shaped channels-last x, w and y."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    bh, bw, bn, warps, stages, variant = cfg
    bk = 32 if x.dtype == torch.float32 else 64
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    _, _, p, q = y.shape
    xv = x.permute(0, 2, 3, 1)
    wv = w.permute(0, 2, 3, 1).reshape(k, r * s * c)
    yv = y.permute(0, 2, 3, 1)
    x_desc = TensorDescriptor(xv, [n, h, wd, c], list(xv.stride()), [1, bh, bw, bk])
    w_desc = TensorDescriptor(wv, [k, r * s * c], list(wv.stride()), [bn, bk])
    y_desc = TensorDescriptor(yv, [n, p, q, k], list(yv.stride()), [1, bh, bw, bn])
    tiles = n * math.ceil(p / bh) * math.ceil(q / bw) * math.ceil(k / bn)
    common = dict(
        R=r, S=s, PH=(r - 1) // 2, PW=(s - 1) // 2, DH=1, DW=1,
        BH=bh, BW=bw, BN=bn, BK=bk, GROUP_M=8, STAGES=stages, PRECISION=precision,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    if variant in ("plain", "ws"):
        kernel, grid = mod.conv_fwd_tma, (tiles,)
        common["WARP_SPECIALIZE"] = variant == "ws"
    else:
        sms = torch.cuda.get_device_properties(0).multi_processor_count if x.is_cuda else 4
        programs = min(tiles, sms)
        kernel, grid = mod.conv_fwd_tma_persistent, (programs,)
        common.update(PROGRAMS=programs, FLATTEN=variant != "pers",
                      WARP_SPECIALIZE=variant == "flatws")  # fmt: skip

    def run() -> None:
        kernel[grid](x_desc, w_desc, y_desc, n, p, q, c, k, **common)

    return run


def check_only() -> None:
    """Small problems in Triton's interpreter (CPU) against float64: the kernel's arithmetic."""
    mod = _kernel_module()
    torch.manual_seed(0)
    cases = [
        (2, 16, 16, 9, 11, (8, 8, 16, 4, 2, "plain")),
        (1, 36, 20, 6, 5, (4, 8, 16, 4, 2, "pers")),
        (3, 8, 24, 17, 3, (8, 4, 16, 4, 2, "flat")),
    ]
    for n, c, k, h, wd, cfg in cases:
        x = torch.randn(n, c, h, wd).contiguous(memory_format=torch.channels_last)
        w = torch.randn(k, c, 3, 3).contiguous(memory_format=torch.channels_last)
        y = torch.empty(n, k, h, wd).contiguous(memory_format=torch.channels_last)
        tma_call(mod, x, w, y, cfg, "ieee")()
        ref = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
        err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
        print(json.dumps({"n": n, "c": c, "k": k, "h": h, "w": wd, "rel_err": err}))
        assert err < 1e-5, err


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16", "tf32"])
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--configs", type=int, default=len(CONFIGS), help="first N configs")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-miocore", action="store_true")
    parser.add_argument("--check-only", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.check_only:
        check_only()
        return
    sys.path.insert(0, str(HERE))
    from gpu_vs_cudnn import device_ms, matmul_tflops, set_precision

    mod = _kernel_module()
    rows: list[dict[str, Any]] = []
    handles: dict[str, Any] = {}
    torch.backends.cudnn.benchmark = True
    rates = {m: matmul_tflops("float16" if m == "bfloat16" else m) for m in args.dtypes}
    for mode in args.dtypes:
        set_precision(mode)
        dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(mode, torch.float32)
        precision = "tf32" if mode == "tf32" else "ieee"
        for name, c, k, hw, n in LAYERS:
            if args.layers and name not in args.layers:
                continue
            cl = torch.channels_last
            x = torch.randn(n, c, hw, hw, device="cuda", dtype=dtype).contiguous(memory_format=cl)
            w = (torch.randn(k, c, 3, 3, device="cuda", dtype=dtype) * 0.05).contiguous(
                memory_format=cl
            )
            y = torch.empty(n, k, hw, hw, device="cuda", dtype=dtype).contiguous(memory_format=cl)
            gflop = 2 * n * k * hw * hw * c * 9 / 1e9
            ref = torch.nn.functional.conv2d(x, w, padding=1)
            row: dict[str, Any] = {"layer": name, "precision": mode, "gflop": gflop}
            row["cudnn_ms"] = device_ms(
                lambda x=x, w=w: torch.nn.functional.conv2d(x, w, padding=1), 3, args.runs
            )
            scale = ref.float().abs().max().item()
            times: dict[str, float] = {}
            for cfg in CONFIGS[: args.configs]:
                label = "x".join(map(str, cfg))
                try:
                    run = tma_call(mod, x, w, y, cfg, precision)
                    y.zero_()
                    run()
                    torch.cuda.synchronize()
                    err = (y.float() - ref.float()).abs().max().item() / scale
                    if err > (2e-2 if mode != "float16" else 5e-3):
                        row.setdefault("wrong", {})[label] = err
                        continue
                    times[label] = device_ms(run, 3, args.runs)
                except Exception as exc:  # a configuration that does not compile or fit
                    row.setdefault("errors", {})[label] = str(exc)[:160]
            if times:
                best = min(times, key=times.__getitem__)
                row["tma_best_ms"], row["tma_best"] = times[best], best
                row["tma"] = {key: round(v, 4) for key, v in times.items()}
                row["tma_best_rate"] = gflop / times[best] / rates[mode]
            row["cudnn_rate"] = gflop / row["cudnn_ms"] / rates[mode]
            if not args.no_miocore:
                row.update(_miocore_default(handles, mode, n, c, k, hw, dtype, x, w, y, args))
            rows.append(row)
            print(json.dumps(row), flush=True)
            del x, w, y, ref
            torch.cuda.empty_cache()
    summary = _summary(rows)
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(
            json.dumps({"rows": rows, "summary": summary, "rates": rates}, indent=1)
        )


def _miocore_default(handles: dict[str, Any], mode: str, n: int, c: int, k: int, hw: int,
                     dtype: Any, x: Any, w: Any, y: Any, args: Any) -> dict[str, Any]:  # fmt: skip
    """``triton.igemm_fwd`` at its default configuration through a miocore handle."""
    from gpu_vs_cudnn import device_ms

    import miocore

    math_mode = "tf32" if mode == "tf32" else "exact"
    if math_mode not in handles:
        handles[math_mode] = miocore.Handle(
            "cuda", stream=torch.cuda.current_stream(), math_mode=math_mode
        )
    h = handles[math_mode]
    name = {torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(dtype, "float32")
    from shapes import Layer, problem

    p = problem(Layer("layer", c, k, hw, 3, 1, 1), n, "forward", dtype=name, layout="NHWC")
    try:
        sol = next(s for s in h.get_solutions(p) if s.solver == "triton.igemm_fwd")
        ws = h.backend.allocate_workspace(sol.workspace_size)
        ms = device_ms(lambda: h.run_solution(sol, x=x, w=w, y=y, workspace=ws), 3, args.runs)
        return {"triton_default_ms": ms}
    except Exception as exc:
        return {"triton_default_error": str(exc)[:200]}


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in sorted({r["precision"] for r in rows}):
        sel = [r for r in rows if r["precision"] == mode]
        entry: dict[str, Any] = {}
        for col in ("tma_best_ms", "triton_default_ms"):
            ratios = [r["cudnn_ms"] / r[col] for r in sel if r.get(col)]
            if ratios:
                entry[col.removesuffix("_ms")] = {
                    "geomean": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 3),
                    "faster": f"{sum(v >= 1 for v in ratios)}/{len(ratios)}",
                }
        configs: dict[str, list[float]] = {}
        for r in sel:
            for key, v in r.get("tma", {}).items():
                configs.setdefault(key, []).append(r["cudnn_ms"] / v)
        entry["per_config"] = {
            key: round(math.exp(sum(map(math.log, v)) / len(v)), 3)
            for key, v in configs.items()
            if len(v) == len(sel)
        }
        out[mode] = entry
    return out


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
