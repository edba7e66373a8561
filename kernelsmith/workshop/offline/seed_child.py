"""`python -m kernelsmith.workshop.offline.seed_child WORK_DIR`: the sandboxed seed job, now
`kernelsmith.compiler.child` (this name stays because the offline proposer runs it)."""

from __future__ import annotations

import sys
from pathlib import Path

from kernelsmith.compiler.child import main

if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
