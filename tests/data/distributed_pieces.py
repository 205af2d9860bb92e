"""Run under mpiexec (tests/test_distributed_model.py): the distributed building blocks put
together by hand, without the engine: rank 0 packs a stencil launch, chooses the split from
hand-written footprints and the trackers, ships the packed parameters and the stale bytes of
each rank's read set; every rank rewrites the pointers to its own copies, runs its box with
Function._launch_packed, and the written bytes come back to rank 0 by the trackers' gather
plans.  Two launches (a -> b, b -> a): the second moves only halo rows.  Rank 0 prints
"OK <bytes moved in launch 1> <in launch 2>" when the result equals one launch on one rank
bit for bit."""

from __future__ import annotations

import struct

import numpy as np
from mpi4py import MPI

import cpuify
from cpuify.distributed.partition import choose_partition
from cpuify.distributed.tracker import BufferTracker

SRC = r'''
extern "C" __global__ void smooth(const float *in, float *out, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    float s = in[y * w + x];
    if (y > 0) s += in[(y - 1) * w + x];
    if (y + 1 < h) s += in[(y + 1) * w + x];
    out[y * w + x] = 0.5f * s;
}'''
W, H, TX, TY = 64, 50, 16, 4
GRID, BLOCK = ((W + TX - 1) // TX, (H + TY - 1) // TY, 1), (TX, TY, 1)
ROW = 4 * W


class FP:
    def __init__(self, reads=(), writes=()):  # type: ignore[no-untyped-def]
        self.reads, self.writes, self.atomics = list(reads), list(writes), []


def footprint(box):  # type: ignore[no-untyped-def]
    """Rows y0*TY-1 .. y1*TY of `in` (clamped), rows y0*TY .. y1*TY-1 of `out`, columns
    of the box's x range: one interval per row."""
    (x0, x1), (y0, y1), _ = box
    c0, c1 = 4 * x0 * TX, 4 * min(x1 * TX, W)
    rows_in = range(max(y0 * TY - 1, 0), min(y1 * TY + 1, H))
    rows_out = range(y0 * TY, min(y1 * TY, H))
    return {0: FP(reads=[(r * ROW + c0, r * ROW + c1) for r in rows_in]),
            1: FP(writes=[(r * ROW + c0, r * ROW + c1) for r in rows_out])}


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    fn = cpuify.RawModule(code=SRC).get_function("smooth").kernel
    slots = [fn.info.params[i][2] for i in (0, 1)]       # byte offsets of the two pointers
    mine = {"a": np.zeros((H, W), np.float32), "b": np.zeros((H, W), np.float32)}
    if rank == 0:
        rng = np.random.default_rng(11)
        mine["a"][:] = rng.standard_normal((H, W)).astype(np.float32)
        want_b = np.zeros_like(mine["a"])
        want_a = np.zeros_like(mine["a"])
        fn(GRID, BLOCK, (mine["a"], want_b, np.int32(W), np.int32(H)))
        fn(GRID, BLOCK, (want_b, want_a, np.int32(W), np.int32(H)))
    trackers = {k: BufferTracker(4 * W * H, n) for k in mine}
    moved = []
    for src, dst in (("a", "b"), ("b", "a")):
        buffers = {0: (trackers[src], 0), 1: (trackers[dst], 0)}
        plan = None
        if rank == 0:
            part = choose_partition(GRID, n, footprint, buffers)
            packed = fn._packed_params((mine[src], mine[dst], np.int32(W), np.int32(H)))
            plan = (part, packed)
        part, packed = comm.bcast(plan, root=0)
        # every rank fetches the stale parts of its read set (the plan is the same everywhere)
        fetched = 0
        for r, box in enumerate(part.boxes):
            if box is None:
                continue
            for param, fp in footprint(box).items():
                t, _ = buffers[param]
                name = src if param == 0 else dst
                for lo, hi, source in t.stale(r, fp.reads):
                    view = mine[name].view(np.uint8).reshape(-1)[lo:hi]
                    if rank == source:
                        comm.Send(view, dest=r, tag=lo)
                    elif rank == r:
                        comm.Recv(view, source=source, tag=lo)
                    t.received(r, lo, hi)
                    fetched += hi - lo
        box = part.boxes[rank]
        if box is not None:
            params = bytearray(packed)
            for slot, name in zip(slots, (src, dst)):
                struct.pack_into("<Q", params, slot, mine[name].ctypes.data)
            fn._launch_packed(GRID, BLOCK, bytes(params), 0, box)
        for r, b in enumerate(part.boxes):
            if b is not None:
                trackers[dst].wrote(r, footprint(b)[1].writes)
        moved.append(fetched)
    # the host gathers what it does not hold
    for name, t in trackers.items():
        for lo, hi, source in t.gather_plan(0, t.nbytes, 0):
            view = mine[name].view(np.uint8).reshape(-1)[lo:hi]
            if rank == source:
                comm.Send(view, dest=0, tag=lo)
            elif rank == 0:
                comm.Recv(view, source=source, tag=lo)
            t.received(0, lo, hi)
    if rank == 0:
        ok = mine["b"].tobytes() == want_b.tobytes() and mine["a"].tobytes() == want_a.tobytes()
        print("OK" if ok else "WRONG", moved[0], moved[1], part.dim, flush=True)


if __name__ == "__main__":
    main()
