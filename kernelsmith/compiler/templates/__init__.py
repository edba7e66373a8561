"""Triton text templates of the offline compiler: per-op expressions and the three fused kernel shapes
(`elementwise`, `reduction`, `matmul_epilogue`), plus the library kernels of operators the fuser cannot express
(`conv`, `pool`, `norm`: see `kernelsmith.compiler.library`). Everything here returns source text.
"""

from kernelsmith.compiler.templates.common import (
    _TL_DTYPES,
    IMPORTS,
    JIT_HELPERS,
    PY_HELPERS,
    literal,
    load,
    store,
)
from kernelsmith.compiler.templates.elementwise import ELEMENTWISE, EW_OPS, elementwise_kernel, ew_expr
from kernelsmith.compiler.templates.matmul import MATMUL, matmul_kernel
from kernelsmith.compiler.templates.reduction import REDUCTION, full_index, reduction_kernel

__all__ = ["ELEMENTWISE", "EW_OPS", "IMPORTS", "JIT_HELPERS", "MATMUL", "PY_HELPERS", "REDUCTION", "_TL_DTYPES",
           "elementwise_kernel", "ew_expr", "full_index", "literal", "load", "matmul_kernel", "reduction_kernel",
           "store"]
