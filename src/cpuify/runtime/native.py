"""Loads the cpuify native runtime (``cpuify_rt.c``) as a ctypes library.

The library is normally built by setuptools as the extension ``cpuify._cpuify_rt`` (see
``setup.py``).  When it is missing -- e.g. running from a source checkout that was never
built -- it is compiled on demand with the system C compiler into the cache
(:mod:`cpuify.cache`).  ``$CPUIFY_RUNTIME_LIB`` names a library
to use instead of either.

The library is loaded with ``RTLD_GLOBAL`` and registered with llvmlite, so JIT-compiled
kernels can call ``cpuify_vprintf`` and friends by symbol name.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

from .. import cache
from ..errors import CpuifyError
from ..forksafe import renew_in_child

__all__ = [
    "ABI_VERSION", "BLOCK_FN", "Dims", "ERROR_NAMES",
    "CPUIFY_OK", "CPUIFY_ERR_BARRIER_DIVERGENCE", "CPUIFY_ERR_TRAP",
    "CPUIFY_ERR_WARP_DIVERGENCE", "CPUIFY_ERR_ASSERT", "CPUIFY_ERR_OUT_OF_MEMORY",
    "CPUIFY_ERR_ILLEGAL_ADDRESS", "CPUIFY_ERR_HARDWARE", "CPUIFY_ERR_TIMEOUT",
    "CPUIFY_ERR_INTERRUPTED", "CPUIFY_ERR_STACK_OVERFLOW", "CPUIFY_ERR_DEADLOCK",
    "CPUIFY_ERR_INVALID_BOX",
    "CPUIFY_LAUNCH_FIBERS", "CPUIFY_LAUNCH_COOPERATIVE", "Fault", "last_fault", "last_message",
    "load_runtime", "runtime_path", "stack_limit", "set_stack_limit",
]

#: Must equal CPUIFY_RT_ABI_VERSION in cpuify_rt.h.
ABI_VERSION = 9

# enum cpuify_error
CPUIFY_OK = 0
CPUIFY_ERR_BARRIER_DIVERGENCE = 1
CPUIFY_ERR_TRAP = 2
CPUIFY_ERR_WARP_DIVERGENCE = 3
CPUIFY_ERR_ASSERT = 4
CPUIFY_ERR_OUT_OF_MEMORY = 5
CPUIFY_ERR_ILLEGAL_ADDRESS = 6
CPUIFY_ERR_HARDWARE = 7
CPUIFY_ERR_TIMEOUT = 8
CPUIFY_ERR_INTERRUPTED = 9
CPUIFY_ERR_STACK_OVERFLOW = 10
CPUIFY_ERR_DEADLOCK = 11
CPUIFY_ERR_INVALID_BOX = 12

# enum cpuify_launch_flags
CPUIFY_LAUNCH_FIBERS = 1
CPUIFY_LAUNCH_COOPERATIVE = 2

ERROR_NAMES = {
    CPUIFY_ERR_BARRIER_DIVERGENCE: "barrier divergence",
    CPUIFY_ERR_TRAP: "trap",
    CPUIFY_ERR_WARP_DIVERGENCE: "warp divergence",
    CPUIFY_ERR_ASSERT: "device assert",
    CPUIFY_ERR_OUT_OF_MEMORY: "out of memory",
    CPUIFY_ERR_ILLEGAL_ADDRESS: "illegal address",
    CPUIFY_ERR_HARDWARE: "illegal instruction or arithmetic exception",
    CPUIFY_ERR_TIMEOUT: "timeout",
    CPUIFY_ERR_INTERRUPTED: "interrupted",
    CPUIFY_ERR_STACK_OVERFLOW: "stack overflow",
    CPUIFY_ERR_DEADLOCK: "no progress (every thread waits for memory nobody writes)",
    CPUIFY_ERR_INVALID_BOX: "the box of blocks to launch is not part of the grid (or is part "
                            "of a cooperative launch's grid)",
}


class Fault(ctypes.Structure):
    """``struct cpuify_fault``: the fault that failed a launch."""

    _fields_ = [("address", ctypes.c_uint64), ("signal", ctypes.c_int32), ("access", ctypes.c_int32)]


class Dims(ctypes.Structure):
    """``struct cpuify_dims``."""

    _fields_ = [("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3)]


#: ctypes type of ``cpuify_block_fn``:
#: (params, dims, bx, by, bz, shared, scratch) -> int32
BLOCK_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(Dims),
                            ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32,
                            ctypes.c_void_p, ctypes.c_void_p)

_RUNTIME_DIR = Path(__file__).resolve().parent
_SOURCE = _RUNTIME_DIR / "cpuify_rt.c"
_SOURCES = (_SOURCE, _RUNTIME_DIR / "block_sched.c", _RUNTIME_DIR / "cpuify_tex.c")
_HEADER = _RUNTIME_DIR / "cpuify_rt.h"
_HEADERS = (_HEADER, _RUNTIME_DIR / "cpuify_tex.h")
_CFLAGS = ["-O3", "-std=c11", "-shared", "-fPIC", "-pthread"]

_lock = threading.Lock()
renew_in_child(globals(), "_lock", threading.Lock)
_lib: ctypes.CDLL | None = None
_lib_path: str | None = None


# ------------------------------------------------------------------------------------
# locating / building


def _built_extension_candidates() -> list[Path]:
    """Paths where setuptools may have put the ``cpuify._cpuify_rt`` extension."""
    found: list[Path] = []
    pkg_dir = _RUNTIME_DIR.parent
    for pattern in ("_cpuify_rt*.so", "_cpuify_rt*.dylib", "_cpuify_rt*.pyd"):
        found.extend(sorted(pkg_dir.glob(pattern)))
    try:  # editable installs may map the extension elsewhere
        spec = importlib.util.find_spec("cpuify._cpuify_rt")
    except (ImportError, ValueError, AttributeError):
        spec = None
    if spec is not None and spec.origin and spec.origin not in ("built-in", "frozen"):
        p = Path(spec.origin)
        if p not in found:
            found.append(p)
    return [p for p in found if p.is_file()]


def _in_source_checkout() -> bool:
    # src/cpuify/runtime -> repository root holding pyproject.toml
    return (_RUNTIME_DIR.parents[2] / "pyproject.toml").is_file()


def _abi_ok(path: Path) -> bool:
    """Whether the library at path exports the runtime with our ABI (loaded RTLD_LOCAL so
    a stale library never lands in the global symbol namespace)."""
    try:
        lib = ctypes.CDLL(str(path))
        fn = lib.cpuify_runtime_abi_version
    except (OSError, AttributeError):
        return False
    fn.restype = ctypes.c_int32
    fn.argtypes = []
    return fn() == ABI_VERSION


def _compiler() -> str:
    """`cc`, never $CC: make exports CC, and a Makefile may set it to `cpuify nvcc`, whose
    Python API builds this runtime (the same choice as cpuify.nvcc.rtlib.c_compiler)."""
    return "cc"


def _source_hash(cc: str) -> str:
    h = hashlib.sha256()
    for p in (*_SOURCES, *_HEADERS):
        h.update(p.read_bytes())
        h.update(b"\0")
    h.update(" ".join([cc, *_CFLAGS]).encode())
    return h.hexdigest()[:20]


def _compile_runtime() -> Path:
    """Compiles cpuify_rt.c into the cache (cpuify.cache: reused when present and its hash
    checks out; with no usable cache, into this process's private directory)."""
    if not _SOURCE.is_file():
        raise CpuifyError(f"cpuify runtime source {_SOURCE} is missing; reinstall cpuify")
    cc = _compiler()
    name = f"runtime-{_source_hash(cc)}.so"
    hit = cache.load_file(name)
    if hit is not None:
        return hit
    if shutil.which(cc) is None:
        raise CpuifyError(
            f"the cpuify native runtime is not built and no C compiler ('{cc}') was found; "
            "install cpuify with pip (which builds it) or install a C compiler (`cc`)")
    with cache.temporary_directory(prefix="cpuify-rt-") as tmp:
        out = os.path.join(tmp, name)
        cmd = [cc, *_CFLAGS, f"-I{_RUNTIME_DIR}", *map(str, _SOURCES), "-o", out]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CpuifyError(
                "compiling the cpuify native runtime failed:\n  " + " ".join(cmd) + "\n"
                + proc.stdout + proc.stderr)
        return cache.store_file(name, out, executable=True)


def _find_or_build() -> Path:
    env = os.environ.get("CPUIFY_RUNTIME_LIB")
    if env:
        p = Path(env)
        if not p.is_file():
            raise CpuifyError(f"$CPUIFY_RUNTIME_LIB={env} does not exist")
        return p
    src_mtime = max(p.stat().st_mtime for p in _SOURCES) if _SOURCE.is_file() else None
    hdr_mtime = max((h.stat().st_mtime for h in _HEADERS if h.is_file()), default=None)
    for cand in _built_extension_candidates():
        if _in_source_checkout() and src_mtime is not None:
            # in a checkout, an in-place build older than the source is stale
            newest = max(src_mtime, hdr_mtime or 0.0)
            if cand.stat().st_mtime < newest:
                continue
        if _abi_ok(cand):
            return cand
    return _compile_runtime()


# ------------------------------------------------------------------------------------
# loading


def _declare(lib: ctypes.CDLL) -> None:
    # plain addresses everywhere: the Python launch path passes precomputed ints
    lib.cpuify_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]
    lib.cpuify_launch.restype = ctypes.c_int32
    lib.cpuify_launch_ex.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p,
                                     ctypes.c_uint32, ctypes.c_uint64]
    lib.cpuify_launch_ex.restype = ctypes.c_int32
    lib.cpuify_launch_range.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p,
                                        ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p,
                                        ctypes.c_void_p]
    lib.cpuify_launch_range.restype = ctypes.c_int32
    lib.cpuify_last_message.argtypes = []
    lib.cpuify_last_message.restype = ctypes.c_char_p
    lib.cpuify_num_workers.argtypes = []
    lib.cpuify_num_workers.restype = ctypes.c_int32
    lib.cpuify_set_num_workers.argtypes = [ctypes.c_int32]
    lib.cpuify_set_num_workers.restype = None
    lib.cpuify_failed_child.argtypes = []
    lib.cpuify_failed_child.restype = ctypes.c_char_p
    lib.cpuify_set_stack_limit.argtypes = [ctypes.c_uint64]
    lib.cpuify_set_stack_limit.restype = None
    lib.cpuify_stack_limit.argtypes = []
    lib.cpuify_stack_limit.restype = ctypes.c_uint64
    lib.cpuify_vprintf.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    lib.cpuify_vprintf.restype = ctypes.c_int32
    lib.cpuify_flush.argtypes = []
    lib.cpuify_flush.restype = None
    lib.cpuify_runtime_abi_version.argtypes = []
    lib.cpuify_runtime_abi_version.restype = ctypes.c_int32
    lib.cpuify_last_fault.argtypes = [ctypes.POINTER(Fault)]
    lib.cpuify_last_fault.restype = None
    lib.cpuify_cancel.argtypes = [ctypes.c_int32]
    lib.cpuify_cancel.restype = ctypes.c_int32
    lib.cpuify_catch_interrupts.argtypes = []
    lib.cpuify_catch_interrupts.restype = None
    lib.cpuify_interrupt_seen.argtypes = []
    lib.cpuify_interrupt_seen.restype = None


def load_runtime() -> ctypes.CDLL:
    """Returns the native runtime library (loaded once, RTLD_GLOBAL, known to llvmlite).

    ``cpuify_launch(fn, params, dims, shared_bytes, scratch_bytes, err_block)`` takes fn
    as a function address or a ``BLOCK_FN`` instance, params as an address,
    dims as a ``Dims`` (byref) and err_block as ``(c_uint32 * 3)()`` or None;
    ``cpuify_launch_ex`` adds (flags, max_resident), ``cpuify_launch_range`` then the
    addresses of two ``(c_uint32 * 3)`` arrays lo, hi: the box of blocks to run."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = _find_or_build()
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        _declare(lib)
        if lib.cpuify_runtime_abi_version() != ABI_VERSION:
            raise CpuifyError(
                f"cpuify native runtime {path} has ABI version "
                f"{lib.cpuify_runtime_abi_version()}, expected {ABI_VERSION}; rebuild cpuify")
        try:
            import llvmlite.binding as llvm
            llvm.load_library_permanently(str(path))
        except ImportError:  # pragma: no cover - llvmlite is a hard dependency
            pass
        # Ctrl-C stops a running kernel: the runtime's SIGINT handler goes in front of
        # Python's (which still raises KeyboardInterrupt once the launch has returned)
        _acknowledge_interrupts(lib)
        lib.cpuify_catch_interrupts()
        _lib_path = str(path)
        _lib = lib
        return lib


def _acknowledge_interrupts(lib: ctypes.CDLL) -> None:
    """A Ctrl-C that lands while no kernel runs also stops the next launch if it starts
    within 0.2 s, before Python has raised KeyboardInterrupt: that launch was on its way
    (Python runs its handlers between bytecodes only).  Once KeyboardInterrupt is raised
    the program has seen it, and a launch in its `except` clause must run: Python's default
    handler is wrapped to say so.  (Only Python's default handler, and only from the main
    thread, where handlers may be set; a program's own handler keeps the 0.2 s rule.)"""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return
    seen = lib.cpuify_interrupt_seen
    default = signal.default_int_handler

    def keyboard_interrupt(signum: int, frame: object) -> None:
        seen()
        default(signum, frame)

    signal.signal(signal.SIGINT, keyboard_interrupt)


def last_fault() -> Fault:
    """The fault that failed the calling thread's last failed launch (signal 0: none)."""
    f = Fault()
    load_runtime().cpuify_last_fault(ctypes.byref(f))
    return f


def last_message() -> str:
    """Why the calling thread's last launch failed with CPUIFY_ERR_DEADLOCK ("" if not)."""
    raw = load_runtime().cpuify_last_message()
    return raw.decode("utf-8", "replace") if raw else ""


def runtime_path() -> str:
    """Filesystem path of the loaded native runtime library."""
    load_runtime()
    assert _lib_path is not None
    return _lib_path


def num_threads() -> int:
    """CPU worker threads a launch uses (CPUIFY_NUM_THREADS, else all cores)."""
    return int(load_runtime().cpuify_num_workers())


def stack_limit() -> int:
    """Bytes of the call stack of each CUDA thread (recursive device functions):
    CUDA's cudaLimitStackSize, 1024 unless set."""
    return int(load_runtime().cpuify_stack_limit())


def set_stack_limit(nbytes: int) -> None:
    """Give each CUDA thread a call stack of `nbytes` for later launches (what
    `cudaDeviceSetLimit(cudaLimitStackSize, nbytes)` does): a recursion that needs more
    fails its launch with a stack overflow."""
    if nbytes < 0:
        raise ValueError("the stack size limit must not be negative")
    load_runtime().cpuify_set_stack_limit(int(nbytes))


def set_num_threads(n: int) -> None:
    """Use `n` worker threads for later launches (n <= 0: back to the default)."""
    load_runtime().cpuify_set_num_workers(int(n))
