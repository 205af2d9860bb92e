"""The reference interpreter's block scheduler: `BlockRun` runs the threads of one block
(`thread.py`) to completion with `cpuify_run_block`'s semantics (runtime/block_sched.c):
warp collectives per group of lanes, block barriers, soft and named barriers, forward
progress of threads parked in spin-wait loops.  machine.py's docstring has the rules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from cpuify.errors import LaunchError, UnsupportedError
from cpuify.interp.memory import alloc
from cpuify.interp.ops import mods
from cpuify.interp.tensor_cores import ldmatrix, movmatrix, stmatrix, warp_mma
from cpuify.interp.thread import EXITED, MATRIX_KINDS, RESUMED, Thread
from cpuify.interp.values import (
    mask,
    to_signed,
)
from cpuify.ir.core import Operation
from cpuify.lifting.tensor_cores import parse_ldmatrix, parse_matrix_op

if TYPE_CHECKING:
    from cpuify.interp.machine import _Launch

# --- the block scheduler ----------------------------------------------------------------------------

def _warp_exchange(lanes: list[Thread], group: int, op: Operation) -> None:
    """One warp collective among the lanes in `group` (bitmask over `lanes`), exactly as
    warp_exchange() in runtime/block_sched.c."""
    kind = op.attributes["kind"]
    m = mods(op)
    nlanes = len(lanes)
    members = [l for l in range(nlanes) if group >> l & 1]
    if kind in MATRIX_KINDS:
        _matrix_exchange(lanes, group, op)
        return
    for l in members:
        th = lanes[l]
        out, pred = 0, 1
        if kind == "shfl":
            bval, cval, segmask = th.xb & 31, th.xc & 31, (th.xc >> 8) & 31
            maxlane = (l & segmask) | (cval & ~segmask)
            minlane = l & segmask
            if "up" in m:
                j = l - bval
                pred = int(j >= maxlane)
            elif "down" in m:
                j = l + bval
                pred = int(j <= maxlane)
            elif "bfly" in m:
                j = l ^ bval
                pred = int(j <= maxlane)
            else:  # idx
                j = minlane | (bval & ~segmask)
                pred = int(j <= maxlane)
            # (what an H100 returns: the lane's own value when the source is outside the
            # segment; 0 when the source lane takes no part: not in the member mask, at no
            # shuffle with this mask, exited, or past the end of a partial warp)
            if not pred:
                out = th.xval
            elif j < 0 or j >= nlanes or not group >> j & 1:
                out = 0
            else:
                out = lanes[j].xval
        elif kind == "vote":
            ballot = sum(1 << x for x in members if lanes[x].xval & 1)
            if "ballot" in m:
                out = ballot
            elif "all" in m:
                out = int(ballot == group)
            elif "any" in m:
                out = int(ballot != 0)
            else:  # uni
                out = int(ballot == 0 or ballot == group)
        elif kind == "activemask":
            out = group
        elif kind == "match":
            vmask = mask(64) if "b64" in m else mask(32)
            same = sum(1 << x for x in members if lanes[x].xval & vmask == th.xval & vmask)
            if "any" in m:
                out = same
            else:
                pred = int(same == group)
                out = group if pred else 0
        elif kind == "redux":
            signed = "s32" in m
            vals = [lanes[x].xval & mask(32) for x in members]
            if "add" in m:
                acc = sum(vals) & mask(32)
            elif "min" in m or "max" in m:
                key = (lambda v: to_signed(v, 32)) if signed else (lambda v: v)
                acc = (min if "min" in m else max)(vals, key=key)
            else:
                acc = vals[0]
                for v in vals[1:]:
                    acc = acc & v if "and" in m else acc | v if "or" in m else acc ^ v
            out = acc
        elif kind != "syncwarp":
            raise UnsupportedError(f"unknown warp collective '{kind}'", line=op.attributes.get("line"))
        th.xout, th.xpred = out, pred


def _same_collective(a: Any, b: Operation) -> bool:
    """Whether scheduler state `a` is a lane waiting at a warp collective like `b`: of the
    same kind, with the same modifiers (another instruction of the kernel may be that)."""
    return a is not EXITED and a is not RESUMED and isinstance(a, Operation) and \
        a.name == "upir.warp_collective" and a.attributes.get("kind") == b.attributes.get("kind") \
        and sorted(mods(a)) == sorted(mods(b))




def _matrix_exchange(lanes: list[Thread], group: int, op: Operation) -> None:
    """wmma.mma / mma.sync / ldmatrix: all 32 lanes of the warp take part (.aligned)."""
    line = op.attributes.get("line")
    if len(lanes) != 32 or group != 0xFFFFFFFF:
        raise LaunchError(f"kernel '{lanes[0].launch.name}': a warp-wide matrix instruction "
                          f"(PTX line {line}) was reached by only some lanes of a warp (it needs "
                          "all 32: .sync.aligned)")
    mods_ = tuple(op.attributes["mods"])
    kind = str(op.attributes["kind"])
    if kind in ("ldmatrix", "stmatrix", "movmatrix"):
        spec = parse_ldmatrix(mods_, kind)
        assert not isinstance(spec, str)
        if kind == "ldmatrix":
            outs = ldmatrix(spec, [th.xregs[0] for th in lanes])
        elif kind == "stmatrix":
            stmatrix(spec, [th.xregs[0] for th in lanes], [th.xregs[1:] for th in lanes])
            outs = [[] for _ in lanes]
        else:
            outs = movmatrix([th.xregs[0] for th in lanes])
    else:
        spec_m = parse_matrix_op(str(op.attributes["family"]), mods_)
        assert not isinstance(spec_m, str)
        outs = warp_mma(spec_m, [th.xregs for th in lanes])
    for th, regs in zip(lanes, outs):
        th.xregs_out = regs


def _is_soft(s: Any) -> bool:
    """A thread at a soft barrier (interchanged loops: a point where the thread may stop,
    waiting for no other thread)."""
    return s is not EXITED and s is not RESUMED and s.name == "upir.barrier" and \
        bool(s.attributes.get("soft"))


def _is_named(s: Any) -> bool:
    """A thread waiting at a named barrier (bar.sync/bar.arrive with an id or a count)."""
    return s is not EXITED and s is not RESUMED and s.name == "upir.warp_collective" and \
        s.attributes["kind"] == "named_barrier"



class BlockRun:
    """Runs the threads of one block to completion."""

    def __init__(self, launch: _Launch, ctaid: tuple[int, int, int]) -> None:
        self.launch = launch
        self.ctaid = ctaid
        k = launch.kernel
        self.shared_size = k.shared_static + launch.dyn_shared
        self.shared, self.shared_base = alloc(max(self.shared_size, 1), 64)
        bx, by, bz = launch.block
        self.threads = [Thread(self, (x, y, z), (z * by + y) * bx + x)
                        for z in range(bz) for y in range(by) for x in range(bx)]

    def run(self) -> Iterator[bool]:
        """Runs the block; yields whenever every live thread waits for other threads (a
        round of the parked threads moved none of them), with whether any thread got
        anywhere since the last yield.  `stuck_at`: (thread, PTX line) of a waiting thread."""
        threads = self.threads
        n = len(threads)
        gens = [t.run() for t in threads]
        state: list[Any] = [EXITED] * n      # the sync op a thread waits at, or EXITED
        self.stuck_at = (0, 0)

        def advance(i: int) -> None:
            try:
                state[i] = next(gens[i])
            except StopIteration:
                state[i] = EXITED

        for i in range(n):
            advance(i)
        arrived = [0] * 16                   # named barriers: bar.arrive counts not yet used
        moved = True
        while True:
            live = [i for i in range(n) if state[i] is not EXITED]
            if not live:
                return
            soft = next((state[i] for i in live if _is_soft(state[i])), None)
            if soft is not None:
                # threads at a soft barrier wait for nobody: the group at the first thread's
                # goes on (the next iteration of an interchanged loop) before anything that
                # waits for other threads is looked at
                group = [i for i in live if state[i] is soft]
                self._check_lockstep(soft, group)
                for i in group:
                    advance(i)
                moved = True
                continue
            if self._named_round(state, advance, arrived, len(live)):
                moved = True
                continue
            spinning = [i for i in live
                        if getattr(state[i], "name", None) in ("spin", "upir.spin_wait")]
            if any(self._in_warp(state[i]) for i in live):
                if self._warp_round(state, advance, incomplete=not spinning):
                    moved = True
                    continue
            if spinning:
                # the threads that wait for others go round their loops once more
                went = False
                for i in spinning:
                    at = state[i]
                    advance(i)
                    if state[i] is not at:
                        went = True
                if went:
                    moved = True
                    continue
                first = spinning[0]
                self.stuck_at = (first, state[first].attributes.get("line", 0))  # type: ignore[union-attr]
                yield moved
                moved = False
                continue
            moved = True
            barriers = {state[i] for i in live}
            if any(_is_named(b) for b in barriers):
                raise LaunchError(
                    f"kernel '{self.launch.name}' failed in block {self.ctaid}: threads wait at "
                    "named barriers (bar.sync id, count) that cannot complete: waiting at PTX "
                    f"lines {', '.join(sorted(str(b.attributes.get('line')) for b in barriers))}")
            if len(barriers) > 1:
                lines = sorted(str(b.attributes.get("line")) for b in barriers)  # type: ignore[union-attr]
                raise LaunchError(
                    f"kernel '{self.launch.name}' failed in block {self.ctaid}: not all threads "
                    "of the block reached the same __syncthreads() (a barrier inside a branch "
                    f"that only some threads take): live threads wait at barriers on PTX lines "
                    f"{', '.join(lines)}")
            (bar,) = barriers
            red = bar.attributes.get("reduce")  # type: ignore[union-attr]
            if red is not None:
                preds = [threads[i].xval & 1 for i in live]
                out = sum(preds) if red == "popc" else int(all(preds)) if red == "and" else int(any(preds))
                for i in live:
                    threads[i].xout = out
            for i in live:
                advance(i)

    def _check_lockstep(self, soft: Operation, group: list[int]) -> None:
        """The promise of a soft barrier's `lockstep` header arguments (the iteration
        counters of interchange-thread-strided-loops, which compiled code keeps once per
        block): every thread resuming there together holds the same value in each."""
        header = soft.parent
        indices = soft.attributes.get("lockstep") or []
        if header is None or not indices:
            return
        for index in indices:
            arg = header.args[int(index)]
            values = {self.threads[i].env.get(arg) for i in group}
            if len(values) > 1:
                raise LaunchError(
                    f"kernel '{self.launch.name}' failed in block {self.ctaid}: the threads "
                    f"resuming at the soft barrier of the loop at PTX line "
                    f"{soft.attributes.get('line')} hold different values "
                    f"({', '.join(str(v) for v in sorted(values, key=str))}) in its lockstep "
                    f"argument {arg.hint or index}, which the IR says is the same in all of "
                    "them (an interchange of a loop the threads do not enter together: a "
                    "compiler bug; run with --disable-pass=interchange-thread-strided-loops)")

    def _in_warp(self, s: Any) -> bool:
        """Whether a thread in scheduler state `s` waits for lanes of its warp (at a warp
        collective or a warp step), not for the block."""
        return s is not EXITED and s is not RESUMED and (
            s.name == "upir.warp_collective" and s.attributes.get("kind") != "named_barrier"
            or s in self.launch.kernel.steps)

    def _named_round(self, state: list, advance: Any, arrived: list[int], nlive: int) -> bool:
        """Named barriers (as cpuify_run_block): threads at bar.arrive add to their
        barrier's count and go on; threads waiting at bar.sync on a barrier are released
        `count` at a time (0: every live thread), counting arrivals, in thread order.
        Returns whether any thread was resumed."""
        threads = self.threads
        index = self.launch.kernel.sync_index
        resumed: dict[int, list[int]] = {}
        waiting: dict[int, list[int]] = {}
        for i, s in enumerate(state):
            if not _is_named(s):
                continue
            bar = threads[i].xb & 15
            if s.attributes.get("arrive"):
                arrived[bar] += 1
                resumed.setdefault(index[s], []).append(i)
            else:
                waiting.setdefault(bar, []).append(i)
        for bar, ids in sorted(waiting.items()):
            while ids:
                need = threads[ids[0]].xc or nlive
                used = min(arrived[bar], need)
                if used + len(ids) < need:
                    break
                arrived[bar] -= used
                go, ids = ids[:need - used], ids[need - used:]
                for i in go:
                    resumed.setdefault(index[state[i]], []).append(i)
        for i in (i for r in resumed.values() for i in r):
            state[i] = RESUMED
        for r in sorted(resumed):
            for i in sorted(resumed[r]):
                advance(i)
        return bool(resumed)

    def _warp_round(self, state: list, advance: Any, incomplete: bool = True) -> bool:
        """Exchange the warp collectives that can run, then resume their lanes (as
        cpuify_run_block): per warp, lanes waiting at one collective with one member mask
        form a group; a group runs when every live lane of its mask has arrived (pass 0);
        if no group of the block is complete, incomplete groups run anyway (pass 1, unless
        not `incomplete`).  Resumed groups run in the order of their sync point, threads in
        linear order.  Returns whether a group ran."""
        threads = self.threads
        n = len(threads)
        index = self.launch.kernel.sync_index
        steps = self.launch.kernel.steps
        resumed: dict[int, list[int]] = {}
        for pass_ in (0, 1) if incomplete else (0,):
            if resumed:
                break
            for base in range(0, n, 32):
                lanes = threads[base:base + 32]
                live = sum(1 << m for m in range(len(lanes)) if state[base + m] is not EXITED)
                # of the lanes at warp steps, those at the first in program order go on: the
                # others wait for them (the reconvergence of a pre-Volta warp)
                lowest = min((index[s] for s in state[base:base + 32] if s in steps),
                             default=None)
                done = 0
                for l in range(len(lanes)):
                    s = state[base + l]
                    if s is EXITED or s is RESUMED or done >> l & 1 or not self._in_warp(s):
                        continue
                    step = s in steps
                    if step and index[s] != lowest:
                        continue
                    masked = not step and s.attributes["kind"] != "activemask"
                    mask = lanes[l].xmask
                    # a `.sync` collective meets the lanes at any collective of the same
                    # kind and modifiers with the same member mask (PTX ISA: "executed
                    # shfl.sync with the same qualifiers and the same membermask")
                    group = sum(1 << m for m in range(l, len(lanes))
                                if (state[base + m] is s or masked and not done >> m & 1 and
                                    _same_collective(state[base + m], s))
                                and (not masked or lanes[m].xmask == mask))
                    done |= group
                    want = mask & live if masked else group
                    if pass_ == 0 and want & ~group:
                        continue                 # members still on their way: wait for them
                    if not step:
                        _warp_exchange(lanes, group, s)
                    members = [base + m for m in range(len(lanes)) if group >> m & 1]
                    for i in members:
                        resumed.setdefault(index[state[i]], []).append(i)   # each at its own op
                        state[i] = RESUMED
        for r in sorted(resumed):
            for i in sorted(resumed[r]):
                advance(i)
        return bool(resumed)
