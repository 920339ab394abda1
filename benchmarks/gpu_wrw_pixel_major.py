"""Prototype: TF32 backward weights with the pixels innermost, against cuDNN (issue 13).

TF32 tensor-core instructions read both operands with the reduction dimension innermost. In
backward weights the reduction runs over the pixels, which channels-last tensors (and the
plugin's staged copies) hold outermost, so ``triton.igemm_wrw`` in TF32 reaches a third of
cuDNN's speed. Here x and dy are first copied "pixel-major" (``t[c][n][hp][wp]``, x on a
zero-padded grid of pitch ``WP``, dy on the same pitch with zeros in its margin), so that at
stride 1 tap ``(r, s)`` of the filter is a plain GEMM over the flat pixel index ``m``:
``dw[k, c, r, s] = sum_m dyt[k, m] * xt[c, m + r * DH * WP + s * DW]``; both operands are
then read along ``m`` (the dy operand 16-byte aligned, the shifted x operand not).

    python benchmarks/gpu_wrw_pixel_major.py            # on the GPU machine
    TRITON_INTERPRET=1 python benchmarks/gpu_wrw_pixel_major.py --check-only  # CPU

Prints, per layer: the relative error against float64, the staging and GEMM device times, and
cuDNN's (PyTorch's ``convolution_backward`` for the weight, TF32 allowed, benchmark mode).
"""

from __future__ import annotations

import argparse
import json

import torch
import triton
import triton.language as tl


@triton.jit
def stage_pixel_major(
    src_ptr,
    dst_ptr,
    C: tl.constexpr,
    H: tl.constexpr,
    W: tl.constexpr,
    HP: tl.constexpr,
    WP: tl.constexpr,
    PH: tl.constexpr,
    PW: tl.constexpr,
    SN: tl.constexpr,
    SC: tl.constexpr,
    SH: tl.constexpr,
    SW: tl.constexpr,
    L: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """``dst[c, m]`` (row length L) = ``src[n, c, hp - PH, wp - PW]`` or 0 outside the image,
    ``m = (n * HP + hp) * WP + wp``; read along the channels, written along the pixels."""
    offs_m = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    n = offs_m // (HP * WP)
    hp = (offs_m // WP) % HP
    wp = offs_m % WP
    h = hp - PH
    w = wp - PW
    inside = (offs_m < L) & (h >= 0) & (h < H) & (w >= 0) & (w < W)
    c_ok = offs_c < C
    src = src_ptr + (n * SN + h * SH + w * SW)[:, None] + (offs_c * SC)[None, :]
    v = tl.load(src, mask=inside[:, None] & c_ok[None, :], other=0.0)
    dst = dst_ptr + (offs_c * L)[None, :] + offs_m[:, None]
    tl.store(dst, v, mask=(offs_m < L)[:, None] & c_ok[None, :])


@triton.jit
def wrw_pixel_major(
    dyt_ptr,
    xt_ptr,
    out_ptr,
    K: tl.constexpr,
    C: tl.constexpr,
    R: tl.constexpr,
    S: tl.constexpr,
    WP: tl.constexpr,
    DH: tl.constexpr,
    DW: tl.constexpr,
    L: tl.constexpr,
    SPLITS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,
):
    """fp32 partials ``out[split, k, r, s, c]`` of ``sum_m dyt[k, m] * xt[c, m + shift(r, s)]``
    over the split's share of ``m``."""
    K_TILES: tl.constexpr = (K + BLOCK_M - 1) // BLOCK_M
    C_TILES: tl.constexpr = (C + BLOCK_N - 1) // BLOCK_N
    pid = tl.program_id(0)
    split = tl.program_id(1)
    tile_k = pid % K_TILES
    tile_c = (pid // K_TILES) % C_TILES
    tap = pid // (K_TILES * C_TILES)
    r = tap // S
    s = tap % S
    shift = r * DH * WP + s * DW
    offs_k = tile_k * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_c = tile_c * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = offs_k % K
    cs = offs_c % C
    share = tl.cdiv(tl.cdiv(L, BLOCK_K), SPLITS)
    first = split * share * BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in tl.range(0, share, num_stages=STAGES):
        offs = first + i * BLOCK_K + tl.arange(0, BLOCK_K)
        m_ok = offs < L
        a = tl.load(dyt_ptr + (ks * L)[:, None] + offs[None, :], mask=m_ok[None, :], other=0.0)
        b = tl.load(
            xt_ptr + (offs + shift)[:, None] + (cs * L)[None, :], mask=m_ok[:, None], other=0.0
        )
        acc = tl.dot(a, b, acc, input_precision="tf32")
    ok = (offs_k < K)[:, None] & (offs_c < C)[None, :]
    out = out_ptr + split * (K * R * S * C) + (offs_k * (R * S * C))[:, None]
    tl.store(out + (tap * C + offs_c)[None, :], acc, mask=ok)


def run(x: torch.Tensor, dy: torch.Tensor, fil: tuple[int, int], pad: tuple[int, int],
        dil: tuple[int, int], cfg: dict) -> tuple[torch.Tensor, list]:  # fmt: skip
    """dw (K, C, R, S) of a stride-1 convolution, and the three launches (for timing)."""
    n, c, h, w = x.shape
    k, p, q = dy.shape[1], dy.shape[2], dy.shape[3]
    r, s = fil
    hp = h + 2 * pad[0]
    wp = -(-(w + 2 * pad[1]) // 16) * 16  # rows 64-byte aligned
    length = n * hp * wp
    tail = (r - 1) * dil[0] * wp + (s - 1) * dil[1] + 16
    xt = torch.empty(c * length + tail, device=x.device, dtype=torch.float32)
    xt[c * length :].zero_()
    dyt = torch.empty(k * length, device=x.device, dtype=torch.float32)
    splits = cfg["splits"]
    part = torch.empty((splits, k, r, s, c), device=x.device, dtype=torch.float32)
    bp, bc = 64, 32

    def stage_x() -> None:
        grid = (triton.cdiv(length, bp), triton.cdiv(c, bc))
        stage_pixel_major[grid](x, xt, c, h, w, hp, wp, pad[0], pad[1], *x.stride(), length,
                                BLOCK_P=bp, BLOCK_C=bc, num_warps=4)  # fmt: skip

    def stage_dy() -> None:
        grid = (triton.cdiv(length, bp), triton.cdiv(k, bc))
        stage_pixel_major[grid](dy, dyt, k, p, q, hp, wp, 0, 0, *dy.stride(), length,
                                BLOCK_P=bp, BLOCK_C=bc, num_warps=4)  # fmt: skip

    def gemm() -> None:
        bm, bn, bk = cfg["bm"], cfg["bn"], cfg["bk"]
        grid = (triton.cdiv(k, bm) * triton.cdiv(c, bn) * r * s, splits)
        wrw_pixel_major[grid](dyt, xt, part, k, c, r, s, wp, dil[0], dil[1], length, splits,
                              BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=cfg["stages"],
                              num_warps=cfg["warps"], num_stages=cfg["stages"])  # fmt: skip

    steps = [stage_x, stage_dy, gemm]
    for f in steps:
        f()
    return part.sum(0).permute(0, 3, 1, 2), steps


def device_ms(fn, reps: int = 20) -> float:
    """Median device time of ``fn`` (CUDA events around each call)."""
    times = []
    for _ in range(3):
        fn()
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


LAYERS = {  # name: (n, c, h, w, k, r, s, pad)
    "unet.dec3.0": (8, 64, 256, 256, 32, 3, 3, 1),
    "unet.down0.3": (8, 32, 256, 256, 32, 3, 3, 1),
    "unet.dec1.3": (8, 128, 128, 128, 64, 3, 3, 1),
    "unet.dec0.0": (8, 256, 64, 64, 128, 3, 3, 1),
    "unet.up1": (8, 512, 32, 32, 256, 3, 3, 1),
    "r50.l1.3x3": (32, 64, 56, 56, 64, 3, 3, 1),
    "r50.l2.3x3": (32, 128, 28, 28, 128, 3, 3, 1),
    "r50.l3.3x3": (32, 256, 14, 14, 256, 3, 3, 1),
    "r50.l4.3x3": (32, 512, 7, 7, 512, 3, 3, 1),
}
CONFIGS = (
    [dict(bm=64, bn=64, bk=32, warps=4, stages=3, splits=s) for s in (1, 4, 16, 32)]
    + [dict(bm=128, bn=64, bk=32, warps=8, stages=3, splits=s) for s in (4, 16)]
    + [dict(bm=64, bn=128, bk=32, warps=8, stages=3, splits=s) for s in (4, 16)]
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check-only", action="store_true", help="small shapes, no timing")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    layers = LAYERS
    if args.check_only:
        layers = {"small": (2, 5, 9, 7, 6, 3, 3, 1), "wide": (1, 3, 6, 20, 4, 3, 5, 2)}
    rows = []
    for name, (n, c, h, w, k, r, s, pad) in layers.items():
        gen = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(n, c, h, w, generator=gen).to(dev).to(memory_format=torch.channels_last)
        pads = (pad, pad) if r == s else (1, 2)
        oh, ow = h + 2 * pads[0] - r + 1, w + 2 * pads[1] - s + 1
        dy = torch.randn(n, k, oh, ow, generator=gen).to(dev).to(memory_format=torch.channels_last)
        weight = torch.empty(k, c, r, s, device=dev)
        exact = torch.ops.aten.convolution_backward(
            dy.double(), x.double(), weight.double(), None, [1, 1], list(pads), [1, 1],
            False, [0, 0], 1, [False, True, False])[1]  # fmt: skip
        row = {"layer": name}
        best = None
        for cfg in CONFIGS[:1] if args.check_only else CONFIGS:
            dw, steps = run(x, dy, (r, s), pads, (1, 1), cfg)
            err = float((dw.double() - exact).norm() / exact.norm())
            if args.check_only:
                row["rel_err"] = err
                break
            stage = device_ms(lambda st=steps: (st[0](), st[1]()))
            gemm = device_ms(steps[2])
            total = device_ms(lambda st=steps: [f() for f in st])
            if best is None or total < best[0]:
                best = (total, cfg, stage, gemm, err)
        if best is not None:
            total, cfg, stage, gemm, err = best
            row.update(rel_err=err, ms=total, stage_ms=stage, gemm_ms=gemm, cfg=cfg)

            def cudnn(x=x, dy=dy, weight=weight, pads=pads) -> None:
                torch.ops.aten.convolution_backward(dy, x, weight, None, [1, 1], list(pads),
                    [1, 1], False, [0, 0], 1, [False, True, False])  # fmt: skip

            row["cudnn_ms"] = device_ms(cudnn)
            row["cudnn_over_ours"] = row["cudnn_ms"] / total
            flops = 2 * n * oh * ow * k * c * r * s
            row["tflops"] = flops / total / 1e9
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
