"""Direct convolution solvers for miocore.

* :class:`NaiveDirectSolver` (``direct.naive``): every consistent problem, no workspace,
  bounded scratch; the universal last resort.
* :class:`DepthwiseDirectSolver` (``direct.depthwise``): groups == channels; compiled (numba)
  kernels vectorised over channels (NHWC) or image rows (NCHW), every direction.
* :class:`GroupedDirectSolver` (``direct.grouped``): narrow groups (ResNeXt); one compiled
  loop vectorised over the groups.
* :class:`TapsDirectSolver` (``direct.taps``): small filters; one BLAS call (or one vectorised
  multiply-add for depthwise layers) per filter tap on a phase-split, padded float32 copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from miocore import lazy_exports

if TYPE_CHECKING:
    from miocore_direct.depthwise import DepthwiseDirectSolver
    from miocore_direct.grouped import GroupedDirectSolver
    from miocore_direct.naive import NaiveDirectSolver
    from miocore_direct.taps import TapsDirectSolver

#: Public name -> the module that defines it. The names load on first access (PEP 562):
#: importing the package, as the plugin scan does, imports none of its solver modules.
_EXPORTS = {
    "DepthwiseDirectSolver": "miocore_direct.depthwise",
    "GroupedDirectSolver": "miocore_direct.grouped",
    "NaiveDirectSolver": "miocore_direct.naive",
    "TapsDirectSolver": "miocore_direct.taps",
}

__all__ = ["DepthwiseDirectSolver", "GroupedDirectSolver", "NaiveDirectSolver", "TapsDirectSolver"]


__getattr__ = lazy_exports(__name__, _EXPORTS)
