"""`kernelsmith export`: a run's best program as a drop-in package that needs only torch and triton.

The recorded code is data here: it is written to files and parsed, never executed in this process; the
package's own pytest file is the real check (it runs the kernels against the task's reference).
"""

from kernelsmith.export.package import ExportError, ExportSource, export, source_from_run, write_package

__all__ = ["ExportError", "ExportSource", "export", "source_from_run", "write_package"]
