"""cpuify benchmark suite: CUDA workloads run through cpuify against C+OpenMP twins, OpenCL
twins on PoCL and (for a few) numba's CUDA simulator, each checked against NumPy.

Run `python -m benchmarks` from the repository root; see benchmarks/README.md.  The workload
interface is `benchmarks.suite.workload.Workload`; workloads live in
`benchmarks/suite/workloads/*.py` and define `WORKLOAD = SomeWorkload()`."""

from benchmarks.suite.workload import Workload, default_check

__all__ = ["Workload", "default_check"]
