"""cpuify: CUDA kernels and programs on multi-core CPUs, compiled from PTX to native code."""

__version__ = "0.1.0"

from cpuify.errors import (  # noqa: E402
    ArgumentError, ArgumentOverflowError, ArgumentValueError, CompileError, CompileException,
    CpuifyError, CUDADriverError, DeadlockError, IllegalAddressError, IRError, KernelFailure, LaunchError,
    LaunchTimeoutError, ModuleFileNotFoundError,
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
    if name in ("num_threads", "set_num_threads"):
        from cpuify.runtime import native
        return getattr(native, name)
    raise AttributeError(f"module 'cpuify' has no attribute {name!r}")


__all__ = ["RawModule", "RawKernel", "Function", "ElementwiseKernel", "ReductionKernel",
           "TextureObject", "SurfaceObject", "CompileError", "CompileException", "CpuifyError",
           "CUDADriverError", "SymbolNotFoundError", "ModuleFileNotFoundError", "KernelFailure",
           "IllegalAddressError", "LaunchTimeoutError", "DeadlockError",
           "ArgumentError", "ArgumentValueError", "ArgumentOverflowError", "IRError",
           "LaunchError", "PTXError", "UnsupportedError", "__version__"]
