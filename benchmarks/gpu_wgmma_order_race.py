"""The ping-pong order barriers of ``igemm_wgmma.cu`` under a provoked race (issue 13).

The twenty-eighth session saw ``igemm.gpu_wgmma`` hang intermittently in a find (ping-pong,
128x64 tiles, one slice per tile). The cause found by reading the protocol: one thread of a
consumer arrived on the other consumer's order barrier (count 1) while all 128 waited on
theirs by parity, so the other consumer could complete two phases before a lagging warp of
this one waited, and that warp then waited for a phase that never came. Now every consumer
thread arrives (count 128).

This builds the kernel (NVRTC, as miocore does) with the consumers' non-leading warps delayed
before their order wait (``--delay`` ns, which makes the lag certain), as it is and with the
first version's protocol restored, and launches each on l1.1x1a's backward data (N=32,
56x56, 64 -> 64 channels, channels-last, the filter as it is: ``MIO_B_MN=1``) ``--launches``
times in a child process with a watchdog. Expected: the first version hangs, this one runs
and matches ``dy @ w``.

    python benchmarks/gpu_wgmma_order_race.py --delay 4000 --launches 4000
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import time
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[1] / "plugins/igemm/src/miocore_igemm/kernels"
CORE_KERNELS = Path(__file__).resolve().parents[1] / "kernels"
WAIT = "    if (turn > 0) bar_wait(&order[cw],"
ARRIVE_NOW = "if (step == hi - 1) bar_arrive(&order[cw ^ 1]);"
ARRIVE_FIRST = "if (step == hi - 1 && tid % 128 == 0) bar_arrive(&order[cw ^ 1]);"
SHARED = 8 * (128 + 64) * 128 + 1024
OPTIONS = (
    "-DMIO_DTYPE_FP16", "-DMIO_BM=128", "-DMIO_BN=64", "-DMIO_STAGES=8", "-DMIO_CLUSTER=1",
    "-DMIO_PINGPONG=1", "-DMIO_B_MN=1", "--gpu-architecture=sm_90a",
)  # fmt: skip


def source(variant: str, delay: int) -> str:
    """The kernel source with the delay, as it is (``now``) or with the first protocol."""
    text = (KERNELS / "igemm_wgmma.cu").read_text()
    assert WAIT in text and ARRIVE_NOW in text, "the kernel's order protocol moved"
    text = text.replace(WAIT, f"    if (tid % 128 >= 32) __nanosleep({delay});\n{WAIT}")
    if variant == "first":
        text = text.replace(ARRIVE_NOW, ARRIVE_FIRST)
        text = text.replace("bar_init(&order[0], 128)", "bar_init(&order[0], 1)")
        text = text.replace("bar_init(&order[1], 128)", "bar_init(&order[1], 1)")
    return text


def child(variant: str, delay: int, launches: int) -> None:
    """Build, launch ``launches`` times, say ``ok`` with the error or ``HANG``."""
    import struct

    import torch
    from cuda.bindings import driver as cu

    import miocore

    handle = miocore.Handle("cuda")
    driver = handle.backend.driver
    binary, _ = driver.compile_source(
        source(variant, delay).encode(), "igemm_wgmma.cu", OPTIONS, [KERNELS, CORE_KERNELS]
    )
    err, module = cu.cuModuleLoadData(binary)
    assert int(err) == 0, err
    err, function = cu.cuModuleGetFunction(module, b"igemm_wgmma_fwd")
    assert int(err) == 0, err
    torch.manual_seed(0)
    dy = torch.randn(32, 56, 56, 64, device="cuda").half()  # channels-last dy
    w = torch.randn(64, 64, device="cuda").half()  # w[k][c]: the filter as it is
    dx = torch.zeros_like(dy)

    def tensor_map(ptr: int, dims: tuple, strides: tuple, box: tuple) -> bytes:
        def u64(v: tuple) -> list:
            return [cu.cuuint64_t(x) for x in v]

        def u32(v: tuple) -> list:
            return [cu.cuuint32_t(x) for x in v]

        err, made = cu.cuTensorMapEncodeTiled(
            cu.CUtensorMapDataType(6), len(dims), ptr, u64(dims), u64(strides), u32(box),
            u32((1,) * len(dims)), cu.CUtensorMapInterleave(0), cu.CUtensorMapSwizzle(3),
            cu.CUtensorMapL2promotion(3), cu.CUtensorMapFloatOOBfill(0),
        )  # fmt: skip
        assert int(err) == 0, err
        return ctypes.string_at(made.getPtr(), 128)

    # MioWgmmaGeom (gpu_wgmma.py's _GEOMETRY): n, oh, ow, k, r, s, channel blocks, strides,
    # pads, dilations, the 8x8x2 pixel box, 7x7 boxes, one split, one slice, dx's strides
    geometry = struct.pack(
        "<20i4q", 32, 56, 56, 64, 1, 1, 1, 1, 1, 0, 0, 1, 1, 8, 8, 2, 7, 7, 1, 1,
        56 * 56 * 64, 56 * 64, 64, 0,
    )  # fmt: skip
    args = [
        ctypes.create_string_buffer(
            tensor_map(dy.data_ptr(), (64, 56, 56, 32), (128, 7168, 401408), (64, 8, 8, 2)), 128
        ),
        ctypes.create_string_buffer(
            tensor_map(w.data_ptr(), (64, 1, 64), (128, 128), (64, 1, 64)), 128
        ),
        ctypes.c_void_p(dx.data_ptr()),
        ctypes.c_void_p(0),
        ctypes.create_string_buffer(geometry, len(geometry)),
    ]
    params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
    attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    cu.cuFuncSetAttribute(function, attribute, SHARED)
    stream = torch.cuda.current_stream().cuda_stream
    done = 0
    while done < launches:
        for _ in range(50):
            cu.cuLaunchKernel(
                function, 132, 1, 1, 384, 1, 1, SHARED, stream, ctypes.addressof(params), 0
            )
        done += 50
        start = time.time()
        while int(cu.cuStreamQuery(stream)[0]) != 0:
            if time.time() - start > 5:
                print(f"{variant}: HANG after {done - 50} launches", flush=True)
                return
    error = (dx.float().reshape(-1, 64) - dy.float().reshape(-1, 64) @ w.float()).abs().max()
    print(f"{variant}: ok, {done} launches, max |dx - dy @ w| = {error.item():.3g}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=int, default=4000)
    parser.add_argument("--launches", type=int, default=4000)
    parser.add_argument("--child", choices=("now", "first"))
    args = parser.parse_args()
    if args.child:
        child(args.child, args.delay, args.launches)
        return
    for variant in ("now", "first"):
        cmd = [sys.executable, "-u", __file__, "--child", variant]
        cmd += ["--delay", str(args.delay), "--launches", str(args.launches)]
        try:
            done = subprocess.run(cmd, timeout=120, capture_output=True, text=True)
            print(done.stdout.strip() or done.stderr[-2000:], flush=True)
        except subprocess.TimeoutExpired:
            print(f"{variant}: killed after 120 s (a hang the watchdog did not see)")


if __name__ == "__main__":
    main()
