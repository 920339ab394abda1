"""miocore-cudnn: cuDNN's convolution engines (through NVIDIA's cuDNN frontend) as miocore
solvers, ``cudnn.eng0`` .. ``cudnn.eng99``. Importing this package never imports ``cudnn``.

The names below load on first access (PEP 562): importing the package, as the plugin scan
does, imports none of its solver modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from miocore import lazy_exports

if TYPE_CHECKING:
    from miocore_cudnn.solvers import MAX_ENGINE_ID, SOLVERS, CudnnEngineSolver, engine_solver

#: Public name -> the module that defines it.
_EXPORTS = {
    "MAX_ENGINE_ID": "miocore_cudnn.solvers",
    "SOLVERS": "miocore_cudnn.solvers",
    "CudnnEngineSolver": "miocore_cudnn.solvers",
    "engine_solver": "miocore_cudnn.solvers",
}

__all__ = ["MAX_ENGINE_ID", "SOLVERS", "CudnnEngineSolver", "engine_solver"]


__getattr__ = lazy_exports(__name__, _EXPORTS)
