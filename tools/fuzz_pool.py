"""The fuzzer's worker processes (tools/fuzz.py): a pool of `jobs` workers, each running one
batch of kernels, polled together so that a batch that hangs holds only its own slot.

A worker prints (and flushes) a line when it starts a step of its batch -- the module's
compile (NVRTC and the builds, shared by the batch), then each execution of each kernel --
and a line with each kernel's result as soon as it is final.  Its stdout and stderr go to
temporary files (a pipe nobody reads would fill and stop the worker), which the parent reads
as they grow.  Each step has a CPU-time limit (the module's compile
`compile_limit(n)`, each kernel `kernel_timeout`; and WALL_FACTOR times that in wall-clock
time without any CPU time gained, a deadlock); a worker over it is killed.  A killed or crashed worker
keeps the results it printed; the kernel it was on counts as a crash (naming the step),
and the rest of the batch runs again as a new batch -- or, where the shared compile was the
step, one kernel per batch, to find the kernel that breaks it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

STEP = "@@FUZZ-STEP@@"
RESULT = "@@FUZZ-RESULT@@"
DONE = "@@FUZZ@@"

#: a worker whose CPU time has not grown for this many times its step's limit in wall-clock
#: time is given up too (a deadlock spends no CPU time; a worker that only waits for a core
#: on a crowded machine still gains some)
WALL_FACTOR = 10.0

#: how long the parent sleeps between two looks at its workers
POLL_SECONDS = 0.05


def compile_limit(n: int, kernel_timeout: float) -> float:
    """The CPU seconds a worker may spend starting and compiling its module of `n` kernels."""
    return max(2.0 * kernel_timeout, 3.0 * n)


def emit(kind: str, payload: Any) -> None:
    """In a worker: one progress line (STEP or RESULT) on stdout, flushed at once."""
    sys.stdout.write(f"\n{kind}{json.dumps(payload)}\n")
    sys.stdout.flush()


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of process `pid` so far, 0.0 where /proc cannot say."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _children(pid: int) -> list[int]:
    """The live child processes of `pid` (Linux's /proc/PID/task/TID/children)."""
    kids: list[int] = []
    try:
        for task in os.scandir(f"/proc/{pid}/task"):
            try:
                kids += [int(k) for k in Path(f"{task.path}/children").read_text().split()]
            except OSError:
                continue
    except OSError:
        pass
    return kids


def _tree_cpu_seconds(pid: int) -> float:
    """CPU time of process `pid`, of the children it has reaped and of every live process
    below it (a compiler that runs LLVM in a child process)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        total = 0.0
    todo, seen = [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _cpu_seconds(p)
        todo += _children(p)
    return total


@dataclass
class Worker:
    """One worker process running kernels first..first+n-1 (`single`: one kernel of a batch
    whose shared compile failed), and what it has said so far."""
    first: int
    n: int
    proc: subprocess.Popen[bytes]
    out: IO[bytes]
    err: IO[bytes]
    kernel_timeout: float
    single: bool = False
    step: tuple[str, Any] = ("start-up", None)
    step_cpu: float = 0.0
    step_wall: float = field(default_factory=time.perf_counter)
    results: list[dict[str, Any]] = field(default_factory=list)
    times: dict[str, float] = field(default_factory=dict)
    compiles: int = 0            # compile steps seen (more than one: the batch went one by one)
    last_cpu: float = 0.0        # the worker's CPU time at the last look, and when it last grew
    last_gain: float = field(default_factory=time.perf_counter)
    _cpu: float = 0.0
    _cpu_at: float = -1e9
    _read: int = 0
    _partial: bytes = b""

    def read(self) -> None:
        """Takes in what the worker has printed since the last look."""
        while True:
            chunk = os.pread(self.out.fileno(), 1 << 16, self._read)
            if not chunk:
                break
            self._read += len(chunk)
            lines = (self._partial + chunk).split(b"\n")
            self._partial = lines.pop()
            for line in lines:
                self._line(line.decode("utf-8", "replace"))

    def _line(self, line: str) -> None:
        try:
            self._parse(line)
        except (ValueError, TypeError, IndexError):
            pass        # not one of ours (or cut short by the worker's death)

    def _parse(self, line: str) -> None:
        if line.startswith(RESULT):
            self.results.append(json.loads(line[len(RESULT):]))
        elif line.startswith(STEP):
            kind, what = json.loads(line[len(STEP):])
            if kind == "compile":
                self.compiles += 1
            # a kernel's executions share its limit; a new kernel or compile starts a new one
            if kind == "compile" or (kind, what[0]) != (self.step[0], (self.step[1] or [None])[0]):
                self.step_cpu = self.cpu()
                self.step_wall = time.perf_counter()
            self.step = (kind, what)
        elif line.startswith(DONE):
            self.times = json.loads(line[len(DONE):]).get("times", {})

    def cpu(self) -> float:
        """The worker's CPU seconds so far, children included (looked up at most once a
        second: a scan of /proc)."""
        now = time.perf_counter()
        if now - self._cpu_at >= 1.0:
            self._cpu, self._cpu_at = _tree_cpu_seconds(self.proc.pid), now
        return self._cpu

    def limit(self) -> float:
        kind, what = self.step
        if kind == "kernel":
            return self.kernel_timeout
        return compile_limit(len(what) if kind == "compile" else self.n, self.kernel_timeout)

    def over_limit(self) -> str | None:
        """Why the worker is to be given up now (its step ran too long), or None."""
        limit = self.limit()
        now, total = time.perf_counter(), self.cpu()
        if total > self.last_cpu:
            self.last_cpu, self.last_gain = total, now
        cpu = total - self.step_cpu
        if cpu > limit:
            return f"timed out after {cpu:.0f} s of CPU time (limit {limit:.0f} s)"
        stalled = now - max(self.last_gain, self.step_wall)
        if stalled > WALL_FACTOR * limit:
            return f"stalled: no CPU time for {stalled:.0f} s (CPU {cpu:.0f} s, limit {limit:.0f} s)"
        return None

    def where(self) -> str:
        """The step the worker was on, in words."""
        kind, what = self.step
        if kind == "kernel":
            return f"in its {what[1]} run"
        if kind == "compile":
            return f"compiling a module of {len(what)} kernel(s)"
        return "starting up"

    def stderr_tail(self, n: int = 1500) -> str:
        size = os.fstat(self.err.fileno()).st_size
        return os.pread(self.err.fileno(), n, max(0, size - n)).decode("utf-8", "replace")

    def close(self) -> None:
        self.out.close()
        self.err.close()


#: (first kernel index, its results in index order, the worker's times, a note when the
#: worker crashed or was killed)
Finished = tuple[int, list[dict[str, Any]], dict[str, float], str | None]


def run_pool(batches: list[tuple[int, int]], jobs: int, command: Callable[[int, int], list[str]],
             name_of: Callable[[int], str], kernel_timeout: float,
             log: Callable[[str], None] = print) -> Iterator[Finished]:
    """Runs each (first, n) of `batches` as `command(first, n)` on up to `jobs` workers at a
    time and yields each worker's results as it ends, its slot refilled first.  Every kernel
    gets exactly one result: a worker that crashed or was killed yields the results it
    printed plus a "crash" for the kernel it was on, and its unfinished kernels are queued
    again (see the module's docstring)."""
    pending: list[tuple[int, int, bool]] = [(f, n, False) for f, n in batches]
    running: list[Worker] = []

    def start(first: int, n: int, single: bool) -> None:
        out = tempfile.TemporaryFile(prefix="fuzz-out-")
        err = tempfile.TemporaryFile(prefix="fuzz-err-")
        # (a session of its own: a kill takes the processes it started, e.g. an LLVM worker)
        proc = subprocess.Popen(command(first, n), stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        running.append(Worker(first, n, proc, out, err, kernel_timeout, single))

    while pending or running:
        while pending and len(running) < jobs:
            start(*pending.pop(0))
        ended = None
        for w in running:
            w.read()
            code = w.proc.poll()
            if code is not None:
                w.read()
                ended = (w, None)
                break
            why = w.over_limit()
            if why is not None:
                try:
                    os.killpg(w.proc.pid, signal.SIGKILL)
                except OSError:
                    w.proc.kill()
                w.proc.wait()
                ended = (w, why)
                break
        if ended is None:
            time.sleep(POLL_SECONDS)
            continue
        w, killed = ended
        running.remove(w)
        try:
            yield _finish(w, killed, pending, name_of, log)
        finally:
            w.close()
    return


def _finish(w: Worker, killed: str | None, pending: list[tuple[int, int, bool]],
            name_of: Callable[[int], str], log: Callable[[str], None]) -> Finished:
    """What an ended worker gives (and the kernels it leaves to run again, queued first)."""
    results = w.results[:w.n]
    done = len(results)
    code = w.proc.returncode
    if killed is None and code == 0 and done == w.n:
        return w.first, results, w.times, None
    if killed is None:
        sig = -code if code < 0 else None
        why = f"worker died of signal {signal.Signals(sig).name}" if sig else f"worker exited with {code}"
        tail = w.stderr_tail()
        why += f" {w.where()}" + (f": {tail}" if tail.strip() else "")
    else:
        why = f"{killed} {w.where()}"
    span = f"batch {w.first}..{w.first + w.n - 1}"
    if done == w.n:     # every result is in: the worker died at its end (reported, kept)
        log(f"{span}: {why} after its last kernel")
        return w.first, results, w.times, why
    current = w.first + done
    shared_compile = w.step[0] in ("start-up", "compile") and w.n - done > 1 and w.compiles <= 1 \
        and not w.single
    if shared_compile:
        # the module's compile (or the start) broke: each unfinished kernel on its own
        log(f"{span}: {why}; its {w.n - done} unfinished kernels run again one by one")
        pending[:0] = [(i, 1, True) for i in range(current, w.first + w.n)]
        return w.first, results, w.times, why
    results.append({"name": name_of(current), "status": "crash", "detail": why})
    rest = w.first + w.n - current - 1
    if rest:
        # one by one already (the module broke on some kernel): the rest stays so
        one_by_one = w.single or w.compiles > 1
        log(f"{span}: kernel {current} crashed ({why[:300]}); kernels {current + 1}.."
            f"{w.first + w.n - 1} run again" + (" one by one" if one_by_one else ""))
        pending[:0] = [(i, 1, True) for i in range(current + 1, w.first + w.n)] if one_by_one \
            else [(current + 1, rest, False)]
    return w.first, results, w.times, why
