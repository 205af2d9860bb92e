"""Planning one distributed launch: the partition, the transfers before it, what the
tracker records after it (engine.py runs the plan)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from cpuify.analysis.access_maps import merge_intervals
from cpuify.distributed.partition import Box
from cpuify.distributed.tracker import place

if TYPE_CHECKING:
    from cpuify.distributed.engine import Engine, KernelRef, _Launch, _Move

Intervals = list[tuple[int, int]]

#: atomic operations whose partial results fold: (NumPy type, fold, identity)
_FOLDS: dict[str, tuple[Any, Callable[..., Any], Any]] = {}
for _t, _np in (("u32", np.uint32), ("s32", np.int32), ("u64", np.uint64), ("s64", np.int64),
                ("b32", np.uint32), ("b64", np.uint64)):
    _info = np.iinfo(_np)
    _FOLDS[f"add.{_t}"] = (_np, np.add, 0)
    _FOLDS[f"or.{_t}"] = (_np, np.bitwise_or, 0)
    _FOLDS[f"xor.{_t}"] = (_np, np.bitwise_xor, 0)
    _FOLDS[f"and.{_t}"] = (_np, np.bitwise_and, _info.max if _t[0] == "u" or _t[0] == "b" else -1)
    _FOLDS[f"min.{_t}"] = (_np, np.minimum, _info.max)
    _FOLDS[f"max.{_t}"] = (_np, np.maximum, _info.min)


@dataclass
class BufferSets:
    """One rank's byte sets of one buffer for one launch."""
    reads: Intervals = field(default_factory=list)
    writes: Intervals = field(default_factory=list)     # every byte written (must)
    may_writes: Intervals = field(default_factory=list)  # may be written (over-approximated)
    atomics: Intervals = field(default_factory=list)
    atomic_ops: set[str] = field(default_factory=set)
    atomic_result_used: bool = False


@dataclass
class Step:
    """A planned launch: the broadcast, why it runs whole on rank 0 (None: distributed),
    the minimum bytes its partition needs moved, and the tracker updates after it."""
    launch: "_Launch"
    reason: str | None
    minimum: int
    updates: list[Callable[[], None]] = field(default_factory=list)

    def commit(self) -> None:
        for u in self.updates:
            u()


def union(a: Intervals, b: Intervals) -> Intervals:
    """The bytes of a or b (sorted, disjoint, touching intervals merged)."""
    return merge_intervals([iv for iv in a + b if iv[1] > iv[0]])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    out: Intervals = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def total(a: Intervals) -> int:
    return sum(hi - lo for lo, hi in a)


def _values(layout: Sequence[tuple[str, str, int, int]], params: bytes) -> list[int | None]:
    """Each parameter's integer value (None: not an integer scalar)."""
    out: list[int | None] = []
    for name, t, off, size in layout:
        if t[0] in "bsu" and t[1:].isdigit() and size == int(t[1:]) // 8 and size in (1, 2, 4, 8):
            out.append(int.from_bytes(params[off:off + size], "little", signed=t[0] == "s"))
        else:
            out.append(None)
    return out


def scalar_values(layout: Sequence[tuple[str, str, int, int]], params: bytes) -> dict[str, int]:
    """The integer scalar parameters of a launch by name (what the access maps take)."""
    return {p[0]: v for p, v in zip(layout, _values(layout, params)) if v is not None}


def _relabel(lay: "_Layout", to: dict[int, int]) -> "_Layout":
    """The layout with its buffers renamed by `to` (the interval lists shared)."""
    def keys(d: dict[int, Any]) -> dict[int, Any]:
        return {to[k]: v for k, v in d.items()}
    return _Layout(lay.reason, lay.boxes, [keys(d) for d in lay.per_rank], keys(lay.fold_of),
                   [keys(d) for d in lay.need], [keys(d) for d in lay.written],
                   [[(box, keys(need)) for box, need in ps] for ps in lay.pieces],
                   [keys(d) for d in lay.gaps])


def buffer_sets(access: Any, scalars: dict[str, int], grid: tuple[int, int, int],
                block: tuple[int, int, int], box: Box, params_at: dict[int, tuple[int, int]],
                nbytes: dict[int, int]) -> dict[int, BufferSets]:
    """A box's byte sets per buffer: the kernel's per-parameter footprint moved by each
    pointer's offset in its buffer and clipped to the buffer (several parameters may
    point into one buffer)."""
    fp = access.footprint(scalars, grid, block, box)
    out: dict[int, BufferSets] = {}
    by_index = {p.index: p for p in access.params}
    for index, f in fp.items():
        where = params_at.get(index)
        if where is None:
            continue
        bid, off = where
        n = nbytes[bid]
        s = out.setdefault(bid, BufferSets())
        p = by_index.get(index)
        # (a footprint whose runs were too many to list is a hull: its writes are may-writes)
        exact = bool(getattr(p, "writes_exact", False)) and bool(getattr(f, "writes_exact", True))
        s.reads = union(s.reads, place(f.reads, off, n))
        w = place(f.writes, off, n)
        if exact:
            s.writes = union(s.writes, w)
        else:
            s.may_writes = union(s.may_writes, w)
        a = place(f.atomics, off, n)
        if a:
            s.atomics = union(s.atomics, a)
            s.atomic_ops |= set(getattr(p, "atomic_ops", ()) or ())
            s.atomic_result_used |= bool(getattr(p, "atomic_result_used", True))
    return out


def _fold_kind(ops: set[str]) -> str | None:
    """The one foldable operation of a set of atomic operations, if there is one."""
    if len(ops) == 1:
        (op,) = ops
        if op in _FOLDS:
            return op
    return None


@dataclass
class _Layout:
    """The tracker-independent part of a launch's plan: who runs which box, what each rank
    reads (and must hold before: may-writes, atomics it does not fold), what it writes,
    which atomic targets fold.  The same for every launch of the same kernel with the same
    arguments on the same buffers (an iteration): cached."""
    reason: str | None
    boxes: list[Box | None]
    per_rank: list[dict[int, BufferSets]]
    fold_of: dict[int, str]
    need: list[dict[int, Intervals]]
    written: list[dict[int, Intervals]]
    #: per rank, its box cut in three along the split dimension (first slab of blocks, the
    #: middle, the last) with what each piece needs before it runs: the pieces needing
    #: nothing a launch fetches run while the transfers are in flight
    pieces: list[list[tuple[Box, dict[int, Intervals]]]] = field(default_factory=list)
    #: per rank and buffer, (its write set with the small gaps closed, the exact one): the
    #: gap bytes (written by nobody) must be current on the rank before it runs, since it
    #: then claims the whole closed set
    gaps: list[dict[int, tuple[Intervals, Intervals]]] = field(default_factory=list)


def _layout(engine: "Engine", ref: "KernelRef", grid: tuple[int, int, int],
            block: tuple[int, int, int], params: bytes, params_at: dict[int, tuple[int, int]],
            unknown_pointers: bool, single_reason: str | None) -> _Layout:
    size = engine.size
    bufs = engine.buffers
    nbytes = {bid: b.nbytes for bid, b in bufs.items()}
    access = ref.access
    reason = single_reason
    if reason is None and access is None:
        reason = "no access maps"
    if reason is None and not access.distributable:
        reason = access.reason or "not distributable"
    if reason is None and unknown_pointers:
        reason = "a pointer argument points outside every known buffer"
    scalars = scalar_values(ref.param_layout, params)
    full: Box = ((0, grid[0]), (0, grid[1]), (0, grid[2]))

    def sets_of(box: Box) -> dict[int, BufferSets]:
        return buffer_sets(access, scalars, grid, block, box, params_at, nbytes)

    boxes: list[Box | None] = [full] + [None] * (size - 1)
    per_rank: list[dict[int, BufferSets]] = []
    fold_of: dict[int, str] = {}
    if reason is None:
        from cpuify.distributed.partition import choose_partition
        where = {index: (bufs[bid].tracker, boff) for index, (bid, boff) in params_at.items()}
        inexact = {p.index for p in access.params if not p.writes_exact}
        uncombinable = {p.index for p in access.params
                        if p.atomics is not None and not _foldable(p)}
        part = choose_partition(grid, size, lambda box: access.footprint(scalars, grid, block, box),
                                where, inexact_writes=inexact, uncombinable_atomics=uncombinable)
        if part.split or size == 1:
            boxes = list(part.boxes)
            per_rank = [sets_of(b) if b is not None else {} for b in boxes]
            fold_of = _shared_atomics(per_rank)
        else:
            reason = part.reason
    if reason is not None:
        if access is not None and access.distributable and not unknown_pointers:
            per_rank = [sets_of(full)] + [{} for _ in range(size - 1)]
        else:
            # anything may be read or written: rank 0 gathers every buffer, keeps them after
            per_rank = [{bid: BufferSets(may_writes=[(0, n)], reads=[(0, n)])
                         for bid, n in nbytes.items() if n}] + [{} for _ in range(size - 1)]
        fold_of = {}
    need: list[dict[int, Intervals]] = []
    written: list[dict[int, Intervals]] = []
    for r, sets in enumerate(per_rank):
        need.append({})
        written.append({})
        for bid, st in sets.items():
            n = union(st.reads, st.may_writes)
            w = union(st.writes, st.may_writes)
            if bid not in fold_of:
                n = union(n, st.atomics)
                w = union(w, st.atomics)
            elif r == 0:
                n = union(n, st.atomics)
                for other in per_rank:      # the folded targets are rank 0's afterwards
                    if bid in other:
                        w = union(w, other[bid].atomics)
            need[r][bid] = n
            if w:
                written[r][bid] = w
    gaps = _coarsen(need, written)
    pieces: list[list[tuple[Box, dict[int, Intervals]]]] = []
    if reason is None and size > 1:
        for box in boxes:
            pieces.append(_pieces(box, grid, sets_of, fold_of) if box is not None else [])
    return _Layout(reason, boxes, per_rank, fold_of, need, written, pieces, gaps)


#: byte gaps up to this size between the intervals a rank needs or writes are closed up: a
#: stencil's rows, which skip the boundary elements, then make one interval per plane
#: instead of one per row (the planning costs Python time per interval); the gap bytes
#: are fetched too (a rank then holds them, read or not, so may take them as written)
GAP = 32


def coalesce(iv: Intervals, gap: int) -> Intervals:
    """Sorted disjoint intervals with the gaps up to `gap` bytes closed."""
    out: Intervals = []
    for lo, hi in iv:
        if out and lo - out[-1][1] <= gap:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The bytes of `a` not in `b` (both sorted and disjoint)."""
    return [(lo, hi) for lo, hi, _ in _minus([(lo, hi, 0) for lo, hi in a], b)]


def _minus(pieces: list[tuple[int, int, int]], b: Intervals) -> list[tuple[int, int, int]]:
    """The parts of sorted (lo, hi, source) pieces outside `b`, one pass over both."""
    out: list[tuple[int, int, int]] = []
    j = 0
    for lo, hi, src in pieces:
        while j < len(b) and b[j][1] <= lo:
            j += 1
        k = j
        while lo < hi and k < len(b) and b[k][0] < hi:
            if b[k][0] > lo:
                out.append((lo, b[k][0], src))
            lo = max(lo, b[k][1])
            k += 1
        if lo < hi:
            out.append((lo, hi, src))
    return out


def _coarsen(need: list[dict[int, Intervals]], written: list[dict[int, Intervals]]
             ) -> list[dict[int, tuple[Intervals, Intervals]]]:
    """Close small gaps in each rank's sets (GAP), per buffer, where that keeps the ranks'
    written bytes apart.  Returns per rank the write sets whose gaps were closed: (closed,
    exact); the rank must hold the gap bytes before it runs (nobody writes them)."""
    gaps: list[dict[int, tuple[Intervals, Intervals]]] = [{} for _ in written]
    bids = {bid for ws in written for bid in ws}
    for bid in bids:
        coarse = [coalesce(ws.get(bid, []), GAP) for ws in written]
        seen: Intervals = []
        clash = False
        for c in coarse:
            if intersect(c, seen):
                clash = True
                break
            seen = union(seen, c)
        if clash:
            continue
        for r, c in enumerate(coarse):
            if c and len(c) < len(written[r][bid]):
                gaps[r][bid] = (c, written[r][bid])
                written[r][bid] = c
    for ns in need:
        for bid, n in ns.items():
            ns[bid] = coalesce(n, GAP)
    return gaps


def _pieces(box: Box, grid: tuple[int, int, int], sets_of: Callable[[Box], dict[int, BufferSets]],
            fold_of: dict[int, str]) -> list[tuple[Box, dict[int, Intervals]]]:
    """A rank's box in three pieces along the dimension it was split on (none if it was
    not, or is under three blocks deep there), each with what it needs to hold first."""
    dims = [d for d in range(3) if box[d] != (0, grid[d])]
    if len(dims) != 1 or box[dims[0]][1] - box[dims[0]][0] < 3:
        return []
    d = dims[0]
    lo, hi = box[d]
    out = []
    for a, b in ((lo, lo + 1), (lo + 1, hi - 1), (hi - 1, hi)):
        sub = list(box)
        sub[d] = (a, b)
        piece: Box = (sub[0], sub[1], sub[2])
        need = {bid: coalesce(union(union(st.reads, st.may_writes),
                                    st.atomics if bid not in fold_of else []), GAP)
                for bid, st in sets_of(piece).items()}
        out.append((piece, need))
    return out


def _stages(lay: _Layout, moves: list[Any]) -> list[tuple[list[Box], list[Box]] | None]:
    """Per rank, the pieces of its box that need none of the bytes it fetches (they run
    during the transfers) and the others (after): None where there is nothing to overlap."""
    incoming: dict[int, dict[int, Intervals]] = {}
    for m in moves:
        incoming.setdefault(m.dst, {}).setdefault(m.buf, []).append((m.lo, m.hi))
    out: list[tuple[list[Box], list[Box]] | None] = []
    for r, pieces in enumerate(lay.pieces):
        got = incoming.get(r)
        if not pieces or not got:
            out.append(None)
            continue
        got = {bid: union(ivs, []) for bid, ivs in got.items()}
        early = [p for p, need in pieces
                 if not any(intersect(need.get(bid, []), ivs) for bid, ivs in got.items())]
        late = [p for p, need in pieces
                if any(intersect(need.get(bid, []), ivs) for bid, ivs in got.items())]
        out.append((early, late) if early and late else None)
    return out


def plan_launch(engine: "Engine", ref: "KernelRef", grid: tuple[int, int, int],
                block: tuple[int, int, int], shared_mem: int, params: bytes,
                slots: list[tuple[int, int, int]], *, unknown_pointers: bool = False,
                single_reason: str | None = None) -> Step:
    from cpuify.distributed.engine import _Launch, _Move

    bufs = engine.buffers
    offsets = {off: i for i, (_, _, off, _) in enumerate(ref.param_layout)}
    params_at = {offsets[off]: (bid, boff) for off, bid, boff in slots if off in offsets}
    cacheable = ref.access is not None and ref.access.distributable and not unknown_pointers
    cache: dict[Any, _Layout] | None = getattr(engine, "plan_cache", None)
    lay = None
    if cache is not None and cacheable:
        # layouts are cached by the launch's shape, its buffers numbered in parameter order:
        # the same for every iteration, swapped buffers and arrays made anew included (the
        # split chosen at a shape's first launch stays)
        local: dict[int, int] = {}
        for index in sorted(params_at):
            local.setdefault(params_at[index][0], len(local))
        pointer_offsets = {off for off, _, _ in slots}
        scalars = tuple(sorted((n, v) for (n, _, off, _), v in
                               zip(ref.param_layout, _values(ref.param_layout, params))
                               if off not in pointer_offsets and v is not None))
        shape = tuple(sorted((i, local[bid], boff, bufs[bid].nbytes)
                             for i, (bid, boff) in params_at.items()))
        key = (ref.key, grid, block, scalars, shape, single_reason, engine.size)
        canonical = cache.get(key)
        if canonical is None:
            lay = _layout(engine, ref, grid, block, params, params_at, unknown_pointers,
                          single_reason)
            if len(cache) > 256:
                cache.clear()
            cache[key] = _relabel(lay, local)
        else:
            lay = _relabel(canonical, {k: bid for bid, k in local.items()})
    if lay is None:
        lay = _layout(engine, ref, grid, block, params, params_at, unknown_pointers, single_reason)

    moves: list[_Move] = []
    minimum = 0
    exact = getattr(engine, "exact_stats", False)
    for r, sets in enumerate(lay.per_rank):
        for bid, st in sets.items():
            tr = bufs[bid].tracker
            if exact:
                minimum += tr.stale_bytes(r, st.reads)
            for lo, hi, src in tr.stale(r, lay.need[r][bid]):
                moves.append(_Move(bid, lo, hi, src, r))
            closed = lay.gaps[r].get(bid) if lay.gaps else None
            if closed is not None:
                # the gap bytes of a closed write set it does not hold (not what it writes)
                for a, b, src in _minus(tr.stale(r, closed[0]), closed[1]):
                    moves.append(_Move(bid, a, b, src, r))
    # the tracker learns the copies only after every fetch is planned from the old state
    got: dict[tuple[int, int], Intervals] = {}
    for m in moves:
        got.setdefault((m.buf, m.dst), []).append((m.lo, m.hi))
    for (bid, rank), ivs in got.items():
        bufs[bid].tracker.received_many(rank, ivs)
    fills: list[tuple[int, int, int, bytes]] = []
    partials: list[_Move] = []
    for bid, op in lay.fold_of.items():
        np_type, _, identity = _FOLDS[op]
        pattern = np.array([identity], dtype=np_type).tobytes()
        for r, sets in enumerate(lay.per_rank):
            st = sets.get(bid)
            if r == 0 or st is None:
                continue
            for lo, hi in st.atomics:
                fills.append((bid, lo, hi, pattern))
                partials.append(_Move(bid, lo, hi, r, 0))
    updates = [lambda tr=bufs[bid].tracker, r=r, w=w: tr.wrote(r, w)
               for r, ws in enumerate(lay.written) for bid, w in ws.items()]
    launch = _Launch(ref.key, grid, block, shared_mem, params, slots, list(lay.boxes), moves,
                     fills, partials, folds=dict(lay.fold_of), stages=_stages(lay, moves))
    return Step(launch, lay.reason, minimum, updates)


def _foldable(p: Any) -> bool:
    """Whether a parameter's atomics can run as per-rank partials folded on rank 0."""
    return _fold_kind(set(p.atomic_ops)) is not None and not p.atomic_result_used


def _shared_atomics(per_rank: list[dict[int, BufferSets]]) -> dict[int, str]:
    """The buffers whose atomic targets several ranks update (the partition checked that
    their operation folds), with that operation."""
    out: dict[int, str] = {}
    bids = {bid for sets in per_rank for bid in sets}
    for bid in bids:
        seen: Intervals = []
        shared = False
        ops: set[str] = set()
        for sets in per_rank:
            s = sets.get(bid)
            if s is None:
                continue
            ops |= s.atomic_ops
            shared = shared or bool(intersect(s.atomics, seen))
            seen = union(seen, s.atomics)
        kind = _fold_kind(ops)
        if shared and kind is not None:
            out[bid] = kind
    return out


def fold(engine: "Engine", move: "_Move", partial: np.ndarray, op: str) -> None:
    """Rank 0: fold one server's partial of an atomic target into rank 0's instance."""
    np_type, ufunc, _ = _FOLDS[op]
    buf = engine.buffers[move.buf]
    import ctypes
    n = move.hi - move.lo
    raw = (ctypes.c_char * n).from_address(buf.address + move.lo)
    mine = np.frombuffer(raw, dtype=np_type)
    ufunc(mine, partial.view(np_type), out=mine)
