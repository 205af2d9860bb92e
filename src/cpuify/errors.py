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


class SpecializationWarning(RuntimeWarning):
    """Compiling a kernel for one block shape failed; the launch runs the generic code,
    which is always correct, only slower.  Please report it with the kernel source."""


class CacheWarning(UserWarning):
    """The on-disk cache could not be used as it is (a damaged entry rebuilt, a directory
    refused or unwritable: no cache for this process).  Results stay correct."""
