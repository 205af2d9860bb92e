"""Streams that run independently (runtime/cudart_async.c): a copy on one stream runs while a
kernel of another stream runs, per-stream order, cudaStreamWaitEvent, the legacy default
stream's implicit synchronization, events and stream queries while work is pending.

tests/programs/stream_overlap.cu, built with `cpuify nvcc`; the expected values are computed
by hand next to each assertion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_programs import _have_nvcc, build_program

pytestmark = pytest.mark.skipif(not _have_nvcc(), reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")


@pytest.fixture(scope="module")
def exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_program(tmp_path_factory.mktemp("streams"), "stream_overlap")


def run(exe: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # a kernel that waits for work the runtime never runs ends as a deadlock after 5 s
    # (cudaErrorLaunchTimeout) instead of hanging the test
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CPUIFY_DEADLOCK_TIMEOUT": "5", **env})


def test_book_shaped_single_and_double_stream_pipelines(exe: Path) -> None:
    # "CUDA by Example"'s basic_single_stream/basic_double_stream shape: the samples skip
    # themselves unless deviceOverlap; chunk c of out = a * 3 + b + c, checked on the host
    r = run(exe, "books")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        # kernels of two streams do not run at once (one grid at a time on the worker pool)
        "deviceOverlap 1 attr 1 asyncEngineCount 2 attr 2 concurrentKernels 0",
        "one stream wrong 0",
        "two streams wrong 0",
    ]


def test_book_pipelines_with_synchronous_runtime(exe: Path) -> None:
    r = run(exe, "books", CPUIFY_SYNC_LAUNCH="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[1:] == ["one stream wrong 0", "two streams wrong 0"]


def test_copy_on_one_stream_runs_while_a_kernel_of_another_waits_for_it(exe: Path) -> None:
    # the kernel spins until the flag is set; only the cudaMemcpyAsync on the other stream,
    # issued after the launch, sets it (5 -> out = 105).  A runtime that runs the copy after
    # the kernel never ends the kernel: cudaErrorLaunchTimeout from the deadlock detector.
    r = run(exe, "copy_feeds_kernel")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["copy cudaSuccess sync cudaSuccess kernel read 105"]


def test_stream_and_event_states_and_timing_order(exe: Path) -> None:
    # s1: e0, a kernel waiting for the host's flag (9 -> 109), e1, host fn 1; s3 waits for e1,
    # copies the kernel's result, host fn 3; s2 (non-blocking): memset 0, copy, e2, host fn,
    # all done while s1's kernel waits; then host fn 2 on s2 before the flag is set 30 ms later
    r = run(exe, "states")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "while waiting: s1 cudaErrorNotReady e0 cudaSuccess e1 cudaErrorNotReady "
        "s3 cudaErrorNotReady legacy cudaErrorNotReady elapsed cudaErrorNotReady",
        "s2 done while s1 waits: e2 cudaSuccess host fn 1 copied 0 s1 cudaErrorNotReady",
        "after: s3 copied 109 e2 before e1 1 waited >= 30ms 1",
        "host functions 3: 2 then 1 3",
        "end: s1 cudaSuccess s3 cudaSuccess e1 cudaSuccess",
    ]


def test_legacy_stream_orders_blocking_streams_not_non_blocking_ones(exe: Path) -> None:
    # a blocking stream's kernel waits for the host; a legacy-stream memset (out[1]) waits for
    # it, a blocking-stream memset (out[2]) for that; the non-blocking stream's memset and copy
    # (out[3]) finish meanwhile.  Memsets set bytes: 0x01010101 etc.
    r = run(exe, "legacy")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "free-running cudaSuccess done: out[3] 0x3030303 legacy cudaErrorNotReady "
        "blocking cudaErrorNotReady",
        "after: 109 0x1010101 0x2020202 0x3030303",
    ]


def test_destroying_streams_and_events_with_work_pending(exe: Path) -> None:
    # cudaStreamDestroy/cudaEventDestroy return at once while the stream's kernel waits for
    # the host; another stream works meanwhile (memset bytes 7: 0x07070707); after the flag
    # (9 -> 109) the last event is reached and a new stream reads the kernel's result
    r = run(exe, "destroy")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "destroy cudaSuccess cudaSuccess query cudaErrorNotReady other stream 0x7070707",
        "after 109",
    ]


def test_default_stream_per_thread(tmp_path: Path) -> None:
    # --default-stream per-thread: the main thread's kernel on its stream 0 waits for a flag
    # that another host thread's cudaMemcpyAsync on that thread's stream 0 sets (4 -> 104),
    # after a cudaMemcpy of its own; with one legacy stream for both, either copy would wait
    # for the kernel
    exe = build_program(tmp_path, "stream_overlap", "--default-stream", "per-thread")
    r = run(exe, "per_thread")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["mine cudaErrorNotReady theirs cudaSuccess copy cudaSuccess "
                                     "cudaSuccess cudaSuccess sync cudaSuccess kernel read 104"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
