"""The problem model: data types, tensor and convolution descriptors, and ``ConvProblem``.

Values only: frozen, validated at construction, with MIOpen's FindDb key; ``arrays`` reads a
problem's descriptors off numpy arrays and torch tensors (torch is recognised by its type's
module, never imported). This room imports nothing of miocore but ``miocore.errors``.
"""

from miocore.problem.conv import ConvProblem, Direction
from miocore.problem.descriptors import LAYOUTS, ConvolutionDescriptor, TensorDescriptor
from miocore.problem.dtypes import DataType

__all__ = [
    "LAYOUTS",
    "ConvProblem",
    "ConvolutionDescriptor",
    "DataType",
    "Direction",
    "TensorDescriptor",
]
