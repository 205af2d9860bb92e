"""Analyses of the parallel IR.  They read IR only (never PTX, never code generation) and
are what the passes in `cpuify.transforms` and the code generator consult."""
