"""`kernelsmith optimize`: a whole model made faster part by part, and judged whole.

- `run.py` (orchestrator, trusted): extract (sandboxed) into DIR/extract, evolve the top parts in parallel through
  one pool (each an ordinary resumable run under DIR/parts), assemble `optimized.py`, have it checked and timed
  (sandboxed) and judged by the referee, write the report. It never imports the model or a program.
- `assemble.py` (text from data): the model's traced graph (extract's `graph.json`) rendered as
  `ModelNew(Model).forward` with a block per part; the winners' programs renamed into one module.
- `worker.py` (the sandboxed child): builds the assembled model, checks each part swapped in alone against the
  model, and times every part's block before and after.
"""

from kernelsmith.optimize.run import OptimizeError, OptimizeOptions, optimize

__all__ = ["OptimizeError", "OptimizeOptions", "optimize"]
