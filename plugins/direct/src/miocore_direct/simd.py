"""Explicit float32 vector operations for numba kernels, written as LLVM IR intrinsics.

numba exposes no vector types, and LLVM does not vectorise a grouped convolution's
broadcast-and-multiply-add from plain loops (docs/performance-cpu-grouped.md). These
intrinsics carry an LLVM ``<V x float>`` through numba as a value of :class:`VectorType`, so
register-blocked kernels keep their accumulators in vector registers (plain SSA values after
LLVM's mem2reg). Only generic LLVM vector IR and ``llvm.fma`` are emitted, which lower on
every target (AVX-512, AVX2, NEON, or scalar code where there is no vector unit).

Arrays are addressed by a flat element offset into their data (no bounds checks, no strides):
callers pass C-contiguous float32 arrays and compute offsets themselves.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.datamodel import models
from numba.extending import intrinsic, register_model

#: Bumped with any change to the code these intrinsics emit: numba's disk cache keys a kernel
#: on its own module only, so generated kernels name it in their source (a new file, a new
#: cache entry) and :mod:`miocore_direct.grouped_transpose` must be edited alike.
REVISION = 1


class VectorType(types.Type):
    """A numba type for ``lanes`` float32 values held as one LLVM vector."""

    def __init__(self, lanes: int) -> None:
        self.lanes = lanes
        super().__init__(name=f"float32x{lanes}")


@register_model(VectorType)
class _VectorModel(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: VectorType) -> None:
        super().__init__(dmm, fe_type, ir.VectorType(ir.FloatType(), fe_type.lanes))


def _pointer(context: Any, builder: Any, aty: Any, array: Any, offset: Any) -> Any:
    """Address of element ``offset`` of a contiguous array (no bounds check)."""
    data = context.make_array(aty)(context, builder, array).data
    return builder.gep(data, [offset], inbounds=True)


def _splat(builder: Any, vt: ir.VectorType, scalar: Any) -> Any:
    """``scalar`` in every lane (LLVM turns a broadcast load into one instruction)."""
    one = builder.insert_element(
        ir.Constant(vt, ir.Undefined), scalar, ir.Constant(ir.IntType(32), 0)
    )
    mask = ir.Constant(ir.VectorType(ir.IntType(32), vt.count), [0] * vt.count)
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined), mask)


def _fma(builder: Any, vt: ir.VectorType, a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` fused, lane by lane."""
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vt, [vt, vt, vt]), f"llvm.fma.v{vt.count}f32"
    )
    return builder.call(fn, [a, b, c])


@functools.cache
def ops(lanes: int) -> SimpleNamespace:
    """The intrinsics of ``lanes``-wide vectors (one set per width, so each is typed once):

    - ``zero()``: a vector of zeros;
    - ``load(a, i)``: ``a[i : i + lanes]``; ``store(a, i, v)``: ``a[i : i + lanes] = v``;
    - ``add(u, v)``: ``u + v``;
    - ``fma_bcast(acc, a, i, w)``: ``acc + a[i] * w`` (``a[i]`` in every lane);
    - ``splat(a, i)``: ``a[i]`` in every lane, as a value that several multiply-adds can share
      (one broadcast load, kept in a register where it has more than one use);
    - ``fma(u, v, acc)``: ``u * v + acc`` fused, lane by lane;
    - ``fma_lane(width, part)`` (a factory): ``f(acc, a, i, w) = acc + s * w`` where lane ``l``
      of ``s`` is ``a[i + (l // width) * width + part]``: the ``part``-th channel of each lane's
      group of ``width`` channels, from one vector load and a constant shuffle.
    """
    vt = ir.VectorType(ir.FloatType(), lanes)
    vec = VectorType(lanes)

    @intrinsic
    def zero(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return ir.Constant(vt, [0.0] * lanes)

        return vec(), codegen

    @intrinsic
    def load(typingctx: Any, a: Any, i: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            ptr = builder.bitcast(_pointer(context, builder, sig.args[0], *args), vt.as_pointer())
            return builder.load(ptr, align=4)

        return vec(a, types.intp), codegen

    @intrinsic
    def store(typingctx: Any, a: Any, i: Any, v: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            ptr = _pointer(context, builder, sig.args[0], args[0], args[1])
            builder.store(args[2], builder.bitcast(ptr, vt.as_pointer()), align=4)
            return context.get_dummy_value()

        return types.void(a, types.intp, vec), codegen

    @intrinsic
    def add(typingctx: Any, u: Any, v: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.fadd(*args)

        return vec(vec, vec), codegen

    @intrinsic
    def fma_bcast(typingctx: Any, acc: Any, a: Any, i: Any, w: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            acc_v, array, index, weights = args
            scalar = builder.load(_pointer(context, builder, sig.args[1], array, index))
            return _fma(builder, vt, _splat(builder, vt, scalar), weights, acc_v)

        return vec(vec, a, types.intp, vec), codegen

    @intrinsic
    def splat(typingctx: Any, a: Any, i: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            scalar = builder.load(_pointer(context, builder, sig.args[0], *args))
            return _splat(builder, vt, scalar)

        return vec(a, types.intp), codegen

    @intrinsic
    def fma(typingctx: Any, u: Any, v: Any, acc: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return _fma(builder, vt, *args)

        return vec(vec, vec, vec), codegen

    return SimpleNamespace(
        vec=vec,
        zero=zero,
        load=load,
        store=store,
        add=add,
        fma_bcast=fma_bcast,
        splat=splat,
        fma=fma,
        fma_lane=functools.cache(functools.partial(_fma_lane, lanes)),
    )


def _fma_lane(lanes: int, width: int, part: int) -> Any:
    """See :func:`ops`: ``fma_lane(width, part)`` for ``lanes``-wide vectors."""
    vt = ir.VectorType(ir.FloatType(), lanes)
    vec = ops(lanes).vec
    mask = [(lane // width) * width + part for lane in range(lanes)]

    @intrinsic
    def fma_lane(typingctx: Any, acc: Any, a: Any, i: Any, w: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            acc_v, array, index, weights = args
            ptr = _pointer(context, builder, sig.args[1], array, index)
            src = builder.load(builder.bitcast(ptr, vt.as_pointer()), align=4)
            picked = builder.shuffle_vector(
                src,
                ir.Constant(vt, ir.Undefined),
                ir.Constant(ir.VectorType(ir.IntType(32), lanes), mask),
            )
            return _fma(builder, vt, picked, weights, acc_v)

        return vec(vec, a, types.intp, vec), codegen

    return fma_lane


@functools.cache
def transpose_block(lanes: int) -> Any:
    """``f(src, s, s_step, dst, d, d_step)``: ``dst[d + q*d_step + r] = src[s + r*s_step + q]``
    for ``r, q < lanes``, i.e. a ``lanes x lanes`` block transposed in registers: ``lanes``
    vector loads, ``lanes * log2(lanes)`` two-vector shuffles (each stage swaps the
    off-diagonal sub-blocks of one size), ``lanes`` vector stores. ``lanes``: a power of 2."""
    vt = ir.VectorType(ir.FloatType(), lanes)
    mask_type = ir.VectorType(ir.IntType(32), lanes)

    @intrinsic
    def transpose(
        typingctx: Any, src: Any, s: Any, s_step: Any, dst: Any, d: Any, d_step: Any
    ) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            src_a, s_off, s_inc, dst_a, d_off, d_inc = args
            rows = []
            for r in range(lanes):
                off = builder.add(s_off, builder.mul(s_inc, ir.Constant(s_inc.type, r)))
                ptr = _pointer(context, builder, sig.args[0], src_a, off)
                rows.append(builder.load(builder.bitcast(ptr, vt.as_pointer()), align=4))
            size = lanes // 2
            while size:  # rows i (bit clear) and i | size swap their off-diagonal blocks
                for i in range(lanes):
                    if i & size:
                        continue
                    j = i | size
                    # lane k of the first operand is index k, of the second lanes + k
                    low = [k if not k & size else lanes + (k ^ size) for k in range(lanes)]
                    high = [(k ^ size) if not k & size else lanes + k for k in range(lanes)]
                    a, b = rows[i], rows[j]
                    rows[i] = builder.shuffle_vector(a, b, ir.Constant(mask_type, low))
                    rows[j] = builder.shuffle_vector(a, b, ir.Constant(mask_type, high))
                size //= 2
            for q in range(lanes):
                off = builder.add(d_off, builder.mul(d_inc, ir.Constant(d_inc.type, q)))
                ptr = _pointer(context, builder, sig.args[3], dst_a, off)
                builder.store(rows[q], builder.bitcast(ptr, vt.as_pointer()), align=4)
            return context.get_dummy_value()

        sig = types.void(src, types.intp, types.intp, dst, types.intp, types.intp)
        return sig, codegen

    return transpose
