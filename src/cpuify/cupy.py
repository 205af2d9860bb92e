"""`import cpuify.cupy as cp`: the part of CuPy that user-kernel scripts use, on the CPU.

Arrays are NumPy arrays: `cp.arange`, `cp.float32`, `cp.sum`, ... are NumPy's (any name
NumPy has), `cp.asarray` is `np.asarray`, `cp.asnumpy` copies as CuPy's does.  The creation
functions (`cp.empty`, `cp.zeros`, `cp.ones`, `cp.full` and their `_like` forms) are
NumPy's with CuPy's placement: the data starts at a multiple of 256 bytes, as cudaMalloc's
and CuPy's memory pool's does (NumPy puts a large array 16 bytes past a page start, and a
kernel whose rows are whole cache lines then splits every row access across two lines).
Kernels are cpuify's: `cp.RawKernel`, `cp.RawModule`, `cp.ElementwiseKernel`,
`cp.ReductionKernel`.  `cp.cuda` holds a Device, Stream and Event that keep CuPy's
interface where the CPU has a meaning for it (launches are synchronous, so synchronizing
returns at once; an Event records the time).  docs/usage.md has the table of what maps and
what does not."""

from __future__ import annotations

import time
import types
from typing import Any

import numpy

from cpuify.api.elementwise import ElementwiseKernel, ReductionKernel
from cpuify.api.module import RawKernel, RawModule
from cpuify.errors import CompileException, CUDADriverError, UnsupportedError

ndarray = numpy.ndarray


def asnumpy(a: Any, stream: Any = None, order: str = "C", out: Any = None,
            blocking: bool = True) -> numpy.ndarray:
    """A host copy (CuPy copies device memory to the host; the copy keeps that meaning)."""
    if out is not None:
        out[...] = a
        return out
    return numpy.array(a, order=order, copy=True)


ALIGNMENT = 256   # bytes: cudaMalloc's guarantee, and CuPy's memory pool's


def _aligned(shape: Any, dtype: Any, order: str, fill: Any) -> numpy.ndarray:
    """A new array of `shape` whose data starts at a multiple of ALIGNMENT bytes; `fill`
    None leaves it uninitialized, 0 takes zeroed memory (calloc's lazily zeroed pages, as
    numpy.zeros), anything else is written."""
    dt = numpy.dtype(float if dtype is None else dtype)
    shape = (shape,) if isinstance(shape, (int, numpy.integer)) else tuple(shape)
    size = int(numpy.prod(shape, dtype=numpy.int64)) * dt.itemsize
    zeroed = fill is not None and numpy.all(numpy.asarray(fill) == 0)
    raw = (numpy.zeros if zeroed else numpy.empty)(size + ALIGNMENT, numpy.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    out = raw[start:start + size].view(dt).reshape(shape, order="F" if order == "F" else "C")
    if fill is not None and not zeroed:
        out[...] = fill
    return out


def empty(shape: Any, dtype: Any = float, order: str = "C") -> numpy.ndarray:
    return _aligned(shape, dtype, order, None)


def zeros(shape: Any, dtype: Any = float, order: str = "C") -> numpy.ndarray:
    return _aligned(shape, dtype, order, 0)


def ones(shape: Any, dtype: Any = float, order: str = "C") -> numpy.ndarray:
    return _aligned(shape, dtype, order, 1)


def full(shape: Any, fill_value: Any, dtype: Any = None, order: str = "C") -> numpy.ndarray:
    if dtype is None:
        dtype = numpy.asarray(fill_value).dtype
    return _aligned(shape, dtype, order, fill_value)


def _like(a: Any, dtype: Any, order: str, shape: Any, fill: Any) -> numpy.ndarray:
    a = numpy.asarray(a)
    if order in ("K", "A"):         # (a's own layout)
        order = "F" if numpy.isfortran(a) else "C"
    return _aligned(a.shape if shape is None else shape, a.dtype if dtype is None else dtype,
                    order, fill)


def empty_like(a: Any, dtype: Any = None, order: str = "K", subok: Any = None,
               shape: Any = None) -> numpy.ndarray:
    return _like(a, dtype, order, shape, None)


def zeros_like(a: Any, dtype: Any = None, order: str = "K", subok: Any = None,
               shape: Any = None) -> numpy.ndarray:
    return _like(a, dtype, order, shape, 0)


def ones_like(a: Any, dtype: Any = None, order: str = "K", subok: Any = None,
              shape: Any = None) -> numpy.ndarray:
    return _like(a, dtype, order, shape, 1)


def full_like(a: Any, fill_value: Any, dtype: Any = None, order: str = "K", subok: Any = None,
              shape: Any = None) -> numpy.ndarray:
    return _like(a, dtype, order, shape, fill_value)


def asarray(a: Any, dtype: Any = None, order: Any = None, *, blocking: bool = False) -> numpy.ndarray:
    return numpy.asarray(a, dtype=dtype, order=order)


def get_array_module(*args: Any) -> types.ModuleType:
    """NumPy: every array is a NumPy array here."""
    return numpy


def fuse(*args: Any, **kwargs: Any) -> Any:
    raise UnsupportedError("cupy.fuse is not supported by cpuify.cupy; write the fused "
                           "operation as an ElementwiseKernel or a plain NumPy function")


class _Stream:
    """CuPy's cuda.Stream: launches are synchronous, so there is nothing to wait for."""

    null: "_Stream"

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False,
                 priority: int | None = None) -> None:
        self.ptr = 0
        self._previous: list[_Stream] = []

    def synchronize(self) -> None:
        pass

    def done(self) -> bool:
        return True

    def use(self) -> "_Stream":
        _cuda._current = self
        return self

    def __enter__(self) -> "_Stream":
        self._previous.append(_cuda._current)
        _cuda._current = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _cuda._current = self._previous.pop()

    def record(self, event: "_Event | None" = None) -> "_Event":
        event = event or _Event()
        event.record(self)
        return event

    def wait_event(self, event: "_Event") -> None:
        pass

    def add_callback(self, callback: Any, arg: Any) -> None:
        callback(self, 0, arg)


class _Event:
    """CuPy's cuda.Event: `record()` takes the time (the work before it has finished)."""

    def __init__(self, block: bool = False, disable_timing: bool = False,
                 interprocess: bool = False) -> None:
        self._time: float | None = None

    def record(self, stream: Any = None) -> None:
        self._time = time.perf_counter()

    def synchronize(self) -> None:
        pass

    @property
    def done(self) -> bool:
        return True


def _get_elapsed_time(start: _Event, end: _Event) -> float:
    """Milliseconds between two recorded events."""
    if start._time is None or end._time is None:
        raise CUDADriverError(400, "get_elapsed_time: both events must have been recorded")
    return (end._time - start._time) * 1e3


class _Device:
    """CuPy's cuda.Device: one device, the CPU (id 0)."""

    def __init__(self, device: int | None = None) -> None:
        if device not in (None, 0):
            raise CUDADriverError(101, f"Device({device}): cpuify has one device, 0")
        self.id = 0

    def synchronize(self) -> None:
        pass

    def use(self) -> None:
        pass

    def __enter__(self) -> "_Device":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    @property
    def compute_capability(self) -> str:
        return "75"

    def __int__(self) -> int:
        return 0


def _device_set_limit(limit: int, value: int) -> None:
    if limit == _LIMIT_STACK_SIZE:
        from cpuify.runtime import native
        native.set_stack_limit(value)


def _device_get_limit(limit: int) -> int:
    if limit == _LIMIT_STACK_SIZE:
        from cpuify.runtime import native
        return native.stack_limit()
    return {1: 8650752, 2: 8 << 20}.get(limit, 0)   # printf FIFO, malloc heap: CUDA's defaults


_LIMIT_STACK_SIZE = 0
_runtime = types.SimpleNamespace(
    getDeviceCount=lambda: 1, getDevice=lambda: 0, setDevice=lambda d: None,
    deviceSynchronize=lambda: None, is_hip=False,
    deviceSetLimit=_device_set_limit, deviceGetLimit=_device_get_limit,
    cudaLimitStackSize=_LIMIT_STACK_SIZE, cudaLimitPrintfFifoSize=1, cudaLimitMallocHeapSize=2)
_cuda = types.ModuleType("cpuify.cupy.cuda", "CuPy's cupy.cuda, as far as the CPU has it")
_cuda.Stream = _Stream                       # type: ignore[attr-defined]
_cuda.Event = _Event                         # type: ignore[attr-defined]
_cuda.Device = _Device                       # type: ignore[attr-defined]
_cuda.runtime = _runtime                     # type: ignore[attr-defined]
_cuda.get_elapsed_time = _get_elapsed_time   # type: ignore[attr-defined]
_cuda.get_current_stream = lambda: _cuda._current   # type: ignore[attr-defined]
_cuda.compiler = types.SimpleNamespace(CompileException=CompileException)  # type: ignore[attr-defined]
_cuda.driver = types.SimpleNamespace(CUDADriverError=CUDADriverError)     # type: ignore[attr-defined]
_Stream.null = _Stream(null=True)
_cuda._current = _Stream.null                # type: ignore[attr-defined]
cuda = _cuda

__all__ = ["RawKernel", "RawModule", "ElementwiseKernel", "ReductionKernel", "asnumpy",
           "asarray", "get_array_module", "cuda", "ndarray", "empty", "zeros", "ones", "full",
           "empty_like", "zeros_like", "ones_like", "full_like"]


def __getattr__(name: str) -> Any:
    # everything else is NumPy's (cp.zeros, cp.float32, cp.random, cp.testing, ...)
    try:
        return getattr(numpy, name)
    except AttributeError:
        raise AttributeError(f"cpuify.cupy has no attribute {name!r} (NumPy has none either; "
                             "see docs/usage.md for what of CuPy maps)") from None
