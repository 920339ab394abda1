"""Prototype for issue 13, step 1: a Triton implicit-GEMM convolution forward, measured against
cuDNN and the matmul rate, and launched both through Triton and as a bare cubin through the
CUDA driver API (Triton used as a compiler only).

The kernel is NHWC input, KRSC weights (KCRS stored channels-last), NHWC output; fp16 and bf16
with fp32 accumulation, fp32 inputs through TF32. Problem sizes are compile-time constants: a
Find-based library compiles one binary per problem and configuration anyway, and constant
sizes turn the per-iteration index arithmetic into shifts and multiplies.

On the GPU machine::

    python3 benchmarks/gpu_triton_prototype.py --out $OUT/triton.json

On a CPU, Triton's interpreter checks the indexing on small problems against a float64
reference (no GPU needed)::

    python3 benchmarks/gpu_triton_prototype.py --self-test

Timing: device time from CUDA events around replays of a CUDA graph holding ``--inner``
back-to-back launches (rotating among input copies that together exceed L2), after warm-up;
the median of ``--repeats`` replays. The same method times Triton, cuDNN and torch.matmul.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

if "--self-test" in sys.argv:  # the interpreter is chosen when kernels are decorated
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import torch
import triton
import triton.language as tl

# -- problems and configurations ---------------------------------------------------------------


@dataclass(frozen=True)
class Conv2d:
    """A 2-D forward convolution, lengths in logical (N, C, H, W) order."""

    name: str
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad: tuple[int, int] = (0, 0)
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)

    @property
    def p(self) -> int:
        span = self.dilation[0] * (self.r - 1) + 1
        return (self.h + 2 * self.pad[0] - span) // self.stride[0] + 1

    @property
    def q(self) -> int:
        span = self.dilation[1] * (self.s - 1) + 1
        return (self.w + 2 * self.pad[1] - span) // self.stride[1] + 1

    @property
    def gemm(self) -> tuple[int, int, int]:
        """The equivalent GEMM (M, N, K) = (N*P*Q, K, C*R*S)."""
        return self.n * self.p * self.q, self.k, self.c * self.r * self.s

    @property
    def flops(self) -> int:
        m, n, k = self.gemm
        return 2 * m * n * k


@dataclass(frozen=True)
class Config:
    """One tile configuration of the kernel."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    #: Load tiles with the tensor memory accelerator where the problem allows: the weights
    #: whenever the channel count is a multiple of block_k, the input only for 1x1, stride 1,
    #: no padding (plain GEMM rows); other input tiles stay on cp.async with masks.
    tma: bool = False

    @property
    def label(self) -> str:
        return (
            f"{self.block_m}x{self.block_n}x{self.block_k}"
            f"_w{self.num_warps}_s{self.num_stages}_g{self.group_m}{'_tma' if self.tma else ''}"
        )


LAYERS = {
    "a": Conv2d("a.r50_3x3_64_56", 32, 64, 56, 56, 64, 3, 3, pad=(1, 1)),
    "b": Conv2d("b.r50_3x3_256_14", 32, 256, 14, 14, 256, 3, 3, pad=(1, 1)),
    "c": Conv2d("c.1x1_1024to256_14", 32, 1024, 14, 14, 256, 1, 1),
    "d": Conv2d("d.3x3s2_128_56", 32, 128, 56, 56, 128, 3, 3, pad=(1, 1), stride=(2, 2)),
}

# (layer, dtype) cases in the order they run; the later ones are the "if time allows" part.
CASES = [
    ("a", "fp16"),
    ("b", "fp16"),
    ("c", "fp16"),
    ("d", "fp16"),
    ("a", "bf16"),
    ("a", "tf32"),
]

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}
# ||out - ref|| / ||ref|| limits: the inputs are exact in every dtype, so the error is the fp32
# accumulation, TF32's 10-bit operand rounding, and the output's final rounding.
TOLERANCES = {"fp16": 2e-3, "bf16": 1e-2, "tf32": 3e-3}

# 16-bit candidates: wgmma wants 64-row warpgroup tiles; N tiles wider than K are dropped per
# layer. TF32 tiles are half as deep in K, as each element takes twice the shared memory.
CONFIGS_16 = [
    Config(128, 64, 64, 4, 4),
    Config(128, 64, 64, 4, 3),
    Config(128, 64, 32, 4, 5),
    Config(64, 64, 64, 4, 4),
    Config(256, 64, 64, 8, 3),
    Config(256, 64, 64, 8, 4),
    Config(128, 128, 64, 8, 3),
    Config(128, 128, 64, 4, 4),
    Config(128, 128, 32, 4, 5),
    Config(64, 128, 64, 4, 4),
    Config(256, 128, 64, 8, 3),
    Config(128, 256, 64, 8, 3),
    Config(128, 64, 64, 8, 4),
    Config(128, 64, 64, 4, 6),
    Config(256, 64, 64, 8, 5),
    Config(128, 128, 64, 8, 4),
    Config(128, 128, 64, 8, 3, group_m=1),
    Config(256, 128, 64, 8, 4),
    Config(128, 256, 64, 8, 4),
]
CONFIGS_TF32 = [
    Config(128, 64, 32, 4, 4),
    Config(128, 64, 32, 4, 3),
    Config(64, 64, 32, 4, 4),
    Config(256, 64, 32, 8, 3),
    Config(128, 128, 32, 8, 3),
    Config(128, 64, 16, 4, 5),
    Config(128, 64, 32, 4, 5),
    Config(256, 64, 32, 8, 4),
    Config(128, 128, 32, 8, 4),
]
# The same tiles with TMA loads where the problem allows (see Config.tma).
CONFIGS_16 += [
    Config(128, 64, 64, 4, 3, tma=True),
    Config(128, 64, 64, 4, 4, tma=True),
    Config(128, 64, 64, 8, 4, tma=True),
    Config(64, 64, 64, 4, 4, tma=True),
    Config(64, 128, 64, 4, 4, tma=True),
    Config(128, 128, 64, 8, 3, tma=True),
    Config(128, 128, 64, 8, 4, tma=True),
    Config(128, 128, 64, 8, 3, group_m=1, tma=True),
    Config(256, 128, 64, 8, 3, tma=True),
]
# Deeper K blocks: half the loop trips where C >= 128 (small-grid layers are latency-bound).
CONFIGS_16 += [
    Config(64, 64, 128, 4, 3),
    Config(64, 128, 128, 4, 3),
    Config(128, 64, 128, 4, 3),
    Config(64, 64, 128, 4, 3, tma=True),
    Config(64, 128, 128, 4, 3, tma=True),
]
CONFIGS_TF32 += [
    Config(128, 64, 32, 4, 3, tma=True),
    Config(128, 64, 32, 4, 4, tma=True),
    Config(64, 64, 32, 4, 4, tma=True),
    Config(128, 128, 32, 8, 3, tma=True),
]
QUICK_CONFIGS_16 = [Config(128, 64, 64, 4, 4), Config(128, 128, 64, 8, 3)]
QUICK_CONFIGS_TF32 = [Config(128, 64, 32, 4, 4)]


def candidate_configs(layer: Conv2d, dtype: str, quick: bool) -> list[Config]:
    """The sweep for one case: N tiles no wider than needed (a 64-wide tile is the floor),
    K blocks no deeper than the channels."""
    if dtype == "tf32":
        pool = QUICK_CONFIGS_TF32 if quick else CONFIGS_TF32
    else:
        pool = QUICK_CONFIGS_16 if quick else CONFIGS_16
    return [cfg for cfg in pool if cfg.block_n <= max(64, layer.k) and cfg.block_k <= layer.c]


# -- the kernel --------------------------------------------------------------------------------


@triton.jit
def conv2d_nhwc_fwd_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    BATCH: tl.constexpr,
    H: tl.constexpr,
    W: tl.constexpr,
    C: tl.constexpr,
    K: tl.constexpr,
    R: tl.constexpr,
    S: tl.constexpr,
    P: tl.constexpr,
    Q: tl.constexpr,
    STRIDE_H: tl.constexpr,
    STRIDE_W: tl.constexpr,
    PAD_H: tl.constexpr,
    PAD_W: tl.constexpr,
    DIL_H: tl.constexpr,
    DIL_W: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    A_TMA: tl.constexpr,
    B_TMA: tl.constexpr,
):
    """y[m, k] = sum over (r, s, c) of x[n, ih, iw, c] * w[k, r, s, c], m = (n, p, q)."""
    GEMM_M: tl.constexpr = BATCH * P * Q
    C_BLOCKS: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
    EVEN_C: tl.constexpr = C % BLOCK_K == 0
    EVEN_K: tl.constexpr = K % BLOCK_N == 0

    # Grouped tile order: GROUP_M row tiles share the weight columns while they sit in L2.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(GEMM_M, BLOCK_M)
    tiles_n = tl.cdiv(K, BLOCK_N)
    group_size = GROUP_M * tiles_n
    group_first_m = (pid // group_size) * GROUP_M
    group_rows = min(tiles_m - group_first_m, GROUP_M)
    pid_m = group_first_m + (pid % group_size) % group_rows
    pid_n = (pid % group_size) // group_rows

    # Output rows -> (n, p, q), once per tile; the loop only adds the filter tap's offset.
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_in_range = offs_m < GEMM_M
    q = offs_m % Q
    p = (offs_m // Q) % P
    n = offs_m // (P * Q)
    ih0 = p * STRIDE_H - PAD_H
    iw0 = q * STRIDE_W - PAD_W
    x_row_base = n * (H * W * C)

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Columns past K wrap around to stay in bounds; the store masks them out.
    w_cols = offs_n if EVEN_K else offs_n % K
    w_col_base = w_cols * (R * S * C)
    offs_k = tl.arange(0, BLOCK_K)

    if B_TMA:  # weights as the (K, R*S*C) matrix they are; needs C % BLOCK_K == 0
        w_desc = tl.make_tensor_descriptor(
            w_ptr, shape=[K, R * S * C], strides=[R * S * C, 1], block_shape=[BLOCK_N, BLOCK_K]
        )
    if A_TMA:  # 1x1, stride 1, no padding: the input is the (N*H*W, C) matrix of GEMM rows
        x_desc = tl.make_tensor_descriptor(
            x_ptr, shape=[GEMM_M, C], strides=[C, 1], block_shape=[BLOCK_M, BLOCK_K]
        )

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # One flat loop over (filter tap, channel block) so the software pipeliner sees every
    # iteration, also where C fits in one block (a nested tap/channel loop would not pipeline).
    for it in tl.range(0, R * S * C_BLOCKS, num_stages=NUM_STAGES):
        tap = it // C_BLOCKS
        c0 = (it % C_BLOCKS) * BLOCK_K
        r = tap // S
        s = tap % S
        ih = ih0 + r * DIL_H
        iw = iw0 + s * DIL_W
        pixel_ok = row_in_range & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        chans = tl.max_contiguous(tl.multiple_of(c0 + offs_k, BLOCK_K), BLOCK_K)
        a_ptrs = x_ptr + (x_row_base + (ih * W + iw) * C)[:, None] + chans[None, :]
        b_ptrs = w_ptr + w_col_base[None, :] + (tap * C + chans)[:, None]
        if A_TMA:
            a = x_desc.load([pid_m * BLOCK_M, c0])
        elif EVEN_C:
            a = tl.load(a_ptrs, mask=pixel_ok[:, None], other=0.0)
        else:
            chan_ok = chans < C
            a = tl.load(a_ptrs, mask=pixel_ok[:, None] & chan_ok[None, :], other=0.0)
        if B_TMA:
            b = w_desc.load([pid_n * BLOCK_N, tap * C + c0]).T
        elif EVEN_C:
            b = tl.load(b_ptrs)
        else:
            b = tl.load(b_ptrs, mask=(chans < C)[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)

    y_ptrs = y_ptr + offs_m[:, None] * K + offs_n[None, :]
    y_mask = row_in_range[:, None] & (offs_n < K)[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=y_mask)


def kernel_constants(layer: Conv2d, cfg: Config, dtype: str) -> dict[str, Any]:
    """The constexpr arguments of one (problem, configuration, dtype)."""
    return {
        "BATCH": layer.n,
        "H": layer.h,
        "W": layer.w,
        "C": layer.c,
        "K": layer.k,
        "R": layer.r,
        "S": layer.s,
        "P": layer.p,
        "Q": layer.q,
        "STRIDE_H": layer.stride[0],
        "STRIDE_W": layer.stride[1],
        "PAD_H": layer.pad[0],
        "PAD_W": layer.pad[1],
        "DIL_H": layer.dilation[0],
        "DIL_W": layer.dilation[1],
        "BLOCK_M": cfg.block_m,
        "BLOCK_N": cfg.block_n,
        "BLOCK_K": cfg.block_k,
        "GROUP_M": cfg.group_m,
        "NUM_STAGES": cfg.num_stages,
        "INPUT_PRECISION": "tf32" if dtype == "tf32" else "ieee",
        "A_TMA": cfg.tma and plain_gemm_rows(layer),
        "B_TMA": cfg.tma and layer.c % cfg.block_k == 0,
    }


def plain_gemm_rows(layer: Conv2d) -> bool:
    """Whether the input, read as an (N*H*W, C) matrix, is the GEMM's A: 1x1, stride 1, no pad."""
    return (layer.r, layer.s, layer.pad, layer.stride) == (1, 1, (0, 0), (1, 1))


def grid_of(layer: Conv2d, cfg: Config) -> tuple[int, int, int]:
    m, n, _ = layer.gemm
    return (triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n), 1, 1)


def triton_conv(
    x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, layer: Conv2d, cfg: Config, dtype: str
) -> Any:
    """Launch through Triton's own JIT path; returns its CompiledKernel.

    x is (N, C, H, W) channels-last, w (K, C, R, S) channels-last, y (N, K, P, Q) channels-last:
    the memory order is NHWC, KRSC, NPQK, which is all the kernel looks at.
    """
    return conv2d_nhwc_fwd_kernel[grid_of(layer, cfg)](
        x,
        w,
        y,
        **kernel_constants(layer, cfg, dtype),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


# -- Triton as a compiler only: the cubin launched through the driver API ----------------------


class RawCubinLaunch:
    """A Triton CompiledKernel's cubin, loaded and launched with cuda.bindings alone.

    Parameters, in the order the cubin expects: the non-constexpr arguments of the Triton
    signature (here x, w, y), then Triton's two trailing scratch pointers (global_scratch, a
    buffer of grid * metadata.global_scratch_size bytes when the kernel asks for one, else
    NULL, and profile_scratch, NULL). Arguments are packed once into
    a host buffer whose address table is what cuLaunchKernel takes; a call only rewrites the
    pointers, as miocore's KernelArgs does.
    """

    def __init__(self, compiled: Any, grid: tuple[int, int, int]) -> None:
        from cuda.bindings import driver

        self._driver = driver
        meta = compiled.metadata
        if getattr(meta, "num_ctas", 1) != 1 or meta.launch_cooperative_grid or meta.launch_pdl:
            raise RuntimeError("this launcher handles plain single-CTA launches only")
        if meta.profile_scratch_size:
            raise RuntimeError("profile scratch (instrumented builds) is not handled here")
        self.name: str = meta.name
        self.shared: int = meta.shared
        self.block = (32 * meta.num_warps, 1, 1)
        self.grid = grid
        self.cubin: bytes = compiled.asm["cubin"]
        # Parameter kinds from the compiled signature: constexprs are not parameters.
        self.kinds = [ty for ty in compiled.src.signature.values() if ty != "constexpr"]
        if not all(ty.startswith("*") for ty in self.kinds):
            raise RuntimeError(f"only pointer parameters are packed here: {self.kinds}")
        # Primary context: the one the CUDA runtime (torch) uses, so pointers and streams mix.
        _ok(driver.cuInit(0))
        dev = _ok(driver.cuDeviceGet(torch.cuda.current_device()))
        self._ctx = _ok(driver.cuDevicePrimaryCtxRetain(dev))
        _ok(driver.cuCtxSetCurrent(self._ctx))
        self.module = _ok(driver.cuModuleLoadData(self.cubin))
        self.function = _ok(driver.cuModuleGetFunction(self.module, self.name.encode()))
        attr = driver.CUfunction_attribute
        self.registers = int(
            _ok(driver.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_NUM_REGS, self.function))
        )
        if self.shared > 48 * 1024:  # above 48 KiB of dynamic shared memory needs the opt-in
            _ok(
                driver.cuFuncSetAttribute(
                    self.function, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.shared
                )
            )
        # Global scratch: Triton's launcher asks its allocator for grid * size bytes on every
        # launch (device-side TMA descriptors live there, 128 B each per CTA); here it is one
        # buffer made once, so launches of this object must not overlap on several streams.
        self.scratch_per_cta: int = meta.global_scratch_size
        scratch_ptr = 0
        if self.scratch_per_cta:
            nbytes = grid[0] * grid[1] * grid[2] * self.scratch_per_cta
            align = max(meta.global_scratch_align, 1)
            self._scratch = torch.empty(nbytes + align, dtype=torch.uint8, device="cuda")
            scratch_ptr = (self._scratch.data_ptr() + align - 1) // align * align
        # len(kinds) pointer slots + global_scratch + profile_scratch (NULL), all 8 bytes.
        self._values = np.zeros(len(self.kinds) + 2, dtype=np.uint64)
        self._values[len(self.kinds)] = scratch_ptr
        self._table = np.array(
            [self._values.ctypes.data + 8 * i for i in range(len(self._values))], dtype=np.uint64
        )
        self._table_address = self._table.ctypes.data

    def __call__(self, *pointers: int, stream: int) -> None:
        """Launch on `stream` with these tensor pointers (x, w, y)."""
        values = self._values
        for slot, ptr in enumerate(pointers):
            values[slot] = ptr
        self.launch_packed(stream)

    def launch_packed(self, stream: int) -> None:
        """Launch with the arguments already in the buffer (what a graph-less replay costs)."""
        (err,) = self._driver.cuLaunchKernel(
            self.function,
            self.grid[0],
            self.grid[1],
            self.grid[2],
            self.block[0],
            self.block[1],
            self.block[2],
            self.shared,
            stream,
            self._table_address,
            0,
        )
        if int(err) != 0:
            raise RuntimeError(f"cuLaunchKernel failed: {err}")


def _ok(result: Any) -> Any:
    """Unpack a cuda.bindings (err, *values) tuple, raising on an error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver call failed: {err}")
    return values[0] if len(values) == 1 else tuple(values)


# -- measuring ---------------------------------------------------------------------------------


def device_ms(launch: Callable[[int], None], copies: int, inner: int, repeats: int) -> float:
    """Median device ms of one launch: events around replays of a graph of `inner` launches
    (launch(i) uses input copy i % copies), after eager and graph warm-up."""
    for i in range(3):
        launch(i % copies)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(inner):
            launch(i % copies)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    del graph
    return statistics.median(times)


def host_us(
    launchers: dict[str, Callable[[], None]], count: int = 200, rounds: int = 9
) -> dict[str, dict[str, float]]:
    """Host µs per call of each launcher: `count` back-to-back calls (fewer than the launch
    queue holds, so the host does not wait on the GPU), the launchers interleaved round by
    round so that clock drift hits all alike; median and minimum over the rounds."""
    for launch in launchers.values():
        for _ in range(20):
            launch()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in launchers}
    for _ in range(rounds):
        for name, launch in launchers.items():
            t0 = time.perf_counter()
            for _ in range(count):
                launch()
            samples[name].append((time.perf_counter() - t0) / count * 1e6)
            torch.cuda.synchronize()
    return {
        name: {"median_us": statistics.median(v), "min_us": min(v)} for name, v in samples.items()
    }


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN (unwritten, poisoned output) fails."""
    diff = out.double() - ref
    return float(diff.norm() / ref.norm())


def matmul_rate_tflops(
    dtype: str, m: int, n: int, k: int, inner: int, repeats: int
) -> tuple[float, float]:
    """(ms, TFLOP/s) of torch.matmul for (m x k) @ (k x n) in `dtype` on random data."""
    tdt = TORCH_DTYPES[dtype]
    a = torch.randn(m, k, device="cuda").to(tdt)
    b = torch.randn(n, k, device="cuda").to(tdt).t()  # the weights' (K, CRS) memory order
    out = torch.empty(m, n, device="cuda", dtype=tdt)
    ms = device_ms(lambda _i: torch.matmul(a, b, out=out), 1, inner, repeats)
    return ms, 2 * m * n * k / (ms * 1e-3) / 1e12


def make_inputs(
    layer: Conv2d, dtype: str, copies: int, seed: int
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """`copies` random inputs and one random weight, channels-last, exact in `dtype`."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tdt = TORCH_DTYPES[dtype]
    xs = [
        torch.randn(layer.n, layer.c, layer.h, layer.w, device="cuda", generator=gen)
        .to(tdt)
        .contiguous(memory_format=torch.channels_last)
        for _ in range(copies)
    ]
    scale = 1.0 / math.sqrt(layer.c * layer.r * layer.s)
    w = torch.randn(layer.k, layer.c, layer.r, layer.s, device="cuda", generator=gen) * scale
    w = w.to(tdt)
    return xs, w.contiguous(memory_format=torch.channels_last)


def empty_output(layer: Conv2d, dtype: str) -> torch.Tensor:
    y = torch.empty(
        layer.n, layer.k, layer.p, layer.q, device="cuda", dtype=TORCH_DTYPES[dtype]
    ).contiguous(memory_format=torch.channels_last)
    return y.fill_(float("nan"))  # poison: any element the kernel skips fails the check


def torch_conv(x: torch.Tensor, w: torch.Tensor, layer: Conv2d) -> torch.Tensor:
    return torch.nn.functional.conv2d(
        x, w, stride=layer.stride, padding=layer.pad, dilation=layer.dilation
    )


# -- one case ----------------------------------------------------------------------------------


def run_case(
    layer: Conv2d,
    dtype: str,
    configs: list[Config],
    args: argparse.Namespace,
    rates: dict[str, float],
) -> dict[str, Any]:
    """Sweep, check and time one (layer, dtype); cuDNN and the GEMM-shape matmul beside it."""
    set_bytes = (
        layer.n * layer.c * layer.h * layer.w + layer.n * layer.k * layer.p * layer.q
    ) * TORCH_DTYPES[dtype].itemsize
    # Enough input/output copies to overflow L2 (<= 60 MB on H100/H200): 150 MB, at most 16.
    copies = max(1, min(16, math.ceil(150e6 / set_bytes)))
    xs, w = make_inputs(layer, dtype, copies, seed=zlib.crc32(f"{layer.name}:{dtype}".encode()))
    ys = [empty_output(layer, dtype) for _ in range(copies)]
    ref = torch_conv(xs[0].double(), w.double(), layer)
    flops = layer.flops
    case: dict[str, Any] = {
        "layer": asdict(layer),
        "layer_name": layer.name,
        "dtype": dtype,
        "gemm_mnk": layer.gemm,
        "flops": flops,
        "input_copies": copies,
        "configs": [],
    }

    # cuDNN through PyTorch, benchmark mode, channels-last.
    cudnn_y = torch_conv(xs[0], w, layer)
    case["cudnn_rel_error"] = rel_error(cudnn_y, ref)
    cudnn_ms = device_ms(lambda i: torch_conv(xs[i], w, layer), copies, args.inner, args.repeats)
    case["cudnn_ms"] = cudnn_ms
    case["cudnn_tflops"] = flops / (cudnn_ms * 1e-3) / 1e12

    # The equivalent GEMM through torch.matmul (cuBLAS), same dtype.
    m, n, k = layer.gemm
    mm_ms, mm_tflops = matmul_rate_tflops(dtype, m, n, k, args.inner, args.repeats)
    case["matmul_ms"] = mm_ms
    case["matmul_tflops"] = mm_tflops

    best: dict[str, Any] | None = None
    best_cfg: Config | None = None
    compiled_by_config: list[Any] = []
    for cfg in configs:
        row: dict[str, Any] = {"config": asdict(cfg), "label": cfg.label}
        compiled = None
        try:
            ys[0].fill_(float("nan"))  # timing runs of the last config wrote into it
            t0 = time.perf_counter()
            compiled = triton_conv(xs[0], w, ys[0], layer, cfg, dtype)
            torch.cuda.synchronize()
            row["first_call_s"] = time.perf_counter() - t0  # compile + load + run
            meta = compiled.metadata
            row["shared_bytes"] = meta.shared
            row["registers"] = getattr(compiled, "n_regs", None)
            row["spills"] = getattr(compiled, "n_spills", None)
            row["wgmma"] = "wgmma" in compiled.asm.get("ptx", "")
            try:  # the tensor-core instructions ptxas kept (HGMMA: wgmma, HMMA: mma.sync)
                sass = compiled.asm["sass"]
                row["sass_hgmma"] = sass.count("HGMMA")
                row["sass_hmma"] = sass.count("HMMA")
            except Exception as exc:
                row["sass_error"] = str(exc)[:200]
            row["rel_error"] = rel_error(ys[0], ref)
            row["correct"] = row["rel_error"] <= TOLERANCES[dtype]
            ms = device_ms(
                lambda i, cfg=cfg: triton_conv(xs[i], w, ys[i], layer, cfg, dtype),
                copies,
                args.inner,
                args.repeats,
            )
            row["ms"] = ms
            row["tflops"] = flops / (ms * 1e-3) / 1e12
        except Exception as exc:  # a config that does not fit (shared memory, registers)
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
        case["configs"].append(row)
        print(f"  {layer.name} {dtype} {cfg.label}: {_row_text(row)}", flush=True)
        compiled_by_config.append(compiled)
        if row.get("correct") and (best is None or row["ms"] < best["ms"]):
            best, best_cfg = row, cfg

    if best is None or best_cfg is None:
        case["error"] = "no configuration ran correctly"
        return case
    case["best"] = best["label"]
    case["triton_ms"] = best["ms"]
    case["triton_tflops"] = best["tflops"]
    case["triton_rel_error"] = best["rel_error"]
    case["triton_of_matmul"] = best["tflops"] / mm_tflops
    case["cudnn_of_matmul"] = case["cudnn_tflops"] / mm_tflops
    peak = rates.get(dtype)
    if peak:
        case["triton_of_peak_matmul"] = best["tflops"] / peak
        case["cudnn_of_peak_matmul"] = case["cudnn_tflops"] / peak
    case["cudnn_over_triton"] = cudnn_ms / best["ms"]
    # A second opinion: triton.testing.do_bench (one launch per event pair, L2 flushed between
    # launches, host launch gaps included), median.
    case["do_bench_median_ms"] = {
        "triton": triton.testing.do_bench(
            lambda: triton_conv(xs[0], w, ys[0], layer, best_cfg, dtype), return_mode="median"
        ),
        "cudnn": triton.testing.do_bench(lambda: torch_conv(xs[0], w, layer), return_mode="median"),
    }
    # The fastest config of each load path, and the raw driver-API launch of both (the TMA
    # one exercises Triton's global scratch parameter).
    case["best_by_load_path"] = {}
    case["raw_launches"] = {}
    for path, is_tma in (("cp.async", False), ("tma", True)):
        rows = [
            (r, c, k)
            for r, c, k in zip(case["configs"], configs, compiled_by_config, strict=True)
            if c.tma == is_tma and r.get("correct")
        ]
        if not rows:
            continue
        row, cfg, compiled = min(rows, key=lambda item: item[0]["ms"])
        case["best_by_load_path"][path] = {"label": row["label"], "ms": row["ms"]}
        case["raw_launches"][row["label"]] = raw_launch_check(
            compiled, layer, cfg, dtype, xs, w, ys, copies, args
        )
    case["raw_launch_works"] = bool(case["raw_launches"]) and all(
        r.get("works") for r in case["raw_launches"].values()
    )
    return case


def raw_launch_check(
    compiled: Any,
    layer: Conv2d,
    cfg: Config,
    dtype: str,
    xs: list[torch.Tensor],
    w: torch.Tensor,
    ys: list[torch.Tensor],
    copies: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Launch the best config's cubin through the driver API: same output, its device time and
    the host cost per launch against Triton's launchers."""
    out: dict[str, Any] = {}
    try:
        raw = RawCubinLaunch(compiled, grid_of(layer, cfg))
        out.update(
            kernel_name=raw.name,
            shared_bytes=raw.shared,
            block=raw.block,
            grid=raw.grid,
            registers=raw.registers,
            cubin_bytes=len(raw.cubin),
            scratch_per_cta=raw.scratch_per_cta,
            parameters=[
                *raw.kinds,
                f"global_scratch ({raw.scratch_per_cta} B/CTA)"
                if raw.scratch_per_cta
                else "global_scratch (NULL)",
                "profile_scratch (NULL)",
            ],
        )
        # Reference output from Triton's own launch, then the raw launch into a poisoned copy.
        triton_conv(xs[0], w, ys[0], layer, cfg, dtype)
        expected = ys[0].clone()
        ys[0].fill_(float("nan"))
        stream = torch.cuda.current_stream().cuda_stream
        raw(xs[0].data_ptr(), w.data_ptr(), ys[0].data_ptr(), stream=stream)
        torch.cuda.synchronize()
        out["bitwise_equal_to_triton_launch"] = bool(torch.equal(ys[0], expected))
        out["rel_error"] = rel_error(ys[0], torch_conv(xs[0].double(), w.double(), layer))

        def raw_on_current(i: int) -> None:
            raw(
                xs[i].data_ptr(),
                w.data_ptr(),
                ys[i].data_ptr(),
                stream=torch.cuda.current_stream().cuda_stream,
            )

        out["device_ms"] = device_ms(raw_on_current, copies, args.inner, args.repeats)

        # Host cost per launch. The grid is cut to one CTA so the GPU keeps up with the host.
        one_cta = RawCubinLaunch(compiled, (1, 1, 1))
        x0, y0, w0 = xs[0].data_ptr(), ys[0].data_ptr(), w.data_ptr()
        constants = kernel_constants(layer, cfg, dtype)
        # Triton's CompiledKernel launcher, argument binding and specialization skipped; it
        # takes every argument of the signature, constexprs included, in order.
        runner = compiled[(1, 1, 1)]
        values = {"x_ptr": x0, "w_ptr": w0, "y_ptr": y0, **constants}
        all_args = [values[name] for name in conv2d_nhwc_fwd_kernel.arg_names]
        out["host_per_launch"] = host_us(
            {
                "raw_cuLaunchKernel": lambda: one_cta(x0, w0, y0, stream=stream),
                "raw_cuLaunchKernel_prepacked": lambda: one_cta.launch_packed(stream),
                "triton_jit": lambda: conv2d_nhwc_fwd_kernel[(1, 1, 1)](
                    xs[0], w, ys[0], **constants, num_warps=cfg.num_warps, num_stages=cfg.num_stages
                ),
                "triton_compiled_kernel": lambda: runner(*all_args, stream=stream),
            }
        )
        out["works"] = out["bitwise_equal_to_triton_launch"]
    except Exception as exc:
        out["works"] = False
        out["error"] = f"{type(exc).__name__}: {exc}"[:600]
    return out


def _row_text(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"ERROR {row['error'][:160]}"
    return (
        f"{row['ms'] * 1e3:8.1f} us {row['tflops']:6.1f} TFLOP/s err {row['rel_error']:.1e}"
        f" smem {row['shared_bytes'] // 1024} KiB regs {row['registers']} spills {row['spills']}"
        f" wgmma {row['wgmma']} first call {row['first_call_s']:.1f} s"
    )


def print_table(result: dict[str, Any]) -> None:
    print(
        f"\n{result['device']}, torch {result['torch']}, triton {result['triton']}, "
        f"cuDNN {result['cudnn']}, driver {result['driver']}"
    )
    print(
        "peak matmul (8192^3):", {k: round(v, 1) for k, v in result["peak_matmul_tflops"].items()}
    )
    head = (
        f"{'layer':22} {'dtype':5} {'best config':22} {'triton us':>9} {'cudnn us':>9} "
        f"{'mm us':>8} {'tri TF':>7} {'cud TF':>7} {'tri/mm':>6} {'cud/mm':>6} "
        f"{'tri/pk':>6} {'cud/pk':>6} {'cud/tri':>7} {'raw':>4} {'err':>8}"
    )
    print(head)
    for case in result["cases"]:
        if "triton_ms" not in case:
            print(f"{case['layer_name']:22} {case['dtype']:5} {case.get('error', 'no result')}")
            continue
        raw_ok = case.get("raw_launch_works", False)
        print(
            f"{case['layer_name']:22} {case['dtype']:5} {case['best']:22} "
            f"{case['triton_ms'] * 1e3:9.1f} {case['cudnn_ms'] * 1e3:9.1f} "
            f"{case['matmul_ms'] * 1e3:8.1f} "
            f"{case['triton_tflops']:7.1f} {case['cudnn_tflops']:7.1f} "
            f"{case['triton_of_matmul']:6.2f} {case['cudnn_of_matmul']:6.2f} "
            f"{case.get('triton_of_peak_matmul', float('nan')):6.2f} "
            f"{case.get('cudnn_of_peak_matmul', float('nan')):6.2f} "
            f"{case['cudnn_over_triton']:7.2f} {('ok' if raw_ok else 'FAIL'):>4} "
            f"{case['triton_rel_error']:8.1e}"
        )
    print("\nbest Triton config by load path (us): cp.async only | TMA where allowed")
    for case in result["cases"]:
        by_path = case.get("best_by_load_path", {})
        text = " | ".join(
            f"{path} {row['label']} {row['ms'] * 1e3:.1f}" for path, row in by_path.items()
        )
        print(f"  {case['layer_name']} {case['dtype']}: {text}")
    print("\nraw cubin launch through cuda.bindings (host us per launch, median of rounds):")
    for case in result["cases"]:
        for label, raw in case.get("raw_launches", {}).items():
            head = f"  {case['layer_name']} {case['dtype']} {label}:"
            if not raw.get("works"):
                print(head, "FAILED", raw.get("error", "output differs"))
                continue
            host = {k: round(v["median_us"], 1) for k, v in raw["host_per_launch"].items()}
            print(
                f"{head} bitwise equal {raw['bitwise_equal_to_triton_launch']}, device "
                f"{raw['device_ms'] * 1e3:.1f} us, smem {raw['shared_bytes']} B, regs "
                f"{raw['registers']}, params {raw['parameters']}, host {host}"
            )


# -- the CPU self-test (Triton interpreter) ----------------------------------------------------


def self_test() -> int:
    """Check the kernel's indexing in Triton's interpreter on small, awkward problems."""
    problems = [
        Conv2d("3x3 pad1", 2, 16, 7, 6, 16, 3, 3, pad=(1, 1)),
        Conv2d("3x3 s2 pad1", 2, 16, 9, 8, 24, 3, 3, pad=(1, 1), stride=(2, 2)),
        Conv2d("1x1", 3, 32, 5, 5, 16, 1, 1),
        Conv2d("odd C, K; 3x2 dil2 pad(2,1)", 2, 20, 8, 7, 12, 3, 2, pad=(2, 1), dilation=(2, 2)),
        Conv2d("5x5 s(1,2) pad(0,2)", 1, 8, 9, 10, 40, 5, 5, pad=(0, 2), stride=(1, 2)),
    ]
    configs = [
        Config(16, 16, 16, 4, 2, group_m=2),
        Config(32, 16, 16, 4, 3, group_m=1),
        Config(16, 16, 16, 4, 2, group_m=2, tma=True),
    ]
    failures = 0
    rng = np.random.default_rng(0)
    for layer in problems:
        for dtype, tdt in (("fp16", torch.float16), ("fp32", torch.float32)):
            for cfg in configs:
                x_shape = (layer.n, layer.c, layer.h, layer.w)
                w_shape = (layer.k, layer.c, layer.r, layer.s)
                x = torch.from_numpy(rng.standard_normal(x_shape)).to(tdt)
                w = torch.from_numpy(rng.standard_normal(w_shape)).to(tdt)
                x = x.contiguous(memory_format=torch.channels_last)
                w = w.contiguous(memory_format=torch.channels_last)
                y = torch.full((layer.n, layer.k, layer.p, layer.q), float("nan"), dtype=tdt)
                y = y.contiguous(memory_format=torch.channels_last)
                conv2d_nhwc_fwd_kernel[grid_of(layer, cfg)](
                    x, w, y, **kernel_constants(layer, cfg, "tf32" if dtype == "fp32" else dtype)
                )
                ref = torch_conv(x.double(), w.double(), layer)
                err = rel_error(y, ref)
                ok = err <= 2e-3
                failures += not ok
                verdict = "ok  " if ok else "FAIL"
                print(f"{verdict} {layer.name:28} {dtype} {cfg.label}: rel err {err:.2e}")
    print("self-test", "passed" if failures == 0 else f"FAILED ({failures})")
    return 1 if failures else 0


# -- main --------------------------------------------------------------------------------------


def versions() -> dict[str, Any]:
    from cuda.bindings import driver

    _ok(driver.cuInit(0))
    drv = int(_ok(driver.cuDriverGetVersion()))
    props = torch.cuda.get_device_properties(0)
    try:
        import cuda.bindings as cb

        bindings = cb.__version__
    except Exception:  # pragma: no cover
        bindings = "unknown"
    return {
        "device": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "sm_count": props.multi_processor_count,
        "driver": f"{drv // 1000}.{drv % 1000 // 10}",
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "triton": triton.__version__,
        "cuda_bindings": bindings,
        "python": platform.python_version(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the JSON result here")
    parser.add_argument("--self-test", action="store_true", help="CPU interpreter check only")
    parser.add_argument("--quick", action="store_true", help="two configs a case")
    parser.add_argument(
        "--cases",
        default=",".join(f"{key}:{dtype}" for key, dtype in CASES),
        help="comma list of layer:dtype, e.g. a:fp16,b:fp16",
    )
    parser.add_argument("--inner", type=int, default=20, help="launches per timed graph")
    parser.add_argument("--repeats", type=int, default=15, help="timed graph replays")
    args = parser.parse_args()
    if args.self_test:
        return self_test()

    # Device-side TMA descriptors live in a global scratch buffer that Triton's launcher asks
    # this allocator for on every launch.
    triton.set_allocator(
        lambda size, _align, _stream: torch.empty(size, dtype=torch.int8, device="cuda")
    )
    torch.backends.cudnn.benchmark = True
    # TF32 only where a case asks for it: fp32 tensors are the TF32 cases here.
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    cases = [tuple(item.split(":")) for item in args.cases.split(",") if item]

    result: dict[str, Any] = {
        **versions(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "timing": (
            f"CUDA events around replays of a CUDA graph of {args.inner} back-to-back launches "
            f"rotating over input/output copies (about 150 MB, at most 16 copies), "
            f"median of {args.repeats} replays"
        ),
        "peak_matmul_tflops": {},
        "cases": [],
    }
    print({k: v for k, v in result.items() if k not in ("cases", "peak_matmul_tflops")}, flush=True)
    for dtype in sorted({d for _, d in cases}):
        _, rate = matmul_rate_tflops(dtype, 8192, 8192, 8192, 5, 5)
        result["peak_matmul_tflops"][dtype] = rate
        print(f"matmul 8192^3 {dtype}: {rate:.1f} TFLOP/s", flush=True)

    for layer_key, dtype in cases:
        layer = LAYERS[layer_key]
        print(f"{layer.name} {dtype}: GEMM {layer.gemm}", flush=True)
        configs = candidate_configs(layer, dtype, args.quick)
        try:
            case = run_case(layer, dtype, configs, args, result["peak_matmul_tflops"])
        except Exception as exc:  # keep the other cases' numbers
            traceback.print_exc()
            case = {"layer_name": layer.name, "dtype": dtype, "error": f"{exc!r}"[:600]}
        result["cases"].append(case)
        if args.out:  # write as we go, so a timeout still leaves the finished cases
            with open(args.out, "w") as fh:
                json.dump(result, fh, indent=1, default=str)
        torch.cuda.empty_cache()
    print_table(result)
    bad = [c for c in result["cases"] if "triton_ms" not in c]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
