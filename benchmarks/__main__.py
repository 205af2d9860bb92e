"""`python -m benchmarks` (from the repository root): the cpuify benchmark suite.

Runs every workload of benchmarks/suite/workloads/ through cpuify and its peers (C+OpenMP on
all cores and on one thread, OpenCL on PoCL, the numba CUDA simulator), checks each result
against NumPy and prints a table; see benchmarks/README.md.  `python benchmarks/core.py` is
the separate benchmark of cpuify's core figures."""

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
if (_ROOT / "src" / "cpuify").is_dir():          # measure this checkout, not an installed copy
    sys.path.insert(0, str(_ROOT / "src"))
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from benchmarks.suite.harness import main  # noqa: E402

sys.exit(main())
