"""kernelsmith: evolve faster, verified Triton kernels (referee, workshop, coach)."""

__version__ = "0.1.0"
