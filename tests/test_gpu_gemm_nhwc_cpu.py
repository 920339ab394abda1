"""``gemm.gpu_nhwc`` without a GPU: its invoker driven against an emulated device.

The emulation is written from the kernels' and the BLAS's contracts, not from the invoker: a
flat byte array is device memory, the row kernels and the row-block copies are numpy versions
of ``kernels/im2col_cl.cu`` (row layout ``[m][g][gw]``: ``[tap][cg]`` then zeros) and the BLAS
is a column-major strided-batched GEMM. Every direction must then match the float64 reference, so a
wrong leading dimension, stride, offset or chunk in the invoker fails here, on the CPU.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

import miocore
from miocore import reference
from miocore.testing import TOLERANCES, cpu_context

nhwc = pytest.importorskip("miocore_gemm.gpu_nhwc")
geometry = pytest.importorskip("miocore_gemm.gpu_nhwc_geometry")

FIELDS = (
    "in",
    "out",
    "fil",
    "pad",
    "stride",
    "dil",
    "xs",
    "c",
    "groups",
    "cg",
    "n0",
    "nb",
    "gw",
    "tw",
)


class Memory:
    """Device memory: one byte array; a pointer is an offset (never 0)."""

    def __init__(self, nbytes: int) -> None:
        self.raw = np.zeros(nbytes + 4096, np.uint8)
        self.top = 256

    def alloc(self, nbytes: int, misalign: int = 0) -> int:
        ptr = self.top + misalign
        self.top = -(-(ptr + nbytes) // 256) * 256 + 256
        return ptr

    def typed(self, ptr: int, dtype: np.dtype, count: int) -> np.ndarray:
        return self.raw[ptr : ptr + count * dtype.itemsize].view(dtype)


def _params(args: object) -> tuple[int, int, dict]:
    words = args._buffer  # type: ignore[attr-defined]
    values = words[2:].view(np.int64)
    sizes = {"in": 3, "out": 3, "fil": 3, "pad": 3, "stride": 3, "dil": 3, "xs": 4}
    out, i = {}, 0
    for name in FIELDS:
        n = sizes.get(name, 1)
        out[name] = [int(v) for v in values[i : i + n]] if n > 1 else int(values[i])
        i += n
    return int(words[0]), int(words[1]), out


@dataclasses.dataclass
class FakeKernel:
    """A numpy stand-in for one compiled kernel."""

    name: str
    mem: Memory
    dtype: np.dtype
    backend: object = None

    def launch(
        self, args: object, grid: tuple = (1,), block: tuple = (1,), shared: int = 0
    ) -> None:
        if self.name.startswith("copy_rows"):
            self._copy_rows(args)
            return
        if self.name == "flip_filter":
            self._flip_filter(args)
            return
        src, dst, p = _params(args)
        g, cg, c = p["groups"], p["cg"], p["c"]
        if self.name == "im2col_cl_tiles":  # the input patch of tw pixels fits the launch
            width = (p["tw"] - 1) * p["stride"][2] + p["dil"][2] * (p["fil"][2] - 1) + 1
            table = -(-p["gw"] * 4 // 16) * 16
            need = table + p["fil"][0] * p["fil"][1] * width * c * self.dtype.itemsize
            assert p["tw"] >= 1 and shared >= need, (p["tw"], shared, need)
        fil, out, size = p["fil"], p["out"], self.dtype.itemsize
        taps = list(np.ndindex(*fil))
        # x as (nb, D, H, W, C) through its element strides (channel stride 1).
        xs = p["xs"]
        build = self.name.startswith("im2col")  # im2col_cl / im2col_cl_chunks, else col2im_cl
        x_ptr = src if build else dst
        base = x_ptr + p["n0"] * xs[0] * size
        span = (
            (p["nb"] - 1) * xs[0]
            + sum((n - 1) * s for n, s in zip(p["in"], xs[1:], strict=True))
            + c
        )
        flat = self.mem.typed(base, self.dtype, span)
        x = np.lib.stride_tricks.as_strided(
            flat,
            (p["nb"], *p["in"], c),
            [s * size for s in (xs[0], *xs[1:], 1)],
        )
        rows = p["nb"] * math.prod(out)
        gw, used = p["gw"], len(taps) * cg
        assert gw >= used
        if build:
            block = np.zeros((p["nb"], *out, g, gw), self.dtype)
        else:
            block = self.mem.typed(src, self.dtype, rows * g * gw)
            block = block.reshape(p["nb"], *out, g, gw).astype(np.float32)
            acc = np.zeros((p["nb"], *p["in"], c), np.float32)
        # (A reshape of the padded blocks' slice is a copy: built rows go back in below.)
        col = block[..., :used].reshape(p["nb"], *out, g, len(taps), cg)
        for t, tap in enumerate(taps):
            for pos in np.ndindex(*out):
                src_pos = [
                    o * s - pd + f * d
                    for o, s, pd, f, d in zip(
                        pos, p["stride"], p["pad"], tap, p["dil"], strict=True
                    )
                ]
                if not all(0 <= v < n for v, n in zip(src_pos, p["in"], strict=True)):
                    continue
                if build:
                    col[(slice(None), *pos, slice(None), t)] = x[(slice(None), *src_pos)].reshape(
                        p["nb"], g, cg
                    )
                else:
                    acc[(slice(None), *src_pos)] += col[
                        (slice(None), *pos, slice(None), t)
                    ].reshape(p["nb"], c)
        if build:
            block[..., :used] = col.reshape(p["nb"], *out, g, used)
            self.mem.typed(dst, self.dtype, block.size)[:] = block.reshape(-1)
        else:
            x[...] = acc.astype(self.dtype)

    def _flip_filter(self, args: object) -> None:
        """dst[g*Cg + c][tap][k] = w[g*Kg + k][taps - 1 - tap][c], rows gw wide, zero tail."""
        words = args._buffer  # type: ignore[attr-defined]
        src, dst = int(words[0]), int(words[1])
        rows, gw, taps, kg, cg = (int(v) for v in words[2:].view(np.int64))
        groups = rows // cg
        w = self.mem.typed(src, self.dtype, groups * kg * taps * cg).reshape(groups, kg, taps, cg)
        flipped = w[:, :, ::-1, :].transpose(0, 3, 2, 1).reshape(rows, taps * kg)
        out = self.mem.typed(dst, self.dtype, rows * gw).reshape(rows, gw)
        out[:] = 0
        out[:, : taps * kg] = flipped

    def _copy_rows(self, args: object) -> None:
        """dst[r][c] = src[r][c] (c < cols), 0 up to dst_cols; leading dimensions given."""
        words = args._buffer  # type: ignore[attr-defined]
        src, dst = int(words[0]), int(words[1])
        rows, cols, dst_cols, src_ld, dst_ld = (int(v) for v in words[2:].view(np.int64))
        src_type = np.dtype(np.float32) if self.name.endswith("_f32") else self.dtype
        source = self.mem.typed(src, src_type, (rows - 1) * src_ld + cols)
        target = self.mem.typed(dst, self.dtype, (rows - 1) * dst_ld + dst_cols)
        for r in range(rows):
            row = target[r * dst_ld : r * dst_ld + dst_cols]
            row[:] = 0
            row[:cols] = source[r * src_ld : r * src_ld + cols].astype(self.dtype)


@dataclasses.dataclass
class FakeBlas:
    """Column-major strided-batched GEMM on the emulated memory (float64 arithmetic)."""

    mem: Memory

    calls: int = 0
    tf32_calls: int = 0

    def gemm(self, dtype, transa, transb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc, batch=1,
             beta=0.0, c_dtype=None, tf32=False):  # fmt: skip
        self.calls += 1
        self.tf32_calls += tf32
        t, tc = dtype.numpy, (c_dtype or dtype).numpy
        for i in range(batch):
            rows_a, cols_a = (k, m) if transa else (m, k)
            rows_b, cols_b = (n, k) if transb else (k, n)
            A = self._matrix(a + i * sa * t.itemsize, t, rows_a, cols_a, lda)
            B = self._matrix(b + i * sb * t.itemsize, t, rows_b, cols_b, ldb)
            C = self._matrix(c + i * sc * tc.itemsize, tc, m, n, ldc)
            opa = A.T if transa else A
            opb = B.T if transb else B
            result = opa.astype(np.float64) @ opb.astype(np.float64)
            if beta:  # beta 0 ignores C, as BLAS does (a NaN-poisoned output stays unread)
                result = result + beta * C.astype(np.float64)
            C[...] = result.astype(tc)

    def _matrix(self, ptr: int, dtype: np.dtype, rows: int, cols: int, ld: int) -> np.ndarray:
        assert ld >= rows, (ld, rows)
        flat = self.mem.typed(ptr, dtype, (cols - 1) * ld + rows)
        return np.lib.stride_tricks.as_strided(
            flat, (rows, cols), (dtype.itemsize, ld * dtype.itemsize)
        )


@dataclasses.dataclass
class FakeDriver:
    """The driver primitive the invoker may call directly: memset."""

    mem: Memory

    def memset(self, dst: int, nbytes: int, stream: object) -> None:
        self.mem.raw[dst : dst + nbytes] = 0


@dataclasses.dataclass
class FakeBackend:
    """What the invoker reads from its backend."""

    blas: FakeBlas
    device: object
    driver: FakeDriver
    stream_object: object = None


def _ctx(tf32: bool = False) -> miocore.ExecutionContext:
    return miocore.ExecutionContext(
        device=dataclasses.replace(cpu_context().device, backend="cuda"),
        math_mode="tf32" if tf32 else "exact",
    )


def _run(
    problem: miocore.ConvProblem, misalign: int = 0, seed: int = 0, solver: object = None
) -> float:
    solver = solver or nhwc.GpuChannelsLastGemmSolver()
    ctx = _ctx(solver.tf32)
    p = problem.canonical
    assert solver.is_applicable(ctx, p)
    dtype = p.dtype.numpy
    inputs = reference.random_inputs(p, seed)
    out_name = p.direction.output_tensor
    sizes = {name: getattr(p, name).element_count * dtype.itemsize for name in ("x", "w", "y")}
    ws_size = solver.workspace_size(ctx, p)
    mem = Memory(sum(sizes.values()) + ws_size + 8192)
    ptrs = {name: mem.alloc(sizes[name], misalign if name == "x" else 0) for name in sizes}
    ws_ptr = mem.alloc(ws_size) if ws_size else 0
    for name in ("x", "w", "y"):
        desc = getattr(p, name)
        value = inputs.get(name)
        buf = mem.typed(ptrs[name], dtype, desc.element_count)
        if value is None:
            buf[:] = np.nan
            continue
        # Channels-last memory order: move C to the end.
        buf[:] = np.moveaxis(np.asarray(value, dtype), 1, -1).reshape(-1)
    sol = solver.get_solution(ctx, p)
    blas = FakeBlas(mem)
    backend = FakeBackend(blas, ctx.device, FakeDriver(mem))
    compiled = [FakeKernel(k.kernel_name, mem, dtype, backend) for k in sol.kernels]
    invoker = sol.invoker_factory(compiled)

    class Ptr:
        def __init__(self, ptr: int) -> None:
            self.ptr = ptr

    params = miocore.InvokeParams(
        problem=p,
        x=Ptr(ptrs["x"]),
        w=Ptr(ptrs["w"]),
        y=Ptr(ptrs["y"]),
        workspace=Ptr(ws_ptr) if ws_size else None,
    )
    invoker(None, params)
    # The TF32 twin asks for TF32 in every product, the exact solver in none.
    assert blas.tf32_calls == (blas.calls if solver.tf32 else 0)
    desc = getattr(p, out_name)
    cl_shape = (desc.lengths[0], *desc.lengths[2:], desc.lengths[1])
    got = np.moveaxis(mem.typed(ptrs[out_name], dtype, desc.element_count).reshape(cl_shape), -1, 1)
    expected = reference.convolution(p, **{k: v for k, v in inputs.items() if k != out_name})
    assert np.isfinite(got.astype(np.float64)).all(), "not every output element was written"
    return reference.relative_error(got, expected)


CASES = [
    # n, c, k, spatial, filter, pads, strides, dilations, groups
    (2, 8, 12, (7, 9), (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (3, 6, 4, (8, 8), (1, 1), (0, 0), (1, 1), (1, 1), 2),
    (2, 8, 8, (9, 7), (1, 1), (0, 0), (2, 2), (1, 1), 1),
    (2, 8, 12, (8, 6), (1, 1), (0, 0), (2, 3), (1, 1), 1),  # in = stride * out: no rows
    (1, 8, 8, (4, 56), (1, 1), (0, 0), (2, 2), (1, 1), 1),  # and wide enough in forward
    (2, 4, 6, (9, 8), (3, 2), (2, 0), (2, 1), (1, 2), 2),
    (2, 4, 4, (5, 6, 4), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
    (2, 3, 8, (11, 10), (7, 7), (3, 3), (2, 2), (1, 1), 1),  # conv1: fp16 rows padded 147 -> 152
    (2, 6, 4, (6, 7), (3, 3), (1, 1), (1, 1), (1, 1), 2),  # 27 per group -> 32, dilated below
    (1, 6, 6, (7, 7), (3, 2), (2, 1), (1, 2), (2, 1), 3),  # 12 per group -> 16
    (2, 4, 6, (8, 9), (3, 3), (1, 2), (1, 1), (2, 1), 2),  # dilated stride 1: flipped twin
    (2, 4, 4, (6, 6), (3, 3), (3, 0), (1, 1), (1, 1), 1),  # pad past the reach: not flipped
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_invoker_matches_reference_on_emulated_device(
    case: int, direction: str, dtype: str
) -> None:
    n, c, k, spatial, f, pads, strides, dils, groups = CASES[case]
    layout = "NHWC" if len(spatial) == 2 else "NDHWC"
    problem = miocore.ConvProblem.from_sizes(
        direction, n=n, c=c, k=k, in_spatial=spatial, filter_spatial=f, pads=pads,
        strides=strides, dilations=dils, groups=groups, dtype=dtype, layout=layout,
    )  # fmt: skip
    err = _run(problem, seed=case)
    assert err <= TOLERANCES[problem.dtype], err


def test_chunks_and_unaligned_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny budget forces one image per chunk; x 4 bytes off 16 takes the scalar copy."""
    problem = miocore.ConvProblem.from_sizes(
        "backward_weights", n=3, c=8, k=8, in_spatial=(6, 6), filter_spatial=(3, 3),
        pads=(1, 1), dtype="float16", layout="NHWC",
    )  # fmt: skip
    monkeypatch.setattr(geometry, "WORKSPACE_BUDGET", 1)
    assert geometry.images_per_chunk(problem) == 1
    assert geometry.copy_unit(problem) == 16
    for direction in ("forward", "backward_weights"):
        p = miocore.ConvProblem(direction, x=problem.x, w=problem.w, y=problem.y, conv=problem.conv)
        assert _run(p, misalign=4) <= TOLERANCES[p.dtype]


def test_padded_rows_in_half_types(monkeypatch: pytest.MonkeyPatch) -> None:
    """conv1's 7*7*3 = 147 row block is padded to 152 in fp16 (not in fp32); over several
    chunks the float32 dW accumulator is padded too and still lands in dw."""
    conv1 = miocore.ConvProblem.from_sizes(
        "forward", n=32, c=3, k=64, in_spatial=(224, 224), filter_spatial=(7, 7), pads=(3, 3),
        strides=(2, 2), dtype="float16", layout="NHWC",
    )  # fmt: skip
    assert geometry.is_padded(conv1) and geometry.group_width(conv1) == 152
    assert geometry.tile_width(conv1) == 64  # 7 tap rows of 133 pixels of 3 channels: 5.6 KiB
    wide = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=3001, k=8, in_spatial=(9, 9), filter_spatial=(3, 3), pads=(1, 1),
        dtype="float16", layout="NHWC",
    )  # fmt: skip
    # Not even one pixel's patch (3 rows x 3 pixels x 3001 channels) fits: rows stay unpadded.
    assert geometry.tile_width(wide) == 0 and not geometry.is_padded(wide)
    single = miocore.ConvProblem.from_sizes(
        "forward", n=32, c=3, k=64, in_spatial=(224, 224), filter_spatial=(7, 7), pads=(3, 3),
        strides=(2, 2), dtype="float32", layout="NHWC",
    )  # fmt: skip
    assert not geometry.is_padded(single) and geometry.group_width(single) == 147
    small = miocore.ConvProblem.from_sizes(
        "backward_weights", n=3, c=3, k=8, in_spatial=(9, 8), filter_spatial=(3, 3),
        pads=(1, 1), dtype="float16", layout="NHWC",
    )  # fmt: skip
    monkeypatch.setattr(geometry, "WORKSPACE_BUDGET", 1)
    assert geometry.images_per_chunk(small) == 1 and geometry.is_padded(small)
    for direction in ("forward", "backward_data", "backward_weights"):
        p = miocore.ConvProblem(direction, x=small.x, w=small.w, y=small.y, conv=small.conv)
        assert _run(p, misalign=2) <= TOLERANCES[p.dtype]


def test_stride_one_backward_data_is_a_flipped_forward() -> None:
    """The forward twin of a stride-1 backward data swaps channels, keeps the filter and
    complements the padding; it produces dx's shape from dY's."""
    p = miocore.ConvProblem.from_sizes(
        "backward_data", n=2, c=6, k=8, in_spatial=(9, 7), filter_spatial=(3, 5),
        pads=(1, 1), dilations=(2, 1), groups=2, dtype="float16", layout="NHWC",
    )  # fmt: skip
    assert geometry.is_flipped_backward(p)
    twin = geometry.forward_twin(p)
    assert (twin.c, twin.k, twin.groups) == (p.k, p.c, p.groups)
    assert twin.conv.pads == (3, 3) and twin.in_spatial == p.out_spatial
    assert twin.out_spatial == p.in_spatial
    forward = miocore.ConvProblem("forward", x=p.x, w=p.w, y=p.y, conv=p.conv)
    assert not geometry.is_flipped_backward(forward) and geometry.forward_twin(forward) is forward
    # A filter large beside the rows it would save (ResNet's l4.3x3: a third) keeps col2im.
    late = miocore.ConvProblem.from_sizes(
        "backward_data", n=32, c=512, k=512, in_spatial=(7, 7), filter_spatial=(3, 3),
        pads=(1, 1), dtype="float16", layout="NHWC",
    )  # fmt: skip
    assert not geometry.is_flipped_backward(late) and geometry.forward_twin(late) is late


def test_strided_pointwise_needs_no_rows() -> None:
    wide = miocore.ConvProblem.from_sizes(
        "backward_data", n=2, c=8, k=12, in_spatial=(8, 56), filter_spatial=(1, 1),
        strides=(2, 2), dtype="float16", layout="NHWC",
    )  # fmt: skip
    odd = miocore.ConvProblem.from_sizes(
        "backward_data", n=2, c=8, k=12, in_spatial=(9, 57), filter_spatial=(1, 1),
        strides=(2, 2), dtype="float16", layout="NHWC",
    )  # fmt: skip
    narrow = miocore.ConvProblem.from_sizes(
        "forward", n=2, c=8, k=12, in_spatial=(8, 6), filter_spatial=(1, 1),
        strides=(2, 3), dtype="float16", layout="NHWC",
    )  # fmt: skip
    assert geometry.is_strided_pointwise(wide) and geometry.row_bytes(wide) == 0
    forward = miocore.ConvProblem("forward", x=wide.x, w=wide.w, y=wide.y, conv=wide.conv)
    assert geometry.is_strided_pointwise(forward)
    assert not geometry.is_strided_pointwise(odd) and geometry.row_bytes(odd) > 0
    # Blocks narrower than the measured break-even take the rows path.
    assert narrow.out_spatial[-1] < geometry.STRIDED_MIN_WIDTH
    assert not geometry.is_strided_pointwise(narrow)
    weights = miocore.ConvProblem("backward_weights", x=wide.x, w=wide.w, y=wide.y, conv=wide.conv)
    assert not geometry.is_strided_pointwise(weights)


def test_param_struct_matches_the_kernel() -> None:
    source = (nhwc.KERNEL_DIR / "im2col_cl.cu").read_text()
    body = re.search(r"struct MioClParams \{(.*?)\};", source, re.S).group(1)
    names = []
    for line in body.splitlines():
        decl = line.split("//")[0].strip()
        if decl:
            assert decl.startswith("mio_index ") and decl.endswith(";"), decl
            names += [re.sub(r"\[\d+\]", "", f.strip()) for f in decl[10:-1].split(",")]
    assert tuple(names) == FIELDS


def test_applicability_names_the_layout() -> None:
    ctx = _ctx()
    solver = nhwc.GpuChannelsLastGemmSolver()
    nchw = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=4, k=4, in_spatial=(5, 5), filter_spatial=(3, 3)
    )
    verdict = solver.is_applicable(ctx, nchw)
    assert not verdict and "NHWC" in verdict.reason and "NCHW" in verdict.reason


def test_tf32_twin_only_in_tf32_mode() -> None:
    """gemm.gpu_nhwc_tf32 declines exact-mode and half-type problems, names why, and its
    invoker asks the BLAS for TF32 in every call (the emulated BLAS computes exactly, so the
    result must still match the reference)."""
    twin = nhwc.GpuChannelsLastGemmTf32Solver()
    problem = miocore.ConvProblem.from_sizes(
        "backward_weights", n=2, c=8, k=12, in_spatial=(7, 9), filter_spatial=(3, 3),
        pads=(1, 1), layout="NHWC",
    )  # fmt: skip
    exact = twin.is_applicable(_ctx(), problem)
    assert not exact and "math mode is 'exact'" in exact.reason
    half = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=8, k=8, in_spatial=(5, 5), filter_spatial=(3, 3), dtype="float16",
        layout="NHWC",
    )  # fmt: skip
    verdict = twin.is_applicable(_ctx(tf32=True), half)
    assert not verdict and "float16" in verdict.reason
    assert twin.is_applicable(_ctx(tf32=True), problem)
    # Immediate mode ranks it by the TF32 rate: never below its exact twin, never over 1.
    exact_wti = nhwc.GpuChannelsLastGemmSolver().wti(_ctx(), problem)
    assert exact_wti <= twin.wti(_ctx(tf32=True), problem) <= 1.0
    for direction in ("forward", "backward_data", "backward_weights"):
        p = miocore.ConvProblem(direction, x=problem.x, w=problem.w, y=problem.y, conv=problem.conv)
        assert _run(p, solver=twin) <= TOLERANCES[p.dtype]


def test_nchw_tf32_twin_on_pointwise_layers() -> None:
    """gemm.gpu_im2col_tf32 (the NCHW GEMM's TF32 twin): declines exact-mode and half-type
    problems; on NCHW 1x1 layers (one GEMM per chunk of images, read and written in place, no
    lowering kernel) every BLAS call asks for TF32 and the result matches the reference (the
    emulated BLAS computes exactly)."""
    from miocore_gemm import gpu

    twin, exact = gpu.GpuIm2colGemmTf32Solver(), gpu.GpuIm2colGemmSolver()
    base = miocore.ConvProblem.from_sizes(
        "forward", n=3, c=8, k=12, in_spatial=(5, 7), filter_spatial=(1, 1), layout="NCHW"
    ).canonical
    assert "math mode is 'exact'" in twin.is_applicable(_ctx(), base).reason
    half = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=8, k=8, in_spatial=(5, 5), filter_spatial=(1, 1), dtype="float16"
    ).canonical
    assert "float16" in twin.is_applicable(_ctx(tf32=True), half).reason
    assert exact.wti(_ctx(), base) <= twin.wti(_ctx(tf32=True), base) <= 1.0
    ctx = _ctx(tf32=True)
    for direction in ("forward", "backward_data"):
        p = miocore.ConvProblem(direction, x=base.x, w=base.w, y=base.y, conv=base.conv)
        assert twin.is_applicable(ctx, p)
        inputs = reference.random_inputs(p, 5)
        out_name = p.direction.output_tensor
        sizes = {name: getattr(p, name).element_count * 4 for name in ("x", "w", "y")}
        mem = Memory(sum(sizes.values()) + 8192)
        ptrs = {name: mem.alloc(sizes[name]) for name in sizes}
        for name in ("x", "w", "y"):  # NCHW: the logical order is the memory order
            buf = mem.typed(ptrs[name], np.dtype(np.float32), getattr(p, name).element_count)
            buf[:] = np.nan if name == out_name else np.asarray(inputs[name]).reshape(-1)
        sol = twin.get_solution(ctx, p)
        assert sol.workspace_size == 0  # pointwise: no column buffer
        blas = FakeBlas(mem)
        backend = FakeBackend(blas, ctx.device, FakeDriver(mem))
        f32 = np.dtype(np.float32)
        compiled = [FakeKernel(k.kernel_name, mem, f32, backend) for k in sol.kernels]
        sol.invoker_factory(compiled)(
            None,
            miocore.InvokeParams(
                problem=p,
                x=_Ptr(ptrs["x"]),
                w=_Ptr(ptrs["w"]),
                y=_Ptr(ptrs["y"]),
                workspace=None,
            ),
        )
        assert blas.calls > 0 and blas.tf32_calls == blas.calls
        desc = getattr(p, out_name)
        got = mem.typed(ptrs[out_name], np.dtype(np.float32), desc.element_count)
        expected = reference.convolution(p, **{k: v for k, v in inputs.items() if k != out_name})
        err = reference.relative_error(got.reshape(desc.lengths), expected)
        assert err <= TOLERANCES[p.dtype], (direction, err)


@dataclasses.dataclass
class _Ptr:
    ptr: int
