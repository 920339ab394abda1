"""miocore-cudnn: cuDNN's convolution engines (through NVIDIA's cuDNN frontend) as miocore
solvers, ``cudnn.eng0`` .. ``cudnn.eng99``. Importing this package never imports ``cudnn``."""

from __future__ import annotations

from miocore_cudnn.solvers import MAX_ENGINE_ID, SOLVERS, CudnnEngineSolver, engine_solver

__all__ = ["MAX_ENGINE_ID", "SOLVERS", "CudnnEngineSolver", "engine_solver"]
