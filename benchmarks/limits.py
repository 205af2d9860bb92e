"""Commands run under a CPU-time limit, for the coverage tool (benchmarks/coverage.py) and its
recipes.

On a loaded machine (two cores shared by many processes, a program getting a few per cent
of a CPU) a wall-clock timeout says a slow build or run hung when it was only starved.  A
command here is stopped once it and every process it started (a shell, `make`, the
compilers, the program) have used `cpu_limit` seconds of CPU time (user + system), polled
from /proc as tools/fuzz.py does for its workers, or once `wall_factor` times that has
passed on the wall clock: a backstop for a command that waits (sleeps, blocks on input)
without using CPU.  Both times are reported.

The command runs in a session of its own: its CPU time is the sum over the processes of
that session (their own time and that of the children they have waited for), and the whole
session is killed at the limit, not only the shell at its top.  A process that leaves the
session (setsid) or outlives its parent uncounted is not followed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: wall-clock backstop as a multiple of the CPU-time limit
WALL_FACTOR = 10.0

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Limited:
    """What a command did: its exit status (None when it was stopped at a limit), its
    output, the CPU and wall-clock seconds it used, and which limit stopped it ("cpu",
    "wall" or "")."""
    returncode: int | None
    stdout: str
    stderr: str
    cpu_s: float
    wall_s: float
    stopped: str = ""

    def why(self, what: str, cpu_limit: float, wall_factor: float = WALL_FACTOR) -> str:
        """A line saying which limit stopped `what` ("build", "setup `make`", ...)."""
        if self.stopped == "cpu":
            return (f"{what} used more than {cpu_limit:g} s of CPU time "
                    f"({self.wall_s:.0f} s of wall-clock time)")
        return (f"{what} ran past the wall-clock backstop of {wall_factor * cpu_limit:g} s "
                f"({wall_factor:g}x its CPU-time limit) having used {self.cpu_s:.1f} s of CPU "
                "time (waiting, not computing)")


def session_cpu_seconds(session: int) -> float:
    """CPU time (user + system) of the live processes of `session` and of the children they
    have waited for; 0.0 where /proc cannot say."""
    ticks = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0.0
    for name in entries:
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) != session:      # (state ppid pgrp session ...)
                continue
            ticks += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        except (OSError, IndexError, ValueError):
            continue
    return ticks / _TICKS


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_limited(cmd: str | list[str], *, cpu_limit: float, wall_factor: float = WALL_FACTOR,
                shell: bool = False, cwd: str | Path | None = None,
                env: dict[str, str] | None = None) -> Limited:
    """Runs `cmd` (stdin from /dev/null, output captured as text, undecodable bytes replaced)
    until it exits or reaches a limit; a command stopped at a limit has its whole session
    killed."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        p = subprocess.Popen(cmd, shell=shell, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                             stdout=out, stderr=err, start_new_session=True)
        cpu, stopped, status, pause = 0.0, "", None, 0.02
        while True:
            # wait4: the exit status and the CPU time of the command with every child it
            # waited for, read when it is reaped
            pid, raw, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                status = os.waitstatus_to_exitcode(raw)
                cpu = max(cpu, usage.ru_utime + usage.ru_stime)
                break
            cpu = max(cpu, session_cpu_seconds(p.pid))
            wall = time.perf_counter() - start
            if cpu > cpu_limit or wall > wall_factor * cpu_limit:
                stopped = "cpu" if cpu > cpu_limit else "wall"
                _kill_session(p.pid)
                _, raw, usage = os.wait4(p.pid, 0)
                cpu = max(cpu, usage.ru_utime + usage.ru_stime)
                break
            time.sleep(pause)
            pause = min(1.0, pause * 2)
        p.returncode = status if status is not None else -signal.SIGKILL   # (reaped here)
        # what the command left running in its session goes too (a daemon of a test)
        _kill_session(p.pid)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        return Limited(status, out.read().decode(errors="replace"),
                       err.read().decode(errors="replace"), cpu, wall, stopped)
