"""find's accuracy check on the device: the float64 reference of a slice of the output, and
one comparison per candidate that returns three numbers.

On the host, the check costs each find a float64 numpy reference (10 ms to 1 s: a first layer's
backward data or a backward weights reduction over the whole batch) and every candidate a copy
of its output slice. :class:`DeviceReference` computes the same slice with the core's
``miocore_reference.cu`` (one thread per element, products summed in double) into device
memory once, and :meth:`DeviceReference.compare` reduces ``max |out - ref|``, ``max |ref|``
and the NaN flags on the device, so a candidate's check is one launch and a 24-byte copy.
The slice is the one :mod:`miocore.find.accuracy` chooses (first images or output channels,
first channels), in the same logical order as the numpy reference.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from miocore.backends._gpu.arrays import DeviceTensor, GpuArray
from miocore.backends._gpu.compiler import CORE_NAMESPACE, DTYPE_OPTIONS
from miocore.backends._gpu.launch import KernelArgs, grid_for, tensor5_bytes
from miocore.problem.conv import ConvProblem, Direction
from miocore.solver.interface import KernelInfo

if TYPE_CHECKING:
    from miocore.backends._gpu.base import GpuBackend

_SOURCE = f"{CORE_NAMESPACE}/miocore_reference.cu"
_KERNELS = {
    Direction.FORWARD: ("miocore_ref_forward", ("x", "w")),
    Direction.BACKWARD_DATA: ("miocore_ref_backward_data", ("y", "w")),
    Direction.BACKWARD_WEIGHTS: ("miocore_ref_backward_weights", ("x", "y")),
}
_BLOCK = 256
#: Blocks of the comparison: enough to fill the device, few enough that one atomic per block
#: stays cheap.
_COMPARE_WAVES = 4


def _three(values: tuple[int, ...], fill: int) -> list[int]:
    """(D, H, W) values of a 2-D or 3-D problem (a 2-D one gets ``fill`` for D)."""
    return [fill] * (3 - len(values)) + list(values)


def _geometry(problem: ConvProblem) -> bytes:
    """``MioConvGeom``: pads, strides, dilations in (D, H, W) order, then groups."""
    import numpy as np

    conv = problem.conv
    fields = [
        *_three(conv.pads, 0),
        *_three(conv.strides, 1),
        *_three(conv.dilations, 1),
        problem.groups,
    ]
    return np.array(fields, dtype=np.int32).tobytes()


def slice_lengths(problem: ConvProblem, images: int, channels: int) -> tuple[int, ...]:
    """The compared slice's (N, C, D, H, W) lengths: the first ``images`` (output channels,
    backward weights) and ``channels`` of the direction's output."""
    d = problem.direction
    if d is Direction.FORWARD:
        spatial = problem.out_spatial
    elif d is Direction.BACKWARD_DATA:
        spatial = problem.in_spatial
    else:
        spatial = problem.filter_spatial
        images, channels = channels, problem.c // problem.groups
    return (images, channels, *_three(tuple(spatial), 1))


def _slice_bytes(lengths: tuple[int, ...]) -> bytes:
    """``MioTensor5`` of the slice: its lengths (the strides are not read)."""
    import numpy as np

    return np.array([*lengths, 0, 0, 0, 0, 0], dtype=np.int64).tobytes()


class DeviceReference:
    """The reference of one find's compared slice, on the device (module docstring).

    ``arrays`` are the find's canonical device tensors (``x``, ``w``, ``y``); ``images`` and
    ``channels`` the slice :func:`miocore.find.verify._reduced_selection` chose.
    """

    def __init__(
        self,
        backend: GpuBackend,
        problem: ConvProblem,
        arrays: dict[str, Any],
        images: int,
        channels: int,
    ) -> None:
        import numpy as np

        self.backend = backend
        self.problem = problem
        self.lengths = slice_lengths(problem, images, channels)
        three_d = len(problem.filter_spatial) == 3
        self.shape = self.lengths if three_d else self.lengths[:2] + self.lengths[3:]
        self.count = math.prod(self.lengths)
        name, inputs = _KERNELS[problem.direction]
        option = DTYPE_OPTIONS[problem.dtype]
        info = [
            KernelInfo(source=_SOURCE, kernel_name=kernel, options=(option,), block=(_BLOCK,))
            for kernel in (name, "miocore_ref_compare")
        ]
        reference_kernel, self._compare_kernel = backend.compile(info)
        self._views = {n: self._view(n, arrays[n]) for n in ("x", "w", "y")}
        self._reference = GpuArray(backend, max(8, self.count * 8), None)
        self._result = GpuArray(backend, 24, None)
        self._host_result = np.zeros(3, dtype=np.uint64)
        first, second = inputs
        args = KernelArgs(
            [
                ("ptr", self._reference.ptr),
                ("bytes", _slice_bytes(self.lengths)),
                ("ptr", self._views[first].ptr),
                ("bytes", tensor5_bytes(getattr(problem, first))),
                ("ptr", self._views[second].ptr),
                ("bytes", tensor5_bytes(getattr(problem, second))),
                ("bytes", _geometry(problem)),
            ]
        )
        if self.count:
            reference_kernel.launch(args, grid=(grid_for(self.count, _BLOCK, backend.device),))
        out = problem.direction.output_tensor
        self._compare_args = KernelArgs(
            [
                ("ptr", self._result.ptr),
                ("ptr", self._reference.ptr),
                ("bytes", _slice_bytes(self.lengths)),
                ("ptr", self._views[out].ptr),
                ("bytes", tensor5_bytes(getattr(problem, out))),
            ]
        )

    def _view(self, name: str, array: Any) -> Any:
        if isinstance(array, (GpuArray, DeviceTensor)):
            return array
        return self.backend.check_array(getattr(self.problem, name), array, name)

    def compare(self) -> tuple[float, float, bool, bool]:
        """(max |out - ref|, max |ref|, whether the output has a NaN or infinity where the
        reference is a number, whether the reference has a NaN), for the output buffer as the
        last candidate left it."""
        import numpy as np

        backend = self.backend
        driver, stream = backend.driver, backend.stream_object
        driver.memset(self._result.ptr, 24, stream)
        if self.count:
            blocks = max(1, backend.device.compute_units) * _COMPARE_WAVES
            blocks = min(blocks, -(-self.count // _BLOCK))
            self._compare_kernel.launch(self._compare_args, grid=(blocks,))
        driver.copy_dtoh(self._host_result, self._result.ptr, stream)
        driver.synchronize(stream)
        diff, scale = self._host_result[:2].view(np.float64)
        flags = int(self._host_result[2])
        return float(diff), float(scale), bool(flags & 1), bool(flags & 2)

    def values(self) -> Any:
        """The reference slice on the host (float64, logical order): for tests."""
        import numpy as np

        flat = np.empty(self.count, dtype=np.float64)
        self.backend.driver.copy_dtoh(flat, self._reference.ptr, self.backend.stream_object)
        self.backend.driver.synchronize(self.backend.stream_object)
        return flat.reshape(self.shape)
