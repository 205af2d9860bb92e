"""Asynchronous kernel launches in whole programs (runtime/cudart_async.c): the host goes on
after `kernel<<<...>>>()` until a call that synchronizes, as on a GPU.

tests/programs/async_launch.cu, built with `cpuify nvcc`; the expected values are computed
by hand next to each assertion."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from test_programs import _have_nvcc, build_program

pytestmark = pytest.mark.skipif(not _have_nvcc(), reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")


@pytest.fixture(scope="module")
def exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_program(tmp_path_factory.mktemp("async"), "async_launch")


def run(exe: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_host_thread_feeds_a_running_kernel(exe: Path) -> None:
    # Chai's CUDA-U PAD shape: block b spins on atomicAdd_system(&flags[b], 0) (managed
    # memory) until a host thread started after the launch sets it to b + 1, and answers
    # through done[b] (cudaHostAlloc memory) before the host sets the next flag.
    # cudaGetLastError right after the launch must not wait for the kernel.
    r = run(exe, "feed")
    assert r.returncode == 0, r.stdout + r.stderr
    # out[b * 64 + t] = (b + 1) * 1000 + t: 64 * 1000 * (1 + ... + 16) + 16 * (0 + ... + 63)
    assert r.stdout.splitlines() == ["launch cudaSuccess",
                                     "fed blocks 16 sum 8736256 out[70] 2006"]


def test_host_work_overlaps_the_kernel(exe: Path) -> None:
    # the host sees the kernel's first store while it runs (and the stream busy), works,
    # then releases it; sum of i % 7 for i < 10^6 = 142857 * 21 + (0 + 1) = 2999998 - 1
    r = run(exe, "overlap")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["kernel running: cudaErrorNotReady", "after sync: cudaSuccess",
                                     "host 2999997 kernel 7"]


def test_slow_host_is_no_deadlock(exe: Path) -> None:
    # The host sets the flag 0.8 s after the launch; the no-progress detector, at 0.2 s,
    # must not take that for a deadlock: no host thread waits for the kernel meanwhile.
    r = run(exe, "overlap", "800", CPUIFY_DEADLOCK_TIMEOUT="0.2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "host 2999997 kernel 7"


def test_flag_never_set_is_a_deadlock_once_the_host_waits(exe: Path) -> None:
    r = run(exe, "spin", CPUIFY_DEADLOCK_TIMEOUT="0.3")
    assert r.stdout.splitlines() == ["launched, host goes on", "sync cudaErrorLaunchTimeout",
                                     "then cudaErrorLaunchTimeout"]
    assert "kernel 'until_stopped(int volatile*, int*, int*)' failed in block (0, 0, 0): it can " \
        "make no progress" in r.stderr


def test_sync_launch_switch_restores_launches_at_the_call(exe: Path) -> None:
    # CPUIFY_SYNC_LAUNCH=1: the launch runs to its end at the call, so the kernel waits for a
    # host that cannot go on: the no-progress detector ends it
    r = run(exe, "overlap", CPUIFY_SYNC_LAUNCH="1", CPUIFY_DEADLOCK_TIMEOUT="0.3")
    assert r.returncode == 1
    assert r.stdout.splitlines()[0] == "kernel running: cudaErrorLaunchTimeout"
    assert "it can make no progress" in r.stderr


@pytest.mark.parametrize("sync", ["0", "1"])
def test_order_of_copies_and_launches_on_streams(exe: Path, sync: str) -> None:
    # a = i, +1 fifty times (s1); b = a + 1000 (s2, non-blocking, its copy ordered after the
    # fifty launches by an event, and s1's next writes after the copy by another); a[0] = 0
    # then +3; a = i + 53
    r = run(exe, "order", CPUIFY_SYNC_LAUNCH=sync)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["a[0] 3 a[9] 62 b[5] 1055"]


def test_failing_kernel_shows_at_the_next_synchronizing_call(exe: Path) -> None:
    r = run(exe, "fail")
    assert r.returncode == 0, r.stdout + r.stderr
    # the launch returns cudaSuccess; the memcpy after it waits and reports the fault; the
    # kernel queued after the failing one does not run
    assert r.stdout.splitlines() == ["launch cudaSuccess memcpy cudaErrorIllegalAddress",
                                     "last cudaErrorIllegalAddress then cudaSuccess",
                                     "sync cudaErrorIllegalAddress later kernel ran 0"]
    assert "kernel 'scatter(int*, int)' failed in block (0, 0, 0): invalid memory access " \
        "writing address 0x" in r.stderr


def test_timeout_of_an_async_launch(exe: Path) -> None:
    r = run(exe, "spin", CPUIFY_KERNEL_TIMEOUT="0.5", CPUIFY_DEADLOCK_TIMEOUT="120")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["launched, host goes on", "sync cudaErrorLaunchTimeout",
                                     "then cudaErrorLaunchTimeout"]
    assert "ran longer than CPUIFY_KERNEL_TIMEOUT" in r.stderr


def test_ctrl_c_during_an_async_launch_ends_the_program(exe: Path) -> None:
    env = {**os.environ, "CPUIFY_DEADLOCK_TIMEOUT": "120"}
    p = subprocess.Popen([str(exe), "spin"], stdout=subprocess.PIPE, text=True, env=env,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    guard = threading.Timer(60, p.kill)       # (a hang fails the test instead)
    guard.start()
    try:
        assert p.stdout is not None
        # the kernel runs and the host has gone on past the launch
        assert p.stdout.readline() == "launched, host goes on\n"
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == -signal.SIGINT
    finally:
        guard.cancel()
        p.kill()
        p.wait()


def test_device_printf_shows_at_the_next_synchronizing_call(exe: Path) -> None:
    # as a GPU's printf buffer: the kernel printed its first line before the host printed
    # its own, yet that line reaches stdout at cudaDeviceSynchronize, after the host's
    r = run(exe, "printf")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["host sees the kernel running", "device before the flag",
                                     "device after the flag", "host after sync"]


def test_host_threads_launching_in_a_loop_leave_frees_room(exe: Path) -> None:
    # NVIDIA's cuda-vmm blog sample's shape: threads launch short kernels into their own
    # streams without end while the main thread allocates and frees.  A stream's queue is
    # bounded (a launch into a full queue waits, as a GPU's launch queue blocks the host):
    # unbounded, the launchers outran the kernels and each free, waiting for all the work
    # issued before it, waited longer than the one before (the program never finished).
    r = run(exe, "launchers")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["frees 20 kernels counted all"]


def test_exit_with_a_launch_in_flight_waits_for_it(exe: Path) -> None:
    # main returns right after the launch; the kernel completes (its printf reaches stdout)
    # before the program's own atexit handler, registered before the launch, runs
    r = run(exe, "exit")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["main returns", "kernel done", "atexit sees 42"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
