"""Diagnose: every problem TorchScript finds in a model, at the user's line, with what to change.

`driver` scripts the model until every problem has surfaced; `patterns` turns one TorchScript error
into problems with their fixes; `source` reads the user's code (TorchScript's frames, functions, ASTs).
"""

from .driver import diagnose, forget_half_compiled_types, format_problems, script_quietly
from .patterns import GENERIC_ADVICE, Problem

__all__ = ["diagnose", "forget_half_compiled_types", "format_problems", "script_quietly", "GENERIC_ADVICE", "Problem"]
