"""cpuify: CUDA kernels and programs on multi-core CPUs, compiled from PTX to native code."""

__version__ = "0.1.0"

from cpuify.errors import (  # noqa: E402
    ArgumentError, ArgumentOverflowError, ArgumentValueError, CompileError, CompileException,
    CpuifyError, CUDADriverError, DeadlockError, IllegalAddressError, IRError, KernelFailure, LaunchError,
    LaunchConfigError, LaunchTimeoutError, ModuleFileNotFoundError,
    PTXError, SymbolNotFoundError, UnsupportedError,
)


def __getattr__(name: str):  # lazy: importing cpuify must stay cheap
    if name in ("RawModule", "RawKernel", "Function"):
        from cpuify.api import module
        return getattr(module, name)
    if name in ("ElementwiseKernel", "ReductionKernel"):
        from cpuify.api import elementwise
        return getattr(elementwise, name)
    if name in ("TextureObject", "SurfaceObject"):
        from cpuify.api import texture
        return getattr(texture, name)
    if name in ("num_threads", "set_num_threads", "stack_limit", "set_stack_limit"):
        from cpuify.runtime import native
        return getattr(native, name)
    raise AttributeError(f"module 'cpuify' has no attribute {name!r}")


__all__ = ["RawModule", "RawKernel", "Function", "ElementwiseKernel", "ReductionKernel",
           "TextureObject", "SurfaceObject", "CompileError", "CompileException", "CpuifyError",
           "CUDADriverError", "SymbolNotFoundError", "ModuleFileNotFoundError", "KernelFailure",
           "IllegalAddressError", "LaunchTimeoutError", "DeadlockError",
           "ArgumentError", "ArgumentValueError", "ArgumentOverflowError", "LaunchConfigError", "IRError",
           "LaunchError", "PTXError", "UnsupportedError", "__version__"]


def _join_mpi_run() -> None:
    """Under `mpiexec -n N python script.py` (N > 1): rank 0 goes on with the script, its
    launches spread over the ranks; the other ranks serve kernel partitions here and leave
    the process when rank 0 ends (docs/distributed.md).  Not for the cpuify command line,
    whose `run` starts a distributed program itself."""
    import os
    import sys
    if not any(os.environ.get(v) for v in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE",
                                           "CPUIFY_DISTRIBUTED")):
        return
    if os.environ.get("CPUIFY_DIST_FRONT") == "native":
        return      # a program built with --distributed: runtime/dist_main.c starts the engine
    argv0 = os.path.basename(sys.argv[0]) if sys.argv else ""
    if argv0 == "cpuify" or sys.argv[0:1] == ["-m"] or \
            os.path.normpath(sys.argv[0] if sys.argv else "").endswith(os.path.join("cli", "main.py")):
        return
    from cpuify.distributed import engine
    world = engine.mpi_world()
    if world is None:
        return
    eng = engine.start()
    from cpuify.distributed import api_front
    if eng.rank == 0:
        api_front.install(eng)
        return
    try:
        eng.serve(api_front.resolve)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    # not the rest of the script: a normal exit (MPI finalized by mpi4py at exit; an
    # explicit finalize and os._exit here lose rank 0's exit status in MPICH's mpiexec)
    raise SystemExit(0)


_join_mpi_run()
