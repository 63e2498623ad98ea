"""The two hosts synthesized from one Program: compiled into the vmfb (`main`) and generated Python."""

from .compiled import CompiledHostUnsupported, attach_main, name_module, remove_main, synthesize_compiled
from .python import synthesize_python

__all__ = [
    "CompiledHostUnsupported",
    "attach_main",
    "name_module",
    "remove_main",
    "synthesize_compiled",
    "synthesize_python",
]
