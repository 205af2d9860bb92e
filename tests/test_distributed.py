"""Distributed execution of the Python API over MPI ranks (cpuify.distributed.engine,
docs/distributed.md): the workloads of benchmarks/distributed_workloads.py give
bit-identical results with 1, 2 and 3 ranks and without MPI; launches are planned from the
access maps (halo rows only, nothing for data that stayed put); kernels that cannot be split
run whole on rank 0; a failure on a server reaches rank 0 as an exception."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = str(ROOT / "src")
sys.path.insert(0, str(ROOT))

from benchmarks import distributed_workloads as wl  # noqa: E402

pytest.importorskip("mpi4py")
pytest.importorskip("islpy")
from cpuify.distributed.engine import mpiexec_path  # noqa: E402

MPIEXEC = mpiexec_path()


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("CPUIFY_DISTRIBUTED", None)
    env["CPUIFY_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _run(cmd: list[str], timeout: float = 420, **extra: str) -> subprocess.CompletedProcess[str]:
    """Runs an MPI job in its own process group, killed whole when it overstays."""
    proc = subprocess.Popen(cmd, env=_env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{' '.join(cmd)} hung:\n{out}\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _mpi(n: int, script: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    if MPIEXEC is None:
        pytest.skip("no mpiexec (pip install mpich)")
    return _run([MPIEXEC, "-n", str(n), sys.executable, script, *args],
                **{"CPUIFY_DISTRIBUTED_STATS": "1", **extra})


@pytest.fixture(scope="module")
def reference() -> dict[str, str]:
    """The workloads' digests without MPI, in this process."""
    return {name: wl.run(name, "small")["digest"] for name in wl.WORKLOADS}


def _results(proc: subprocess.CompletedProcess[str]) -> dict[str, dict]:  # type: ignore[type-arg]
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            out[r["name"]] = r
    return out


def test_workloads_match_numpy_references() -> None:
    """The workloads themselves compute the right thing (an independent check of what the
    digests below compare)."""
    bins = wl.histogram(1 << 14, 64)[0]
    rng = np.random.default_rng(6)
    data = rng.integers(0, 1 << 30, 1 << 14, dtype=np.uint32)
    assert np.array_equal(bins, np.bincount(data % 64, minlength=64).astype(np.uint32))
    c = wl.matmul(64)[0]
    rng = np.random.default_rng(4)
    a = rng.random((64, 64), dtype=np.float32)
    b = rng.random((64, 64), dtype=np.float32)
    assert np.allclose(c, a @ b, rtol=1e-5)
    out = wl.transpose(70, 40)[0]
    rng = np.random.default_rng(5)
    assert np.array_equal(out, rng.random((40, 70), dtype=np.float32).T)


@pytest.mark.parametrize("ranks", [2, 3])
def test_workloads_bit_identical_over_ranks(ranks: int, reference: dict[str, str]) -> None:
    got = _results(_mpi(ranks, str(ROOT / "benchmarks" / "distributed_workloads.py"), "small"))
    assert {k: v["digest"] for k, v in got.items()} == reference
    for name in ("stencil2d", "stencil3d", "nbody", "matmul", "transpose", "pipeline", "histogram"):
        assert got[name]["distributed"] == got[name]["launches"], got[name]
        assert got[name]["whole_on_rank0"] == 0
    # affine kernels move the stale parts of their read sets, plus the few bytes of the
    # gaps closed between rows (plan.GAP: a stencil's boundary columns, 2 of 48 here)
    for name in ("stencil2d", "stencil3d", "nbody", "matmul", "transpose"):
        r = got[name]
        assert r["bytes_minimum"] <= r["bytes_moved"] <= 1.05 * r["bytes_minimum"], r
    # halo exchanges overlap the slabs' interiors (3 ranks: slabs of 5-6 block rows)
    if ranks == 3:
        assert got["stencil2d"]["overlapped"] > 0, got["stencil2d"]
    # the scatter (writes through an index array) cannot be split: it ran whole on rank 0
    assert got["gather"]["whole_on_rank0"] == 1


def test_one_rank_engine_is_today(reference: dict[str, str]) -> None:
    """CPUIFY_DISTRIBUTED=1 with one rank: the engine plans every launch, moves nothing."""
    got = _results(_mpi(1, str(ROOT / "benchmarks" / "distributed_workloads.py"), "small",
                        CPUIFY_DISTRIBUTED="1"))
    assert {k: v["digest"] for k, v in got.items()} == reference
    assert all(v["bytes_moved"] == 0 and v["ranks"] == 1 for v in got.values())


SCRIPT = textwrap.dedent(r'''
    import json, sys
    import numpy as np
    import cpuify
    from cpuify.distributed import engine, resident, fetch

    src = r"""
    extern "C" __global__ void jacobi(const float *in, float *out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= 1 && i < n - 1) out[i] = (in[i - 1] + in[i] + in[i + 1]) / 3.0f;
    }
    extern "C" __global__ void boom(int *p, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i == n - 1) __trap();
        p[i] = i;
    }"""
    m = cpuify.RawModule(code=src)
    k = m.get_function("jacobi")
    eng = engine.get()
    n = 4096
    a = np.arange(n, dtype=np.float32)
    b = a.copy()
    out = {}
    # default mode: every launch starts from rank 0's arrays and ends with them current
    k((n // 128,), (128,), (a, b, np.int32(n)))
    out["first"] = float(b[2000])
    a[:] = 1.0                      # the host writes between launches: seen by every rank
    k((n // 128,), (128,), (a, b, np.int32(n)))
    out["after_host_write"] = float(b[3000])
    with resident():
        k((n // 128,), (128,), (a, b, np.int32(n)))
        moved = eng.stats.bytes_moved
        k((n // 128,), (128,), (a, b, np.int32(n)))     # same data, nothing new to move
        out["repeat_moved"] = eng.stats.bytes_moved - moved
        k((n // 128,), (128,), (b, a, np.int32(n)))
        fetch(a)
        out["fetched"] = [float(a[n // 2]), float(a[n - 2])]
    try:
        m.get_function("boom")((n // 128,), (128,), (np.zeros(n, np.int32), np.int32(n)))
        out["boom"] = "no error"
    except cpuify.CpuifyError as e:
        out["boom"] = str(e)
    print(json.dumps(out), flush=True)
''')


def test_host_writes_residency_and_errors(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    proc = _mpi(3, str(script))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["first"] == pytest.approx(2000.0)
    assert got["after_host_write"] == 1.0
    assert got["repeat_moved"] == 0
    # a[n-2] averages b[n-3..n-1] = 1, 1 and n-1 (b's last element, never written)
    assert got["fetched"] == [1.0, pytest.approx((2 + 4095) / 3)]
    # the trap ran in the last block, on the last rank: rank 0 names it
    assert "boom" in got["boom"] and "rank 2" in got["boom"], got["boom"]


def test_servers_leave_with_rank0(tmp_path: Path) -> None:
    """A script that imports cpuify and never launches (or fails) ends every rank."""
    quiet = tmp_path / "q.py"
    quiet.write_text("import cpuify\nprint('rank0 done')\n")
    proc = _mpi(3, str(quiet))
    assert proc.returncode == 0 and proc.stdout.count("rank0 done") == 1, proc.stderr
    failing = tmp_path / "f.py"
    failing.write_text("import cpuify\nraise SystemExit('rank0 gives up')\n")
    proc = _mpi(2, str(failing))
    assert proc.returncode != 0 and "rank0 gives up" in proc.stderr


def test_plan_moves_halo_rows_only() -> None:
    """The plan of a 2D stencil over 4 (simulated) ranks: split along y, each rank fetches
    one row above and one below its slab, and a second launch on the same data moves
    nothing (no MPI needed: planning only)."""
    import cpuify
    from cpuify.distributed import plan
    from cpuify.distributed.api_front import PyKernel
    from cpuify.distributed.engine import _Buffer
    from cpuify.distributed.tracker import BufferTracker

    n = 64
    fn = cpuify.RawModule(code=wl.STENCIL2D).get_function("jacobi2d").kernel
    ref = PyKernel(fn)

    class Dry:
        size = 4
        exact_stats = True
        buffers = {1: _Buffer(1, n * n * 4, 0, tracker=BufferTracker(n * n * 4, 4)),
                   2: _Buffer(2, n * n * 4, 0, tracker=BufferTracker(n * n * 4, 4))}

    layout = ref.param_layout
    params = bytearray(fn.info.param_size)
    params[layout[2][2]:layout[2][2] + 4] = n.to_bytes(4, "little")
    slots = [(layout[0][2], 1, 0), (layout[1][2], 2, 0)]
    step = plan.plan_launch(Dry, ref, (4, 4, 1), (16, 16, 1), 0, bytes(params), slots)
    assert step.reason is None
    assert [b[1] for b in step.launch.boxes] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert all(m.src == 0 for m in step.launch.moves)
    fetched = {r: sum(m.hi - m.lo for m in step.launch.moves if m.dst == r and m.buf == 1)
               for r in range(4)}
    # in the output, the boundary elements between the rows a rank writes (two per row
    # boundary: the gaps closed in its write set, which it must hold before it runs)
    gaps = {r: sum(m.hi - m.lo for m in step.launch.moves if m.dst == r and m.buf == 2)
            for r in range(4)}
    assert gaps == {0: 0, 1: 15 * 8, 2: 15 * 8, 3: 14 * 8}
    # rank r runs rows 16r .. 16r+15 of the interior (1..n-2): it reads those rows whole
    # and columns 1..n-2 of the rows above and below its slab; the gaps of up to plan.GAP
    # bytes closed, that is from column 1 of the row above to column n-2 of the row below
    assert fetched == {0: 0, 1: (17 * n + 62) * 4, 2: (17 * n + 62) * 4, 3: (16 * n + 62) * 4}
    # the exact minimum: the stale bytes of the read sets themselves
    assert step.minimum == (2 * (16 * n + 2 * (n - 2)) + 15 * n + 2 * (n - 2)) * 4
    step.commit()
    again = plan.plan_launch(Dry, ref, (4, 4, 1), (16, 16, 1), 0, bytes(params), slots)
    assert again.launch.moves == []


THREADS = textwrap.dedent(r'''
    import threading
    import numpy as np
    import cpuify
    k = cpuify.RawKernel(r"""
    extern "C" __global__ void inc(float *a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) a[i] += 1.0f;
    }""", "inc")
    n = 1 << 14
    arrays = [np.zeros(n, np.float32) for _ in range(3)]

    def work(a):
        for _ in range(25):
            k((n // 256,), (256,), (a, np.int32(n)))

    threads = [threading.Thread(target=work, args=(a,)) for a in arrays]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(all((a == 25).all() for a in arrays), flush=True)
''')


def test_host_threads_take_turns(tmp_path: Path) -> None:
    """Launches from several host threads at once: the engine's steps stay in one order."""
    script = tmp_path / "t.py"
    script.write_text(THREADS)
    proc = _mpi(2, str(script))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "True"
