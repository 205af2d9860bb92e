"""Memory layout decisions shared by code generation, the runtime glue and the Python API:
the per-block context struct, the per-worker scratch area, shared-memory offsets."""

from __future__ import annotations

from dataclasses import dataclass, field

# cpuify_block_ctx (must match runtime/cpuify_rt.h)
CTX_FIELDS = ("params", "dims", "shared", "scratch", "state", "xval", "xb", "xc", "xmask", "xout",
              "xpred", "slots", "local")
CTX_U32_FIELDS = ("bx", "by", "bz", "nthreads", "error", "dyn_shared", "local_size", "live_end")
CTX_SIZE = 8 * len(CTX_FIELDS) + 4 * len(CTX_U32_FIELDS)

# state[tid] encoding used by generated segments and the C block scheduler
STATE_EXITED = -1
STATE_WAIT = 0x10000          # waiting at sync point s: STATE_WAIT | s
STATE_UNKNOWN = -2**31        # a segment's return value when threads may have diverged

# error codes returned by block functions (runtime/cpuify_rt.h)
ERR_BARRIER_DIVERGENCE = 1
ERR_TRAP = 2
ERR_WARP_DIVERGENCE = 3
ERR_ASSERT = 4
ERR_STACK_OVERFLOW = 10
ERR_DEADLOCK = 11             # runtime only: every thread waits for memory nobody writes

# sync kinds understood by the C scheduler (cpuify_run_block)
SYNC_KINDS = {
    "barrier": 0, "barrier.popc": 1, "barrier.and": 2, "barrier.or": 3,
    "soft": 4,       # a loop header of an interchanged loop: threads need not meet there
    "yield": 5,      # the back edge of a spin-wait loop: the thread lets the others run
    "barrier.named": 8, "barrier.arrive": 9,    # bar.sync/bar.arrive id, count
    "syncwarp": 10, "shfl.up": 11, "shfl.down": 12, "shfl.bfly": 13, "shfl.idx": 14,
    "vote.all": 20, "vote.any": 21, "vote.uni": 22, "vote.ballot": 23,
    "activemask": 30, "match.any": 31, "match.all": 32,
    "lockstep": 33,  # a warp-level step of legacy warp-synchronous code (warp-lockstep pass)
    "redux.add": 40, "redux.min.u32": 41, "redux.max.u32": 42, "redux.min.s32": 43,
    "redux.max.s32": 44, "redux.and": 45, "redux.or": 46, "redux.xor": 47,
}
SYNC_64BIT = 0x100            # flag: 64-bit values (match.*.b64)
SYNC_STATIC = 0x200           # flag: a static shuffle (every thread there: no exchange needed)


def align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@dataclass
class ScratchLayout:
    """Per-thread bytes of each scratch array; the runtime multiplies by the block size."""
    has_sync: bool
    slot_bytes: int             # live-across-sync values, all slots of one thread
    local_bytes: int            # .local depot of one thread (16-byte multiple)

    def per_thread(self) -> int:
        n = 0
        if self.has_sync:
            # state, xval and the two buffers of static shuffles, xb, xc, xmask, xout, xpred
            n += 4 + 3 * 8 + 4 + 4 + 4 + 8 + 4
        return n + self.slot_bytes + self.local_bytes

    def scratch_bytes(self, nthreads: int) -> int:
        # each array starts 64-byte aligned; 512 bytes of guard zones around `xval` and each
        # buffer of static shuffles (kernel_abi.XVAL_GUARD)
        return self.per_thread() * nthreads + 64 * 12 + (3 * 512 if self.has_sync else 0)


@dataclass
class SharedLayout:
    offsets: dict[str, int] = field(default_factory=dict)   # variable -> byte offset
    static_size: int = 0
    dynamic_offset: int = 0      # where extern __shared__ arrays start
