"""Fork safety of the compiler's in-process state.

A child forked while another thread of the parent is inside NVRTC or LLVM inherits that
work half done: a lock held by a thread that does not exist in the child (it deadlocks at
its first compile) or a data structure in mid-update.  So every section of code that runs
NVRTC or LLVM in this process is a `compile_section()`; `os.fork()` waits (before it
forks) until no thread is inside one and keeps new ones from starting until it has forked,
then takes the locks of `hold_during_fork` (llvmlite's), and the child starts with fresh
locks (`renew_in_child`).  A fork therefore waits for the compile work under way in other
threads (a RawModule's build, an NVRTC call, an LLVM optimization), at most FORK_WAIT
seconds."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["FORK_WAIT", "compile_section", "hold_during_fork", "renew_in_child"]

#: The longest a fork waits for compile sections of other threads to end.
FORK_WAIT = 60.0


class _Gate:
    """Shared by compile sections (reentrant per thread), taken exclusively around fork."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.active = 0          # threads inside a section
        self.forking = 0         # forks waiting or under way
        self.local = threading.local()

    def __enter__(self) -> None:
        local = self.local
        depth = getattr(local, "depth", 0)
        if depth == 0:
            with self.cond:
                while self.forking:
                    self.cond.wait()
                self.active += 1
        local.depth = depth + 1

    def __exit__(self, *exc: object) -> None:
        local = self.local
        local.depth -= 1
        if local.depth == 0:
            with self.cond:
                self.active -= 1
                if self.active == 0:
                    self.cond.notify_all()

    def before_fork(self) -> None:
        mine = 1 if getattr(self.local, "depth", 0) else 0   # (forking from inside one)
        with self.cond:
            self.forking += 1
            self.cond.wait_for(lambda: self.active <= mine, timeout=FORK_WAIT)
        # then the locks of libraries that also serve calls outside sections (held briefly)
        self.held = [lock for lock in _held_during_fork if lock.acquire(timeout=FORK_WAIT)]

    def release_held(self) -> None:
        for lock in reversed(getattr(self, "held", [])):
            lock.release()
        self.held = []

    def after_fork_in_parent(self) -> None:
        self.release_held()
        with self.cond:
            self.forking -= 1
            self.cond.notify_all()


_gate = _Gate()


def compile_section() -> _Gate:
    """Context manager around code that runs NVRTC or LLVM (cheap; reentrant)."""
    return _gate


_held_during_fork: list[Any] = []


def hold_during_fork(lock: Any) -> None:
    """Have os.fork() take `lock` (after no thread is inside a compile section) and release
    it on both sides: for a library lock that guards every call into it (llvmlite's)."""
    _held_during_fork.append(lock)


def _fresh_gate_in_child() -> None:
    _gate.release_held()      # (taken by this thread before the fork)
    # the forking thread is the only one left: inside a section or not
    _gate.cond = threading.Condition(threading.Lock())
    _gate.active = 1 if getattr(_gate.local, "depth", 0) else 0
    _gate.forking = 0


os.register_at_fork(before=lambda: _gate.before_fork(),
                    after_in_parent=lambda: _gate.after_fork_in_parent(),
                    after_in_child=_fresh_gate_in_child)


def renew_in_child(namespace: dict[str, Any], name: str, factory: Callable[[], Any]) -> None:
    """In a forked child, `namespace[name] = factory()`: a module's lock starts unlocked
    there, whichever thread of the parent held it."""
    os.register_at_fork(after_in_child=lambda: namespace.__setitem__(name, factory()))
