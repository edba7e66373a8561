"""The offline seed generator moved to its own package, `kernelsmith.compiler` (one module per pass); this name
stays for the importers that still use it."""

from kernelsmith.compiler import SeedResult, SeedUnsupported, generate_seed, seed_for_task

__all__ = ["SeedResult", "SeedUnsupported", "generate_seed", "seed_for_task"]
