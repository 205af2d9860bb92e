"""Work queued on its stream besides kernels and plain copies (runtime/cudart_async.c): graph
launches (their nodes in order on the launch's stream, after the exec's previous launch),
asynchronous copies to and from CUDA arrays, and cuBLAS/cuFFT/cuRAND routines that wait only
for the stream set on their handle.

tests/programs/stream_queues.cu and stream_libs.cu, built with `cpuify nvcc`.  Their kernels
spin on a flag the host sets only after it issued the work: a runtime that ran a graph
launch or an array copy at the call, after waiting for all work, never got there (the
deadlock detector ends the kernel: cudaErrorLaunchTimeout), and one whose library routines
waited for every stream held the host until another stream's host function gave up (3 s).
The expected values are computed by hand next to each assertion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_programs import _have_nvcc, build_program

pytestmark = pytest.mark.skipif(not _have_nvcc(), reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")


def _curand_include() -> str | None:
    from cpuify.nvcc.headers import curand_include
    from cpuify.nvcc.toolkit import find_toolkit
    return curand_include(find_toolkit())


@pytest.fixture(scope="module")
def queues(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_program(tmp_path_factory.mktemp("queues"), "stream_queues")


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    extra = ["-DWITH_CURAND", "-lcurand"] if _curand_include() else []
    return build_program(tmp_path_factory.mktemp("queue_libs"), "stream_libs", "-lcublas", "-lcufft", *extra)


def run(exe: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # a kernel waiting for work the runtime never runs ends as a deadlock after 5 s
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CPUIFY_DEADLOCK_TIMEOUT": "5", **env})


def test_graph_launch_is_queued_between_kernels_of_its_stream(queues: Path) -> None:
    # s1: a kernel writing a[i] = 7 + i once the host sets the flag, the graph (b = 2a, then
    # an event record node and a copy b -> c; d memset to bytes 1; a host node), an event,
    # a kernel out = b + 1000.  s2 waits for that event and copies b; s3 launches the same
    # exec again, which waits for the first launch.  Before the flag nothing of it has run.
    r = run(queues, "graph")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "launch cudaSuccess cudaSuccess; before the flag: e_in cudaErrorNotReady e_after "
        "cudaErrorNotReady s2 cudaErrorNotReady s3 cudaErrorNotReady host nodes 0",
        "s2 after e_after: b wrong 0",
        "after: out wrong 0 c wrong 0 d wrong 0 e_in cudaSuccess host nodes 2",
    ]


def test_graph_launch_on_the_legacy_stream_waits_for_blocking_streams(queues: Path) -> None:
    # the blocking stream's kernel (a[i] = 5 + i after the flag) comes before the graph on
    # the legacy stream; a non-blocking stream's memset and copy finish meanwhile
    r = run(queues, "graph_legacy")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "launch cudaSuccess; before the flag: legacy cudaErrorNotReady free-running done 1",
        "after: b wrong 0",
    ]


def test_graph_event_wait_node_waits_for_another_streams_record(queues: Path) -> None:
    # the graph's wait node waits for an event recorded after a kernel of another stream
    # (a[i] = 3 + i after the flag); its kernel node then reads a: b = 2 (3 + i)
    r = run(queues, "graph_wait")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "launch cudaSuccess; before the flag: consumer cudaErrorNotReady b[1] -1",
        "after: b wrong 0",
    ]


def test_async_copies_to_arrays_are_queued_before_a_texture_kernel(queues: Path) -> None:
    # s1: a host function holding the stream until the host goes on, one writing the copies'
    # sources (src[i] = i / 2, src3[i] = 100 + i), cudaMemcpy2DToArrayAsync and a
    # cudaMemcpy3DAsync (cudaMemcpyDefault) to two arrays, a texture read of each; another
    # stream is held meanwhile.  The copies are issued before the host releases s1: copies
    # run at the call would have held the host until s1's host function gave up (released 0).
    # Then a synchronous cudaMemcpy2DFromArray waits for a blocking stream's
    # cudaMemcpyToArrayAsync (src[i] = 7 i), which waits for a host function another host
    # thread releases.
    r = run(queues, "array")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "issued: s1 cudaErrorNotReady busy cudaErrorNotReady",
        "s1 held until the host went on 1; texels wrong 0; busy cudaErrorNotReady",
        "legacy copy from the array after the blocking stream's: wrong 0 released 1",
    ]


def test_cublas_routines_follow_their_handles_stream(libs: Path) -> None:
    # on stream s: a kernel x[i] = 2 + i (its flag set by another host thread 100 ms later),
    # cublasSaxpy y += 3 x (y = 1), a kernel alpha = 0.5 (200 ms), cublasSscal with that
    # device-memory alpha: y = 0.5 (1 + 3 (2 + i)).  Another stream stays held while they
    # run.  Then the synchronous cublasGetVector after a legacy-stream kernel writing x into
    # pinned memory returns x = 2 + i.
    r = run(libs, "cublas")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "saxpy 0 sscal 0 wrong 0; busy stream still held when they returned 1",
        "getvector 0 wrong 0",
    ]


def test_cufft_transform_follows_its_plans_stream(libs: Path) -> None:
    # a kernel on the plan's stream writes the input (interleaved re/im = 2 + k) after a
    # flag another host thread sets; the C2C transform's bin 0 is the sum of the inputs
    r = run(libs, "cufft")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["exec 0 bin0 right; busy stream still held when it returned 1"]


@pytest.mark.skipif(not _have_nvcc() or _curand_include() is None,
                    reason="NVIDIA's cuRAND headers: pip install 'cpuify[curand]'")
def test_curand_generation_follows_its_generators_stream(libs: Path) -> None:
    # the generation on the generator's stream overwrites what the kernel before it wrote
    # (values >= 2): the same values as a generator with the same seed on the legacy stream
    r = run(libs, "curand")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "generate 0 same as on the legacy stream 1; busy stream still held when it returned 1"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
