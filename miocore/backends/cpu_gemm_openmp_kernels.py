"""The compiled code behind :mod:`miocore.backends.cpu_gemm_openmp` (imports numba: load it only
through that module).

Two C functions made with numba's ``cfunc``: OpenBLAS calls :func:`run_openblas_jobs` with a
product's jobs; it starts one OpenMP team of exactly that many threads (``GOMP_parallel``), and
each member (:func:`team_member`) runs the job of its thread number. Every outside function is
reached through a symbol name that the loader registers with llvmlite before compiling
(:data:`SYMBOLS`), never through a Python object, so numba caches both on disk.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

#: Symbols the compiled code calls, registered by the loader (``llvmlite.binding.add_symbol``):
#: libgomp's ``GOMP_parallel`` and ``omp_get_thread_num`` (the library numba and PyTorch run
#: on) and the address of the compiled :func:`team_member`.
SYMBOLS = ("miocore_gomp_parallel", "miocore_omp_get_thread_num", "miocore_openblas_team_member")

#: Fields of the record a team reads: the job function, job count, bytes per job, first job's
#: address, and the job function's last argument.
_FIELDS = 5

_I32, _I64 = ir.IntType(32), ir.IntType(64)
_BYTES = ir.IntType(8).as_pointer()


def _external(builder: Any, name: str, result: Any, arguments: list[Any]) -> Any:
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(result, arguments), name)


@intrinsic
def _record(typingctx: Any, dojob: Any, count: Any, size: Any, data: Any, arg: Any) -> Any:
    """The five job fields in a stack record; its address as an int64."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        record = cgutils.alloca_once(builder, _I64, size=ir.Constant(_I64, _FIELDS))
        for index, value in enumerate(args):
            builder.store(value, builder.gep(record, [ir.Constant(_I64, index)]))
        return builder.ptrtoint(record, _I64)

    return types.int64(types.int64, types.int64, types.int64, types.int64, types.int64), codegen


@intrinsic
def _field(typingctx: Any, record: Any, index: Any) -> Any:
    """Field ``index`` of a record made by :func:`_record`."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        base = builder.inttoptr(args[0], _I64.as_pointer())
        return builder.load(builder.gep(base, [args[1]]))

    return types.int64(types.int64, types.int64), codegen


@intrinsic
def _thread_number(typingctx: Any) -> Any:
    """``omp_get_thread_num()`` of the calling team member."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.call(_external(builder, SYMBOLS[1], _I32, []), [])

    return types.int32(), codegen


@intrinsic
def _call_job(typingctx: Any, fn: Any, job: Any, data: Any, arg: Any) -> Any:
    """``((void (*)(int, void *, int)) fn)(job, data, arg)``."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        fnty = ir.FunctionType(ir.VoidType(), [_I32, _BYTES, _I32])
        target = builder.inttoptr(args[0], fnty.as_pointer())
        job_, data_ = builder.trunc(args[1], _I32), builder.inttoptr(args[2], _BYTES)
        builder.call(target, [job_, data_, builder.trunc(args[3], _I32)])
        return context.get_dummy_value()

    return types.void(types.int64, types.int64, types.int64, types.int64), codegen


@intrinsic
def _parallel(typingctx: Any, record: Any, count: Any) -> Any:
    """``GOMP_parallel(team_member, record, count, 0)``: a team of exactly ``count`` threads,
    the calling one included, each running :func:`team_member` on the record; returns when
    all are done."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        member = _external(builder, SYMBOLS[2], ir.VoidType(), [_BYTES])
        start = _external(builder, SYMBOLS[0], ir.VoidType(), [member.type, _BYTES, _I32, _I32])
        team = builder.trunc(args[1], _I32)
        builder.call(start, [member, builder.inttoptr(args[0], _BYTES), team, ir.Constant(_I32, 0)])
        return context.get_dummy_value()

    return types.void(types.int64, types.int64), codegen


@njit(parallel=True, cache=True, nogil=True)
def bind_runtime(out: np.ndarray) -> None:
    """One small parallel region of numba's own: its calls into OpenMP bind to a runtime now
    (the dynamic linker binds each on its first call), before the teams' runtime is chosen."""
    for i in prange(out.size):
        out[i] = i


def team_member(record: int) -> None:
    """One OpenMP thread's share: the job whose number is its thread number."""
    job = _thread_number()
    if job < _field(record, 1):
        size, data = _field(record, 2), _field(record, 3)
        _call_job(_field(record, 0), job, data + job * size, _field(record, 4))


def run_openblas_jobs(sync: int, dojob: int, count: int, size: int, data: int, arg: int) -> None:
    """OpenBLAS's threads callback: all ``count`` jobs at once, one per team member (a
    product's jobs wait on each other, so a smaller team would never finish)."""
    if count == 1:
        _call_job(dojob, 0, data, arg)
    elif count > 1:
        _parallel(_record(dojob, count, size, data, arg), count)
