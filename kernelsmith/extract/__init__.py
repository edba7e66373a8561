"""`kernelsmith extract`: a whole model (KernelBench format) cut into ranked, standalone KernelBench tasks.

- `model.py` (orchestrator, trusted): reads the model file statically (`Task.load`), starts the sandboxed worker,
  validates what it reports, renders and writes the task files and `extract.json`. It never imports the model.
- `worker.py` (the sandboxed child, `python -m kernelsmith.extract.worker DIR`): builds and runs the model,
  traces it (torch.fx, else module hooks), times each node, groups the work into fusable subgraphs, renders each
  as a task and checks it against the model's own intermediates.
- `spec.py` (both sides): a subgraph as structured data, and the one renderer that turns it into Python. The
  child reports data, never code: the orchestrator renders the files itself, so what lands in the user's
  directory is code of our making with literals from the model's run.
"""
