"""Exceptions raised by cpuify.  Every message names what the user wrote (file, kernel,
PTX line) and what to do about it."""

from __future__ import annotations


class CpuifyError(Exception):
    """Base class of all errors cpuify raises on purpose."""


class CompileError(CpuifyError):
    """CUDA C++ did not compile (NVRTC diagnostics are in the message verbatim)."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class PTXError(CpuifyError):
    """PTX text that cpuify cannot parse or does not implement.

    `line` is the 1-based line in the PTX text, `kernel` the entry/function name."""

    def __init__(self, message: str, *, line: int | None = None, kernel: str | None = None,
                 source_line: str | None = None) -> None:
        where = []
        if kernel:
            where.append(f"kernel '{kernel}'")
        if line is not None:
            where.append(f"PTX line {line}")
        text = message
        if where:
            text = f"{', '.join(where)}: {message}"
        if source_line:
            text += f"\n    {source_line.strip()}"
        super().__init__(text)
        self.line = line
        self.kernel = kernel
        self.bare_message = message


class UnsupportedError(PTXError):
    """A PTX instruction, modifier or directive that cpuify refuses on purpose."""


class IRError(CpuifyError):
    """The IR failed verification or could not be parsed."""


class LaunchError(CpuifyError, RuntimeError):
    """A kernel launch was refused (bad configuration) or failed while running."""


# CUDA driver status codes cpuify reports, with the driver's names and descriptions (what
# cuGetErrorName/cuGetErrorString say), so that code written against CuPy's
# `cupy.cuda.driver.CUDADriverError` can test for them
DRIVER_STATUS: dict[int, tuple[str, str]] = {
    1: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"),
    2: ("CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
    101: ("CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"),
    200: ("CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"),
    209: ("CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"),
    218: ("CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"),
    301: ("CUDA_ERROR_FILE_NOT_FOUND", "file not found"),
    400: ("CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"),
    500: ("CUDA_ERROR_NOT_FOUND", "named symbol not found"),
    700: ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"),
    701: ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"),
    702: ("CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"),
    710: ("CUDA_ERROR_ASSERT", "device-side assert triggered"),
    715: ("CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"),
    719: ("CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"),
    720: ("CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"),
    801: ("CUDA_ERROR_NOT_SUPPORTED", "operation not supported"),
}


class CUDADriverError(CpuifyError, RuntimeError):
    """What CuPy's `cupy.cuda.driver.CUDADriverError` is: a CUDA driver call failed.

    `status` is the driver's status code (500 for CUDA_ERROR_NOT_FOUND, ...), `name` its
    name; the message is `NAME: description: detail`, the detail saying what cpuify was
    asked (the kernel, the file) and what to do."""

    def __init__(self, status: int, detail: str = "") -> None:
        self.status = int(status)
        self.name, self.description = DRIVER_STATUS.get(
            self.status, (f"CUDA_ERROR_{self.status}", "unknown error"))
        self.detail = detail
        text = f"{self.name}: {self.description}"
        self._text = f"{text}: {detail}" if detail else text
        super().__init__(self._text)

    def __str__(self) -> str:
        return self._text

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.status, self.detail))


class SymbolNotFoundError(CUDADriverError, LookupError):
    """`get_function`/`get_global` with a name the module does not define
    (CUDA_ERROR_NOT_FOUND; also a `LookupError`, as before)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(500, detail)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.detail,))


class ModuleFileNotFoundError(CUDADriverError, FileNotFoundError):
    """`RawModule(path=...)` of a file that does not exist (CUDA_ERROR_FILE_NOT_FOUND; also
    a `FileNotFoundError`, as before)."""

    def __init__(self, path: str) -> None:
        CUDADriverError.__init__(self, 301, f"{path}: no such file")
        self.filename = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.filename,))


class KernelFailure(LaunchError, CUDADriverError):
    """A kernel failed while running (trap, failed device assert, a barrier not reached by
    the whole block, ...): a `LaunchError` and a `CUDADriverError` with the status a GPU
    reports for it.  `kernel` names the kernel."""

    def __init__(self, status: int, detail: str = "", kernel: str | None = None) -> None:
        CUDADriverError.__init__(self, status, detail)
        self.kernel = kernel

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.status, self.detail, self.kernel))


class IllegalAddressError(KernelFailure):
    """A kernel faulted: it read or wrote memory that is not mapped (far out of bounds,
    through NULL) or not writable (a read-only array or mapping): CUDA_ERROR_ILLEGAL_ADDRESS.
    The fault is contained: the launch is abandoned, nothing else is lost, and the next
    launch runs normally.  `block` is the block that faulted, `address` the address."""

    def __init__(self, detail: str = "", kernel: str | None = None,
                 block: tuple[int, int, int] | None = None, address: int | None = None) -> None:
        super().__init__(700, detail, kernel)
        self.block = block
        self.address = address

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.detail, self.kernel, self.block, self.address))


class LaunchTimeoutError(KernelFailure):
    """A kernel ran longer than CPUIFY_KERNEL_TIMEOUT seconds and was stopped
    (CUDA_ERROR_LAUNCH_TIMEOUT, what a display watchdog reports on a GPU)."""

    def __init__(self, detail: str = "", kernel: str | None = None) -> None:
        super().__init__(702, detail, kernel)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.detail, self.kernel))


class DeadlockError(LaunchTimeoutError):
    """Every thread of a launch waited in a spin-wait loop for memory that no running thread
    writes, for CPUIFY_DEADLOCK_TIMEOUT seconds (default 2): a GPU would hang (or, for blocks
    that cannot all be resident, it might).  The message names the kernel, the block, the
    thread and the waiting loop's PTX line (CUDA line with -lineinfo); CUDA status 702."""


class CompileException(CompileError):
    """CuPy's `cupy.cuda.compiler.CompileException`: the CUDA source did not compile.

    Attributes as in CuPy: `source` (the CUDA source), `name` (the file name given to the
    compiler), `options`, `backend` ('nvrtc' or 'nvcc'); `log` holds the compiler's log,
    `get_message()` the message and `dump(f)` writes the message and the numbered source."""

    def __init__(self, msg: str, source: str | None = None, name: str | None = None,
                 options: tuple[str, ...] | list[str] = (), backend: str = "nvrtc",
                 log: str = "") -> None:
        super().__init__(msg, log)
        self._msg = msg
        self.source = source if source is not None else ""
        self.name = name
        self.options = tuple(options)
        self.backend = backend

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self._msg, self.source, self.name, self.options, self.backend,
                             self.log))

    def __str__(self) -> str:
        return self._msg

    def get_message(self) -> str:
        return self._msg

    def dump(self, f) -> None:  # type: ignore[no-untyped-def]
        lines = self.source.split("\n")
        width = len(str(len(lines)))
        f.write(f"{self.backend.upper()} compilation error: {self}\n-----\n")
        f.write(f"Name: {self.name}\nOptions: {' '.join(self.options)}\nCUDA source:\n")
        for i, line in enumerate(lines, 1):
            f.write(f"{i:0{width}d} {line.rstrip()}\n")
        f.write("-----\n")
        f.flush()


class ArgumentError(CpuifyError, TypeError):
    """A kernel argument or launch parameter that cpuify cannot pass: wrong count or type,
    a read-only array for a pointer the kernel writes.  Also a `TypeError`."""


class ArgumentValueError(CpuifyError, ValueError):
    """A kernel argument or launch parameter out of range: an integer that does not fit its
    parameter, a float beyond the float range, grid/block dimensions or shared memory over
    the limits.  Also a `ValueError` (and an `OverflowError` for numbers that overflow)."""


class ArgumentOverflowError(ArgumentValueError, OverflowError):
    """A number too large for its parameter type (`10**400` for a float)."""


class LaunchConfigError(CUDADriverError, ArgumentValueError):
    """A launch configuration CUDA refuses (a block over 1024 threads or over a dimension's
    limit, a grid dimension over its limit, a zero dimension, a block other than the kernel's
    `.reqntid`): what CuPy raises for it, a `CUDADriverError` with CUDA_ERROR_INVALID_VALUE
    (cuLaunchKernel's status), and an `ArgumentValueError` (a `ValueError`), as before."""

    def __init__(self, detail: str = "") -> None:
        CUDADriverError.__init__(self, 1, detail)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.detail,))


class SpecializationWarning(RuntimeWarning):
    """Compiling a kernel for one block shape failed; the launch runs the generic code,
    which is always correct, only slower.  Please report it with the kernel source."""


class CacheWarning(UserWarning):
    """The on-disk cache could not be used as it is (a damaged entry rebuilt, a directory
    refused or unwritable: no cache for this process).  Results stay correct."""
