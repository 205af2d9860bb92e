"""The alpha-beta model of distributed launches (cpuify.distributed.model): its arithmetic by
hand, scaling predictions on simulated trackers, and the link measured under mpiexec."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cpuify.distributed.model import (
    Launch, LaunchModel, LinkModel, fit_alpha_beta, predict_scaling, seconds_per_block,
    simulate_launch,
)
from cpuify.distributed.partition import choose_partition
from cpuify.distributed.tracker import BufferTracker

SRC = str(Path(__file__).resolve().parents[1] / "src")


@dataclass
class FP:
    reads: list[tuple[int, int]] = field(default_factory=list)
    writes: list[tuple[int, int]] = field(default_factory=list)
    atomics: list[tuple[int, int]] = field(default_factory=list)


B1 = 1024        # bytes per block: 256 floats


def halo_1d(box):  # type: ignore[no-untyped-def]
    (x0, x1), _, _ = box
    return {0: FP(reads=[(x0 * B1 - 4, x1 * B1 + 4)]), 1: FP(writes=[(x0 * B1, x1 * B1)])}


LINK = LinkModel(1e-6, 1e9)


def test_link_transfer_time() -> None:
    assert LINK.transfer_s(1000, 2) == pytest.approx(3e-6)
    assert LINK.transfer_s(0, 0) == 0
    assert str(LINK) == "latency 1.00 us, bandwidth 1.000 GB/s"
    with pytest.raises(ValueError, match="bandwidth > 0"):
        LinkModel(1e-6, 0)


def test_fit_alpha_beta_recovers_the_line() -> None:
    sizes = [0, 1000, 2000, 4000, 1 << 20]
    link = fit_alpha_beta(sizes, [5e-6 + n / 2e9 for n in sizes])
    assert link.latency_s == pytest.approx(5e-6) and link.bandwidth == pytest.approx(2e9)
    # noise that would put the intercept below zero: a line through the origin
    through = fit_alpha_beta([1000, 2000], [0.9e-6, 2.1e-6])
    assert through.latency_s == 0 and through.bandwidth == pytest.approx(
        (1000 ** 2 + 2000 ** 2) / (1000 * 0.9e-6 + 2000 * 2.1e-6))
    # an empty message gives the latency, even when big messages' noise would put a free
    # intercept below zero
    noisy = fit_alpha_beta([0, 1 << 20, 1 << 22], [3e-6, (1 << 20) / 4e9 - 2e-6, (1 << 22) / 4e9])
    assert noisy.latency_s == 3e-6 and 3.9e9 < noisy.bandwidth < 4.1e9
    with pytest.raises(ValueError, match="two message sizes"):
        fit_alpha_beta([8, 8], [1e-6, 1e-6])
    with pytest.raises(ValueError, match="do not grow"):
        fit_alpha_beta([8, 16], [2e-6, 1e-6])


def test_predict_by_hand() -> None:
    m = LaunchModel(seconds_per_block=1e-5, link=LINK, overhead_s=2e-6)
    # 4 busy ranks: a broadcast and a completion tree of 2 levels each; rank 1 is slowest
    t = m.predict([25, 25, 25, 25], [0, 25608, 25608, 25604])
    assert t == pytest.approx(2e-6 + 2 * 1e-6 * 2 + (1e-6 + 25608e-9 + 25 * 1e-5))
    assert m.predict([100], [0]) == pytest.approx(2e-6 + 100 * 1e-5)
    # idle ranks do not count; messages given explicitly
    assert m.predict([50, 50, 0], [0, 8, 0], [0, 3, 0]) == pytest.approx(
        2e-6 + 2 * 1e-6 * 1 + (3e-6 + 8e-9 + 50 * 1e-5))
    assert m([50, 50], [0, 8], [0, 3]) == m.predict([50, 50], [0, 8], [0, 3])
    with pytest.raises(ValueError, match="one entry per rank"):
        m.predict([1, 2], [0])


def test_launch_model_as_the_partition_time_model() -> None:
    """Cheap blocks on a slow link stay on one rank; expensive ones are split."""
    t = BufferTracker(100 * B1, 4)
    slow = LaunchModel(1e-7, LinkModel(1e-3, 1e6))
    assert not choose_partition((100, 1, 1), 4, halo_1d, {0: (t, 0)}, time_model=slow).split
    heavy = LaunchModel(1e-2, LinkModel(1e-3, 1e6))
    p = choose_partition((100, 1, 1), 4, halo_1d, {0: (t, 0)}, time_model=heavy)
    assert p.split and p.ranks_used == 4


def test_simulate_launch_updates_the_trackers() -> None:
    a, b = BufferTracker(12 * B1, 3), BufferTracker(12 * B1, 3)
    buffers = {0: (a, 0), 1: (b, 0)}
    p = choose_partition((12, 1, 1), 3, halo_1d, buffers)
    simulate_launch(p, halo_1d, buffers)
    assert [(lo, hi, sorted(r)) for lo, hi, r in b.segments()] == \
        [(0, 4 * B1, [0]), (4 * B1, 8 * B1, [1]), (8 * B1, 12 * B1, [2])]
    # rank 1 holds a copy of what it read of `a` (its slab and halo), the host all of it
    assert a.owned_by(1) == [(4 * B1 - 4, 8 * B1 + 4)]
    assert a.owned_by(0) == [(0, 12 * B1)]


def test_predict_scaling_of_a_ping_pong_stencil() -> None:
    """Jacobi-style: a -> b, then b -> a.  In the steady state each launch moves one 4-byte
    halo each way across each of the n - 1 boundaries between slabs."""
    m = LaunchModel(seconds_per_block=1e-5, link=LINK, overhead_s=2e-6)
    launches = [Launch((100, 1, 1), halo_1d, {0: ("a", 0), 1: ("b", 0)}),
                Launch((100, 1, 1), halo_1d, {0: ("b", 0), 1: ("a", 0)})]
    points = predict_scaling(launches, {"a": 100 * B1, "b": 100 * B1}, m, (1, 2, 4))
    assert [p.nranks for p in points] == [1, 2, 4]
    assert [p.bytes_moved for p in points] == [0, 2 * 8, 2 * 24]
    assert points[0].seconds == pytest.approx(2 * (2e-6 + 100 * 1e-5))
    # 4 ranks: a tree of 2 levels; ranks 1 and 2 fetch 2 pieces of 4 bytes, run 25 blocks
    assert points[2].seconds == pytest.approx(2 * (2e-6 + 4e-6 + 2e-6 + 8e-9 + 25e-5))
    assert all(p.split for p in points[2].partitions)
    # the first pass, from the host, moves far more: warm-up 0 counts it
    cold = predict_scaling(launches, {"a": 100 * B1, "b": 100 * B1}, m, (4,), warmup=0)
    assert cold[0].bytes_moved == (3 * 25 * B1 + 20) + 24


def test_seconds_per_block_takes_the_fastest_run() -> None:
    calls = []
    assert seconds_per_block(lambda: calls.append(1), 10, repeats=4) >= 0
    assert len(calls) == 4
    with pytest.raises(ValueError):
        seconds_per_block(lambda: None, 0)


def _mpi_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    # these put the pieces together by hand on every rank: no engine (whose servers would
    # take over at `import cpuify`)
    env["CPUIFY_DISTRIBUTED"] = "0"
    return env


def test_measure_link_under_mpiexec() -> None:
    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec")
    # (rank 0 prints what every rank got: the output of ranks interleaves mid-line)
    code = ("from mpi4py import MPI\n"
            "from cpuify.distributed.model import measure_link\n"
            "l = measure_link(sizes=(0, 4096, 1 << 20), repeats=5)\n"
            "got = MPI.COMM_WORLD.gather((l.latency_s, l.bandwidth))\n"
            "if MPI.COMM_WORLD.Get_rank() == 0:\n"
            "    print('LINK', len(got), len(set(got)), got[0][0], got[0][1], flush=True)\n")
    # two ranks on the 2-core CI machine: a third rank busy-polls in MPI while 0 and 1 time
    # their round trips, and on two cores every round trip then waits for a scheduler tick
    # (rank 0 measured 0.87 / 0.75 / 0.70 ms for 0 B / 4 KiB / 1 MiB: nothing to fit)
    proc = subprocess.run([mpiexec, "-n", "2", sys.executable, "-c", code], env=_mpi_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("LINK")]
    assert len(rows) == 1, proc.stdout + proc.stderr
    assert rows[0][:2] == ["2", "1"]            # every rank got rank 0's fit
    latency, bandwidth = float(rows[0][2]), float(rows[0][3])
    assert 0 <= latency < 1e-2 and bandwidth > 1e6


def test_measure_link_needs_two_ranks() -> None:
    pytest.importorskip("mpi4py")
    code = ("from cpuify.distributed.model import measure_link\n"
            "try:\n    measure_link()\nexcept ValueError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=_mpi_env(), capture_output=True,
                          text=True, timeout=120)
    assert "needs at least two ranks" in proc.stdout, proc.stdout + proc.stderr


def test_simulated_atomics_land_where_they_are_combined() -> None:
    def fp(box):  # type: ignore[no-untyped-def]
        (x0, x1), _, _ = box
        return {0: FP(atomics=[(0, 8)] if x0 >= 2 or x1 - x0 > 2 else [])}
    for nranks, owner in [(4, 0), (2, 1)]:
        t = BufferTracker(8, nranks, holders=(1 - owner,))
        p = choose_partition((4, 1, 1), nranks, fp, {0: (t, 0)})
        simulate_launch(p, fp, {0: (t, 0)})
        # 4 ranks: ranks 2 and 3 update it (combined on rank 0); 2 ranks: rank 1 alone
        assert t.segments() == [(0, 8, frozenset({owner}))], nranks


def test_pieces_together_under_mpiexec() -> None:
    """tests/data/distributed_pieces.py: a stencil over 3 ranks from the tracker, partition
    and packed-parameter box launches, by hand.  The kernel reads rows above and below, so
    x slabs (4 blocks: 2, 1, 1) fetch less than y slabs: ranks 1 and 2 fetch their 16
    columns of 50 rows from the host, and the second launch (b -> a) moves nothing."""
    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec")
    script = Path(__file__).resolve().parent / "data" / "distributed_pieces.py"
    proc = subprocess.run([mpiexec, "-n", "3", sys.executable, str(script)], env=_mpi_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["OK", str(2 * 16 * 50 * 4), "0", "0"], proc.stdout + proc.stderr


class _FakeComm:
    """Two ranks' view of a communicator, without MPI: rank 0 broadcasts what it has, the
    other rank receives what rank 0 sent (`sent`)."""

    def __init__(self, rank: int, sent: list) -> None:
        self.rank, self.sent = rank, sent

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return 2

    def Barrier(self) -> None:
        pass

    def Send(self, msg, dest: int, tag: int) -> None:
        pass

    def Recv(self, msg, source: int, tag: int) -> None:
        pass

    def bcast(self, value, root: int = 0):
        if self.rank == 0:
            self.sent.append(value)
            return value
        return self.sent[-1]


def test_measure_link_failure_reaches_every_rank(monkeypatch) -> None:
    """Times that fit no link (a busy machine) raise the same ValueError on every rank; rank
    0 used to raise before its broadcast and leave the other ranks waiting in it (the CI saw
    mpiexec hang until its timeout)."""
    pytest.importorskip("mpi4py")
    from cpuify.distributed import model

    def no_fit(sizes, seconds):
        raise ValueError("message times do not grow with their size: no bandwidth to fit")
    monkeypatch.setattr(model, "fit_alpha_beta", no_fit)
    sent: list = []
    for rank in (0, 1):
        with pytest.raises(ValueError, match="measuring the MPI link: message times do not grow"):
            model.measure_link(_FakeComm(rank, sent), sizes=(0, 64), repeats=1)
    assert len(sent) == 1 and isinstance(sent[0], str)
