"""Specialize: type a frozen TorchScript graph by the example inputs and fold all it decides.

`visitor` walks the graph (one method per TorchScript construct); `values` holds what it knows of
each value and the types; `schemas` finds the torch.ops overload of a node; `aliasing` finds
in-place mutation.
"""

from .values import input_types
from .visitor import specialize

__all__ = ["specialize", "input_types"]
