"""The seed's Triton text templates moved to `kernelsmith.compiler.templates`; this name stays as an alias."""

from kernelsmith.compiler.templates import *  # noqa: F403
from kernelsmith.compiler.templates import __all__  # noqa: F401
