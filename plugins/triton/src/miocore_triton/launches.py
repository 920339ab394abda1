"""The launches of one Triton solution, in order, and the invoker that makes them.

A solution is a list of :class:`Step`\\ s over the caller's three tensors and one workspace:

1. ``repack`` for each input that is not channels-last (NCHW activations, KCRS filters),
   into the workspace, so the GEMM's loads are vectors (``staged``); for TF32 backward
   weights, the other way: x and dy into channels-first order (``wrw_channels_first``);
2. ``conv_wtrans`` for TF32 backward data: the filter with its reduction dimension innermost;
3. the direction's GEMM kernel, reading staged copies where there are, writing the output
   tensor in its own strides;
4. ``conv_wrw_reduce`` for a split backward-weights run: the fp32 partials summed into dw;
   ``conv_split_reduce`` for a split forward or backward-data run: into y or dx.

Each step names its pointer arguments: ``"x"``, ``"w"``, ``"y"`` (the caller's tensors) or a
byte offset into the workspace.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from miocore import (
    ConvProblem,
    DataType,
    Direction,
    ExecutionContext,
    InvalidArgumentError,
    InvokeParams,
    KernelInfo,
    PerfConfig,
    TensorDescriptor,
)
from miocore_triton.depth import depth_sizes, depth_view
from miocore_triton.geometry import (
    REDUCE_BLOCK,
    SOURCES,
    TRITON_TYPES,
    channels_first_view,
    constants,
    direct_pixels,
    gemm_output,
    gemm_rows,
    gemm_tiles,
    image_tiles,
    is_phased,
    kernel_name,
    partial_bytes,
    phases,
    spatial,
    split_partial_strides,
    spreads,
    tile_of,
    transposed_filter_bytes,
    transposed_filter_strides,
    transposes_filter,
    wrw_channels_first,
    wrw_image_slices,
    wrw_tap_columns,
    wrw_tiles,
    wrw_x_direct,
    wrw_x_in_place,
)

#: The copies around the GEMMs: staging, filter transposition, the split sum.
COPIES = "triton/copies.py"
#: Workspace pieces start on this boundary (the kernels assume 16 bytes; 256 keeps lines whole).
ALIGN = 256
#: The staging copy's tile: pixels x channels.
STAGE_BLOCK = (64, 64)
#: The depth images' copies (``miocore_triton.depth``), and the depth channels of a tile.
DEPTH = "triton/depth.py"
DEPTH_BLOCK_C = 16
#: The inputs each direction reads (the third tensor is its output).
INPUTS = {
    Direction.FORWARD: ("x", "w"),
    Direction.BACKWARD_DATA: ("y", "w"),
    Direction.BACKWARD_WEIGHTS: ("x", "y"),
}
#: Kernel-argument prefixes of each tensor's strides.
PREFIX = {"x": "X", "w": "W", "y": "Y"}


class Step(NamedTuple):
    """One launch: its kernel, its pointer arguments (a tensor's name or a workspace offset)
    and the GEMM's row count where the kernel takes one."""

    kernel: KernelInfo
    pointers: tuple[str | int, ...]
    rows: int | None = None


def channels_last(desc: TensorDescriptor) -> bool:
    """Whether the channel dimension is innermost (stride 1): the kernels' vector loads."""
    return desc.strides[1] == 1 or desc.lengths[1] == 1


def staged(p: ConvProblem) -> tuple[str, ...]:
    """The inputs copied to channels-last first (TF32 backward data's filter is transposed
    by ``conv_wtrans`` instead; a 1x1 NCHW input is read in place, ``direct_pixels``, and so is
    the dy of a strided 1x1 layer, ``spreads``; backward
    weights reads an NCHW dy in place, and a 1x1 NCHW x, ``wrw_image_slices``, and in TF32
    any NCHW x, ``wrw_x_in_place``)."""
    out = []
    direct = direct_pixels(p) or spreads(p)
    in_place = {"y"} if wrw_image_slices(p) else set()
    if wrw_x_direct(p) or wrw_x_in_place(p):
        in_place.add("x")
    for name in INPUTS[p.direction]:
        if name == "w" and transposes_filter(p):
            continue
        if (direct and name != "w") or name in in_place:  # read in place
            continue
        if not channels_last(getattr(p, name)):
            out.append(name)
    return tuple(out)


def copied(p: ConvProblem) -> tuple[str, ...]:
    """Every input a solution copies before its GEMM: into channels-first order
    (:func:`~miocore_triton.geometry.wrw_channels_first`), then channels-last (:func:`staged`,
    of the problem as the GEMM then sees it)."""
    first = wrw_channels_first(p)
    return first + staged(channels_first_view(p, first))


def _packed_strides(desc: TensorDescriptor) -> tuple[int, int, int, int, int]:
    """(N, C, D, H, W) strides of the packed channels-last copy of ``desc`` (the depth
    stride 0 in 2-D, as :func:`~miocore_triton.geometry.spatial` gives it)."""
    c = desc.lengths[1]
    (d, h, w), _ = spatial(desc)
    return d * h * w * c, 1, (h * w * c if d > 1 else 0), w * c, c


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def tensor_bytes(desc: TensorDescriptor) -> int:
    """Bytes of a tensor's elements (its packed size)."""
    count = 1
    for n in desc.lengths:
        count *= n
    return count * desc.dtype.itemsize


def plan(
    ctx: ExecutionContext, p: ConvProblem, cfg: PerfConfig, *, depth: bool = False
) -> tuple[list[Step], int]:
    """The launches of ``p`` with configuration ``cfg``, and the workspace they need; with
    ``depth``, of ``p`` run as its depth image (:mod:`miocore_triton.depth`): the
    inputs copied into it first, a backward pass's output copied back from it last."""
    ty = TRITON_TYPES[p.dtype]
    warp = 64 if ctx.backend == "hip" else 32
    steps: list[Step] = []
    # where each tensor the GEMM reads or writes lies: the caller's (by name) or a copy (a
    # workspace offset)
    pointer: dict[str, str | int] = {"x": "x", "w": "w", "y": "y"}
    offset = _depth_inputs(p, ty, warp, steps, pointer) if depth else 0
    view = depth_view(p) if depth else p
    offset = _gemm(view, cfg, ty, warp, steps, dict(pointer), offset)  # its own copies
    if depth:
        steps += _depth_outputs(p, ty, warp, pointer)
    return steps, offset


def _gemm(
    p: ConvProblem,
    cfg: PerfConfig,
    ty: str,
    warp: int,
    steps: list[Step],
    pointer: dict[str, str | int],
    offset: int,
) -> int:
    """Append the direction's GEMM on ``p`` and the copies around it to ``steps`` (tensors
    where ``pointer`` says, copies from offset ``offset`` on); the workspace's end."""
    t = tile_of(cfg)
    split = cfg["split"]
    first = wrw_channels_first(p)
    for name in first:  # the kernels then read the packed copies in place
        repack = _repack(getattr(p, name), ty, warp, channels_first=True)
        steps.append(Step(repack, (pointer[name], offset)))
        pointer[name] = offset
        offset += _aligned(tensor_bytes(getattr(p, name)))
    p = channels_first_view(p, first)
    shape = constants(p)
    main_shape = dict(shape)
    for name in staged(p):
        desc = getattr(p, name)
        steps.append(Step(_repack(desc, ty, warp, channels_first=False), (pointer[name], offset)))
        pointer[name] = offset
        prefix = PREFIX[name]
        suffixes = ("K", "C", "T", "R", "S") if name == "w" else ("N", "C", "D", "H", "W")
        for suffix, stride in zip(suffixes, _packed_strides(desc), strict=True):
            main_shape[prefix + suffix] = stride
        offset += _aligned(tensor_bytes(desc))
    filter_elements = tensor_bytes(p.w) // p.dtype.itemsize
    if transposes_filter(p):
        options = [*_filter_options(shape), f"sig.w_ptr=*{ty}", f"sig.wt_ptr=*{ty}"]
        filter_grid = (-(-filter_elements // REDUCE_BLOCK),)
        kernel = _copy_kernel("conv_wtrans", options, filter_grid, warp, COPIES)
        steps.append(Step(kernel, (pointer["w"], offset)))
        pointer["w"] = offset
        main_shape.update(transposed_filter_strides(p))
        offset += _aligned(transposed_filter_bytes(p))
    # forward / backward data split: the GEMM writes fp32 partials of its output (y / dx)
    # into the workspace, one copy per share, which conv_split_reduce sums into the output
    split_out = (
        ""
        if p.direction is Direction.BACKWARD_WEIGHTS or split == 1
        else ("x" if p.direction is Direction.BACKWARD_DATA else "y")
    )
    types = {"x": ty, "w": ty, "y": ty}
    # the output where the caller (or a depth image) holds it: a split run's sum goes there
    written = pointer["w" if p.direction is Direction.BACKWARD_WEIGHTS else split_out or "y"]
    if split_out:
        prefix = PREFIX[split_out]
        strides = split_partial_strides(p)
        main_shape.update(zip((prefix + a for a in "NCDHW"), strides, strict=True))
        pointer[split_out], types[split_out] = offset, "fp32"
    options = [f"{key}={value}" for key, value in main_shape.items()]
    options += [
        f"BLOCK_M={t.bm}",
        f"BLOCK_N={t.bn}",
        f"BLOCK_K={t.bk}",
        f"STAGES={t.stages}",
        f"PRECISION={'tf32' if p.dtype is DataType.FLOAT32 else 'ieee'}",
        f"num_warps={t.warps}",
        f"num_stages={t.stages}",
        *(f"sig.{name}_ptr=*{types[name]}" for name in ("x", "w", "y")),
        "sig.M=i32",
    ]
    main_pointers = (pointer["x"], pointer["w"], pointer["y"])
    if p.direction is Direction.BACKWARD_WEIGHTS:
        options += ["sig.part_ptr=*fp32", f"SPLITS={split}"]
        options += [f"IMAGE_SLICES={wrw_image_slices(p)}", f"X_DIRECT={wrw_x_direct(p)}"]
        options += [f"TAP_COLUMNS={wrw_tap_columns(p)}"]
        grid: tuple[int, ...] = (wrw_tiles(p, t.bm, t.bn), split)
        main_pointers += (offset if split > 1 else "none",)
    elif spreads(p):
        options += ["GROUP_M=8"]
        grid = (gemm_tiles(p, t.bm, t.bn),)
    elif p.direction is Direction.BACKWARD_DATA:
        options += ["GROUP_M=8", f"PHASED={is_phased(p)}", f"SPLITS={split}"]
        options += [f"IMAGE_TILES={image_tiles(p)}", f"DIRECT_PIX={direct_pixels(p)}"]
        grid = (gemm_tiles(p, t.bm, t.bn), phases(p) * split)  # phased runs never split
    else:
        options += ["GROUP_M=8", f"SPLITS={split}"]
        options += [f"IMAGE_TILES={image_tiles(p)}", f"DIRECT_PIX={direct_pixels(p)}"]
        grid = (gemm_tiles(p, t.bm, t.bn), split) if split > 1 else (gemm_tiles(p, t.bm, t.bn),)
    kernel = KernelInfo(
        source=SOURCES[p.direction],
        kernel_name=kernel_name(p),
        options=tuple(sorted(options)),
        grid=grid,
        block=(t.warps * warp,),
    )
    steps.append(Step(kernel, main_pointers, gemm_rows(p)))
    if p.direction is Direction.BACKWARD_WEIGHTS and split > 1:
        options = [*_filter_options(shape), f"SPLITS={split}", "sig.part_ptr=*fp32"]
        options += [f"sig.w_ptr=*{ty}"]
        filter_grid = (-(-filter_elements // REDUCE_BLOCK),)
        kernel = _copy_kernel("conv_wrw_reduce", options, filter_grid, warp, COPIES)
        steps.append(Step(kernel, (offset, written)))
        offset += partial_bytes(p, split)
    if split_out:
        reduce = _split_reduce(p, split, ty, warp)
        steps.append(Step(reduce, (offset, written), gemm_rows(p)))
        offset += partial_bytes(p, split)
    return offset


def _depth_inputs(
    p: ConvProblem, ty: str, warp: int, steps: list[Step], pointer: dict[str, str | int]
) -> int:
    """The copies of ``p``'s inputs into its depth image (x for forward and backward weights,
    w for forward and backward data), and the workspace its output takes in depth form
    (backward data's dx, backward weights' dw); ``pointer`` then names the depth tensors.
    The workspace's end."""
    view = depth_view(p)
    offset = 0
    for name in ("x", "w"):  # y is the same in the depth image
        if name in INPUTS[p.direction]:
            copy = _space_to_depth(p, ty, warp) if name == "x" else _depth_filter(p, ty, warp)
            steps.append(Step(copy, (name, offset)))
        pointer[name] = offset  # the input's depth copy, or where the output's is written
        offset += _aligned(tensor_bytes(getattr(view, name)))
    return offset


def _space_to_depth(p: ConvProblem, ty: str, warp: int) -> KernelInfo:
    """``space_to_depth``: x into its packed channels-last depth image."""
    sizes = depth_sizes(p)
    options = (
        *_x_options(p),
        *(f"{key}={sizes[key]}" for key in ("FD", "FH", "FW", "MD", "MH", "MW")),
        *(f"{key}={sizes[key]}" for key in ("C2", "D2", "H2", "W2")),
        f"BLOCK_P={STAGE_BLOCK[0]}", f"BLOCK_C={DEPTH_BLOCK_C}",
        "num_warps=4", "num_stages=1", f"sig.src_ptr=*{ty}", f"sig.dst_ptr=*{ty}",
    )  # fmt: skip
    pixels = sizes["D2"] * sizes["H2"] * sizes["W2"]
    grid = (p.x.lengths[0] * -(-pixels // STAGE_BLOCK[0]), -(-sizes["C2"] // DEPTH_BLOCK_C))
    return _copy_kernel("space_to_depth", options, grid, warp)


def _x_options(p: ConvProblem) -> list[str]:
    """x's channels, sizes and strides, and the stride and padding, as 3-D (a 2-D problem's
    depth 1, its depth stride 0) for the depth copies."""
    shape = constants(p)
    keys = ("C", "D", "H", "W", "XN", "XC", "XD", "XH", "XW", "SD", "SH", "SW", "PD", "PH", "PW")
    return [f"{key}={shape[key]}" for key in keys]


def _depth_outputs(p: ConvProblem, ty: str, warp: int, pointer: dict[str, str | int]) -> list[Step]:
    """The copy of a backward pass's depth output back into the caller's dx or dw."""
    if p.direction is Direction.BACKWARD_WEIGHTS:
        return [Step(_depth_filter(p, ty, warp, back=True), ("w", pointer["w"]))]
    if p.direction is Direction.FORWARD:
        return []
    sizes = depth_sizes(p)
    options = (
        f"N={p.x.lengths[0]}", *_x_options(p),
        *(f"{key}={sizes[key]}" for key in ("C2", "D2", "H2", "W2")),
        f"BLOCK={REDUCE_BLOCK}", "num_warps=4", "num_stages=1",
        f"sig.src_ptr=*{ty}", f"sig.dx_ptr=*{ty}",
    )  # fmt: skip
    grid = (-(-p.x.element_count // REDUCE_BLOCK),)
    kernel = _copy_kernel("depth_to_space", options, grid, warp)
    return [Step(kernel, (pointer["x"], "x"))]


def _depth_filter(p: ConvProblem, ty: str, warp: int, *, back: bool = False) -> KernelInfo:
    """``filter_depth``: the filter into its depth form (``back``: from it), one depth
    element a lane."""
    sizes = depth_sizes(p)
    shape = constants(p)
    options = [
        f"BACK={back}",
        *(f"{key}={shape[key]}" for key in ("K", "C", "T", "R", "S", "WK", "WC", "WT", "WR", "WS")),
        *(f"{key}={sizes[key]}" for key in ("FD", "FH", "FW", "C2", "T2", "R2", "S2")),
        f"BLOCK={REDUCE_BLOCK}", "num_warps=4", "num_stages=1",
        f"sig.w_ptr=*{ty}", f"sig.wd_ptr=*{ty}",
    ]  # fmt: skip
    elements = p.w.lengths[0] * sizes["C2"] * sizes["T2"] * sizes["R2"] * sizes["S2"]
    return _copy_kernel("filter_depth", options, (-(-elements // REDUCE_BLOCK),), warp)


def _repack(desc: TensorDescriptor, ty: str, warp: int, *, channels_first: bool) -> KernelInfo:
    """``repack``: ``desc``'s tensor copied into packed channels-last (or channels-first)
    order, a tile of pixels x channels per program."""
    n, c = desc.lengths[:2]
    sn, sc = desc.strides[:2]
    (d, h, w), (sd, sh, sw) = spatial(desc)
    options = (
        f"CHANNELS_FIRST={channels_first}", f"C={c}", f"D={d}", f"H={h}", f"W={w}",
        f"SN={sn}", f"SC={sc}", f"SD={sd}", f"SH={sh}", f"SW={sw}",
        f"BLOCK_P={STAGE_BLOCK[0]}", f"BLOCK_C={STAGE_BLOCK[1]}",
        "num_warps=4", "num_stages=1", f"sig.src_ptr=*{ty}", f"sig.dst_ptr=*{ty}",
    )  # fmt: skip
    grid = (n * -(-(d * h * w) // STAGE_BLOCK[0]), -(-c // STAGE_BLOCK[1]))
    return _copy_kernel("repack", options, grid, warp, COPIES)


def _split_reduce(p: ConvProblem, split: int, ty: str, warp: int) -> KernelInfo:
    """``conv_split_reduce``: a split forward (backward-data) run's partials summed into y
    (dx) in its own strides."""
    out = gemm_output(p)
    (d, h, w), (sd, sh, sw) = spatial(out)
    channels_first = split_partial_strides(p)[4] == 1  # the partials' order is the output's
    options = [f"L_C={out.lengths[1]}", f"L_D={d}", f"L_H={h}", f"L_W={w}"]
    options += [f"S_N={out.strides[0]}", f"S_C={out.strides[1]}"]
    options += [f"S_D={sd}", f"S_H={sh}", f"S_W={sw}"]
    options += [f"SPLITS={split}", f"CHANNELS_FIRST={int(channels_first)}"]
    options += [f"BLOCK={REDUCE_BLOCK}", "num_warps=4", "num_stages=1"]
    options += ["sig.part_ptr=*fp32", f"sig.out_ptr=*{ty}", "sig.M=i32"]
    elements = gemm_rows(p) * out.lengths[1]
    return _copy_kernel("conv_split_reduce", options, (-(-elements // REDUCE_BLOCK),), warp, COPIES)


def _filter_options(shape: dict[str, int]) -> list[str]:
    """The options of an elementwise kernel over the filter (its transposition, the split
    reduction): the filter's sizes and strides, one block of elements per program."""
    names = ("C", "K", "T", "R", "S", "WK", "WC", "WT", "WR", "WS")
    return [f"{n}={shape[n]}" for n in names] + [
        f"BLOCK={REDUCE_BLOCK}",
        "num_warps=4",
        "num_stages=1",
    ]


def invoker_factory(steps: list[Step]) -> Any:
    """The solution's ``invoker_factory``: launch arguments built once, pointers set per
    call."""

    def factory(compiled: Any) -> Any:
        from miocore.backends.gpu_kernels import KernelArgs

        # Triton appends two scratch pointers (global, profile) to the parameters; two more
        # NULL slots cost nothing where a version appends fewer.
        tail = [("ptr", 0)] * 4
        launches = []
        for step, kernel in zip(steps, compiled, strict=True):
            _check_launchable(kernel)
            specs: list[tuple[str, Any]] = [("ptr", 0)] * len(step.pointers)
            if step.rows is not None:
                specs.append(("i32", step.rows))
            args = KernelArgs(specs + tail)
            meta = kernel.meta
            launches.append(
                (kernel, args, step.pointers, (int(meta["threads"]),), int(meta["shared"]))
            )
        uses_workspace = any(isinstance(x, int) for step in steps for x in step.pointers)

        def invoker(handle: Any, ip: InvokeParams) -> None:
            tensors = {"x": ip.x.ptr, "w": ip.w.ptr, "y": ip.y.ptr, "none": 0}
            for name in ("x", "w", "y"):
                if tensors[name] % 16:
                    raise InvalidArgumentError(
                        "Triton kernels need 16-byte aligned tensors",
                        field=f"{name} pointer",
                        value=hex(tensors[name]),
                    )
            base = _aligned_workspace(ip) if uses_workspace else 0
            for kernel, args, pointers, threads, shared in launches:
                args.set_pointers(
                    *(base + x if isinstance(x, int) else tensors[x] for x in pointers)
                )
                kernel.launch(args, block=threads, shared=shared)

        return invoker

    return factory


def _aligned_workspace(ip: InvokeParams) -> int:
    """The workspace's address, refused unless 16-byte aligned (the kernels assume it)."""
    ptr = int(ip.workspace.ptr)
    if ptr % 16:
        raise InvalidArgumentError(
            "Triton kernels need a 16-byte aligned workspace",
            field="workspace pointer",
            value=hex(ptr),
        )
    return ptr


def _check_launchable(kernel: Any) -> None:
    """Refuse a binary whose launch needs more than miocore's launch gives it."""
    meta = kernel.meta
    if meta.get("global_scratch_size") or meta.get("profile_scratch_size"):
        raise InvalidArgumentError(
            "this Triton kernel asks for scratch memory, which miocore's launch does not give",
            field="global_scratch_size",
            value=meta.get("global_scratch_size"),
        )


def _copy_kernel(
    name: str, options: Any, grid: tuple[int, ...], warp: int, source: str = DEPTH
) -> KernelInfo:
    """One of the element-wise kernels around a GEMM (``source``: the depth images' copies,
    or ``COPIES``), four warps a program."""
    return KernelInfo(
        source=source,
        kernel_name=name,
        options=tuple(sorted(options)),
        grid=grid,
        block=(4 * warp,),
    )
