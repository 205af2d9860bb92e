"""cpuify benchmarks (a regular package, so that an installed `benchmarks` package of another
project, e.g. xdsl's, cannot shadow it)."""
