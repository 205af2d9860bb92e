"""LLVM's optimization pipeline run in a worker process, bounded in CPU time.

LLVM's O3 has no bound of its own on some inputs.  Non-trivial loop unswitching, at the
budget cpuify gives it for thread loops (jit.UNSWITCH_THRESHOLD), copies a loop nest for each
branch on an invariant value, and each copy's inner loops are unswitched again: exponential
in the nesting.  The fuzzer's fz_2809_6391, a 54-line kernel specialized for its 7-thread
block, spent more than 12 minutes of CPU there.  A pass cannot be interrupted inside this
process, so jit.optimize sends the module's text to a worker process (one per process,
started on first use, serving requests one at a time) with a limit on the CPU time of that
request (RLIMIT_CPU); a request over its limit ends the worker (SIGXCPU), and jit.optimize
asks a fresh worker again with LLVM's own unswitching budget, then, over the limit once
more, optimizes in this process without non-trivial unswitching at all (jit's "bounded"
pipeline: O2 without vectorization or unrolling).  The optimized module comes back as bitcode.

The limit: CPUIFY_LLVM_CPU_LIMIT seconds where set (0: no worker, the pipeline runs in this
process with no bound, as before), else DEFAULT_BASE_SECONDS plus DEFAULT_SECONDS_PER_BYTE
for each byte of the module's text (LLVM's O3 takes about 1-3 microseconds a byte on
cpuify's kernels; 20 s + 20 us/byte gives a 200 KB module 24 s).  A worker that cannot be
started, or that ends for any other reason than its limit, makes jit.optimize run in this
process (for the rest of this process's life, where it could not start)."""

from __future__ import annotations

import atexit
import gc
import io
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from cpuify.forksafe import renew_in_child

__all__ = ["DEFAULT_BASE_SECONDS", "DEFAULT_SECONDS_PER_BYTE", "Crashed", "OverLimit",
           "cpu_limit", "request", "serve"]

DEFAULT_BASE_SECONDS = 20.0
DEFAULT_SECONDS_PER_BYTE = 20e-6

#: the module whose `python -m` runs the worker's loop (jit: it holds the pipeline)
SERVER_MODULE = "cpuify.codegen.jit"
SERVE_FLAG = "--llvm-worker"


class OverLimit(Exception):
    """The request used up its CPU-time limit (the worker was ended)."""


class Crashed(Exception):
    """LLVM ended the worker with a signal while it optimized the request's module (an
    assertion of LLVM's own, SIGABRT, or a crash): the same module would end this process."""

    def __init__(self, signal_number: int) -> None:
        super().__init__(f"the LLVM worker process ended with signal {signal_number}")
        self.signal_number = signal_number


#: the signals of an LLVM that fails on a module (not our limit, not a kill from outside)
_CRASH_SIGNALS = frozenset({signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL,
                            signal.SIGFPE})


def cpu_limit(size: int) -> float:
    """CPU seconds a request for a module of `size` bytes of text may take; 0.0: no worker."""
    text = os.environ.get("CPUIFY_LLVM_CPU_LIMIT", "").strip()
    if not text:
        return DEFAULT_BASE_SECONDS + DEFAULT_SECONDS_PER_BYTE * size
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0.0:
        from cpuify.errors import CpuifyError
        raise CpuifyError(f"CPUIFY_LLVM_CPU_LIMIT={text!r}: expected the CPU seconds one LLVM "
                          f"optimization may take, or 0 to run it in this process with no limit")
    return value


def _write_frame(out: BinaryIO, header: dict[str, Any], payload: bytes) -> None:
    head = json.dumps(header).encode()
    out.write(struct.pack("<IQ", len(head), len(payload)) + head)
    out.write(payload)
    out.flush()


def _read_exact(inp: BinaryIO, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = inp.read(left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_frame(inp: BinaryIO) -> tuple[dict[str, Any], bytes]:
    n_head, n_payload = struct.unpack("<IQ", _read_exact(inp, 12))
    header = json.loads(_read_exact(inp, n_head))
    return header, _read_exact(inp, n_payload)


#: the worker's request handler in this process (jit sets it): with it, and no other thread
#: running, a worker is a fork of this process, which has Python, llvmlite and LLVM's
#: targets loaded already; else `python -m SERVER_MODULE SERVE_FLAG` (about 0.1 s of CPU
#: to start: a tenth of a small program's kernel build)
fork_handler: Callable[[dict[str, Any], bytes], tuple[dict[str, Any], bytes]] | None = None


class _ForkedProcess:
    """The parts of subprocess.Popen that _Worker uses, for a forked worker."""

    def __init__(self, pid: int, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        waited = 0.0
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, 0 if timeout is None else os.WNOHANG)
            if pid:
                self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) \
                    else os.WEXITSTATUS(status)
                break
            if timeout is not None and waited >= timeout:
                raise subprocess.TimeoutExpired("llvm worker", timeout)
            time.sleep(0.01)
            waited += 0.01
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _fork_worker(handler: Callable[[dict[str, Any], bytes], tuple[dict[str, Any], bytes]]
                 ) -> _ForkedProcess:
    to_child, from_parent = os.pipe()
    to_parent, from_child = os.pipe()
    for stream in (sys.stdout, sys.stderr):     # (nothing of ours written twice)
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    pid = os.fork()
    if pid == 0:                 # the worker: serve until the parent closes its pipe
        code = 1
        try:
            # (the parent's objects stay shared: the collector leaves them alone)
            gc.freeze()
            signal.signal(signal.SIGXCPU, signal.SIG_DFL)  # (over its limit: it ends)
            os.dup2(to_child, 0)
            os.dup2(from_child, 1)
            os.closerange(3, _max_fd())     # (the parent's pipes to other processes)
            # (held here too: serve() points sys.stdout elsewhere, and a wrapper no one
            # holds closes its buffer)
            streams = (io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False))),
                       io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "wb", closefd=False))))
            sys.stdin, sys.stdout = streams
            code = serve(handler)
        except BaseException:      # noqa: BLE001 - the parent reads the worker's end
            try:
                import traceback
                traceback.print_exc()
            except BaseException:  # noqa: BLE001
                pass
        finally:
            os._exit(code)
    os.close(to_child)
    os.close(from_child)
    return _ForkedProcess(pid, os.fdopen(from_parent, "wb"), os.fdopen(to_parent, "rb"))


def _max_fd() -> int:
    try:
        return min(int(os.sysconf("SC_OPEN_MAX")), 1 << 20)
    except (ValueError, OSError):
        return 4096


class _Worker:
    def __init__(self) -> None:
        if fork_handler is not None and threading.active_count() == 1 and hasattr(os, "fork"):
            # (with other threads, a fork would wait for their compile sections: forksafe)
            self.proc: subprocess.Popen[bytes] | _ForkedProcess = _fork_worker(fork_handler)
            return
        # (the directory that holds the cpuify package: this file is cpuify/codegen/...)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        # the same cpuify as this process, wherever it was imported from
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen([sys.executable, "-m", SERVER_MODULE, SERVE_FLAG],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     close_fds=True)

    def request(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            _write_frame(self.proc.stdin, header, payload)
            return _read_frame(self.proc.stdout)
        except (OSError, EOFError, ValueError, struct.error):
            code = self.proc.wait()
            if code == -signal.SIGXCPU:
                raise OverLimit from None
            if -code in _CRASH_SIGNALS:
                raise Crashed(-code) from None
            raise RuntimeError(f"LLVM worker process ended with status {code}") from None

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_lock = threading.Lock()
_worker: _Worker | None = None
_unavailable = False        # a worker could not be started or failed: this process optimizes


def _forget_in_child() -> None:
    """A forked child starts its own worker: the parent's pipes are closed here."""
    global _worker
    if _worker is not None:
        for stream in (_worker.proc.stdin, _worker.proc.stdout):
            try:
                if stream is not None:
                    os.close(stream.fileno())
            except (OSError, ValueError):
                pass
    _worker = None


renew_in_child(globals(), "_lock", threading.Lock)
os.register_at_fork(after_in_child=_forget_in_child)


def _close_at_exit() -> None:
    if _worker is not None:
        _worker.close()


atexit.register(_close_at_exit)


def _usable_interpreter() -> bool:
    # an embedding program (a --distributed executable) is not a Python to run `-m` with
    name = os.path.basename(sys.executable or "")
    return name.startswith("python") or name.startswith("pypy")


def request(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes] | None:
    """The worker's answer to one request (header["cpu"]: its CPU-time limit, seconds); None
    where no worker can serve (the caller runs the pipeline itself).  Raises OverLimit."""
    global _worker, _unavailable
    if _unavailable or not _usable_interpreter():
        return None
    with _lock:
        try:
            if _worker is None:
                _worker = _Worker()
            return _worker.request(header, payload)
        except (OverLimit, Crashed):    # (the next module gets a fresh worker)
            _worker.close()
            _worker = None
            raise
        except (OSError, RuntimeError):
            if _worker is not None:
                _worker.close()
            _worker = None
            _unavailable = True
            return None
        except BaseException:       # (Ctrl-C mid-request: its answer must not be read later)
            if _worker is not None:
                _worker.proc.kill()
                _worker.close()
            _worker = None
            raise


def _limit_cpu(seconds: float | None) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if seconds is None:
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    limit = int(usage.ru_utime + usage.ru_stime + seconds) + 1
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))


def serve(handle: Callable[[dict[str, Any], bytes], tuple[dict[str, Any], bytes]]) -> int:
    """The worker's loop: one request frame at a time from stdin, its answer to stdout
    (`handle(header, payload)`), under header["cpu"] seconds of CPU; ends at end of input."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C is the parent's to handle
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr         # nothing else may write into the answers
    while True:
        try:
            header, payload = _read_frame(inp)
        except EOFError:
            return 0
        _limit_cpu(float(header.get("cpu") or 0) or None)
        try:
            answer, data = handle(header, payload)
        except Exception as e:  # noqa: BLE001 (reported to the caller, which raises it)
            answer, data = {"error": f"{type(e).__name__}: {e}"}, b""
        _limit_cpu(None)
        _write_frame(out, answer, data)
