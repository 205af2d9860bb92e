"""nvcc's unrolled counted loops, and the proof that they run one body T times in order.

For a strided loop whose stride is computed before the loop, nvcc computes the trip count
`T = (n - i0 - 1) /u s + 1` and unrolls: a remainder of `c = T & (U-1)` iterations and a
main loop unrolled U times, in one of three arrangements (remainder loop first; the main
loop first, for integer sums; the remainder peeled into `if`s inside an outer loop).
`match_unrolled_loop` recognises them and proves, with the closed forms of
analysis/evolution.py, that together they run one body (the remainder loop's, or the main
loop's first copy) T times, one iteration after another: transforms/reroll.py puts the
simple loop in their place.  See that module for what is proven and what is refused.

A loop with step 1 (`for (c = c0; c < n; c++)`, a thread walking its own row) has no
division: nvcc computes `q = n - c0 - 1` directly (T = q + 1) and unrolls it in the first two
arrangements (the remainder first when c0 is not a constant).  It is the same proof with
s = 1; whether such a loop is worth re-rolling is the caller's decision (`per_thread`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cpuify.analysis.evolution import (
    IndexRange,
    NotAnalysable,
    Sym,
    Syms,
    evaluate_ops,
    read_only_load,
)
from cpuify.ir.core import (
    Block,
    BlockArgument,
    Operation,
    OpResult,
    Region,
    Value,
    predecessors,
)
from cpuify.ir.dialects import REGISTRY

#: attribute on the back edges of nvcc's loops that reroll-loops keeps behind its guard
FALLBACK = "reroll_fallback"


@dataclass
class UnrolledLoop:
    """What the proof found: the remainder loop is the body to keep; the rest is nvcc's
    arrangement around it, left as it was behind the guard."""
    split: Block            # the guard goes at its end (its branch starts nvcc's loops)
    remainder_pre: Block    # the remainder loop's preheader (its ops are cloned)
    remainder: Block        # the single-block remainder loop
    count_arg: int          # the remainder loop's countdown argument
    index_arg: int | None   # its index argument (None: it carries none; one is added)
    init_map: dict[Value, Value]    # values the preheader reads, as they are on entry
    exit: Block             # where both end
    exit_values: list[Value]        # what the simple loop passes to `exit` (its last
    #                                 iteration's values, or values from before the loops)
    stride: Value | None    # s (None: 1, a loop with step 1: no division, no stride value)
    start: Value            # i0
    bound: Value            # n
    test_line: object
    fallback: list[Operation]       # the back edges of nvcc's loops
    # one copy of the unrolled loop's body instead (a remainder peeled into `if`s):
    body_ops: list[Operation] | None = None     # the ops of the copy, in order
    index_alias: Value | None = None            # the value they read as the index


def _cond_br(block: Block) -> Operation | None:
    term = block.terminator
    return term if term is not None and term.name == "cf.cond_br" and len(term.successors) == 2 \
        else None


def _br(block: Block) -> Operation | None:
    term = block.terminator
    return term if term is not None and term.name == "cf.br" and len(term.successors) == 1 \
        else None


def _setp(v: Value, *, cmp: str, ty: str) -> Operation | None:
    """The `setp.cmp.ty` that defines v, if it does."""
    if isinstance(v, OpResult) and v.op.name == "ptx.setp" and len(v.op.operands) == 2:
        mods = v.op.attributes.get("mods", ())
        if cmp in mods and ty in mods and len(mods) == 2:
            return v.op
    return None


def _def(v: Value, name: str) -> Operation | None:
    return v.op if isinstance(v, OpResult) and v.op.name == name else None


def _single_block_loop(block: Block) -> tuple[Operation, int] | None:
    """(terminator, index of the back edge) when `block` branches to itself and one exit."""
    term = _cond_br(block)
    if term is None or term.successors.count(block) != 1:
        return None
    return term, term.successors.index(block)


def _main_loop_entry(main: Block, preds: dict[Block, list[Block]]
                     ) -> tuple[Operation, int, Block, Block, Operation] | None:
    """The unrolled main loop `main` (one block branching to itself, not a kept fallback),
    entered from one preheader whose only predecessor ends in a conditional branch whose
    second edge, without arguments, goes to that preheader: (main's terminator, the index of
    its back edge, the preheader, that predecessor, its terminator), or None."""
    loop = _single_block_loop(main)
    if loop is None or loop[0].attributes.get(FALLBACK):
        return None
    pre = [p for p in preds[main] if p is not main]
    if len(pre) != 1 or len(preds[main]) != 2 or _br(pre[0]) is None or len(preds[pre[0]]) != 1:
        return None
    (before,) = preds[pre[0]]
    term = _cond_br(before)
    if term is None or term.successors[1] is not pre[0] or term.successor_args[1]:
        return None
    return loop[0], loop[1], pre[0], before, term


def match_unrolled_loop(region: Region, main: Block, uniform: Callable[[], set[Value]],
                        preds: dict[Block, list[Block]] | None = None,
                        per_thread: Callable[[Block], bool] | None = None
                        ) -> UnrolledLoop | None:
    """The remainder + unrolled main loop whose main loop is `main`, proven to run the
    remainder loop's body T times (see the module docstring), or None.  Taken: a
    thread-strided loop (a block-uniform stride, a start that differs between threads), and
    a loop with step 1 where `per_thread(main)` says so (None: never)."""
    preds = preds if preds is not None else predecessors(region)

    def accept(stride: Value | None, start: Value) -> bool:
        if stride is None:
            return per_thread is not None and per_thread(main)
        return stride in uniform() and start not in uniform()
    try:
        return _match(region, main, accept, preds) or \
            _match_main_first(region, main, accept, preds) or \
            _match_peeled(region, main, accept, preds)
    except NotAnalysable:
        return None


Accept = Callable[[Value | None, Value], bool]


def _quotient(syms: Syms, quotient: Value, inside: set[Block], join: Block
              ) -> tuple[Sym, Sym, Value | None, Sym] | None:
    """nvcc's `q = (n - i0 - 1) /u s` as (q's symbol, the dividend's, s, s's symbol); a loop
    with step 1 has no division (q is the dividend, s None, its symbol 1), and q may be
    computed in the join of the two loops (pure ops on values from before them)."""
    division = _def(quotient, "ptx.div")
    if division is not None:
        if division.attributes.get("mods", ()) != ["u32"]:
            return None
        return syms.outside(quotient, inside), syms.outside(division.operands[0], inside), \
            division.operands[1], syms.outside(division.operands[1], inside)
    if _defined_in(quotient, inside):
        if not isinstance(quotient, OpResult) or quotient.op.parent is not join:
            return None
        q = evaluate_ops(syms, join.ops[:join.ops.index(quotient.op) + 1], {},
                         inside).values[quotient]
    else:
        q = syms.outside(quotient, inside)
    return q, q, None, syms.aff(32, 1)


def _match(region: Region, main: Block, accept: Accept,
           preds: dict[Block, list[Block]]) -> UnrolledLoop | None:
    # --- the shape: split -> [remainder] -> join -> [main] -> exit --------------------------
    entry = _main_loop_entry(main, preds)
    if entry is None:
        return None
    main_term, main_back, main_pre_block, join, join_term = entry
    main_exit = main_term.successors[1 - main_back]
    exit_block = join_term.successors[0]
    # (nvcc's main loop leaves through an empty block that branches to the common exit)
    if main_exit is not exit_block and (
            _br(main_exit) is None or len(main_exit.ops) != 1 or main_exit.args or
            main_exit.successors[0] is not exit_block or preds[main_exit] != [main] or
            main_term.successor_args[1 - main_back]):
        return None
    big = _setp(join_term.operands[0], cmp="lt", ty="u32")          # q < U - 1: no main loop
    if big is None:
        return None
    quotient = big.operands[0]
    join_preds = preds[join]
    if len(join_preds) != 2:
        return None
    split = next((p for p in join_preds if _cond_br(p) is not None), None)
    if split is None:
        return None
    remainder_exit = next(p for p in join_preds if p is not split)
    split_term = _cond_br(split)
    assert split_term is not None
    if split_term.successors[0] is not join or split_term.successor_args[1]:
        return None
    remainder_pre = split_term.successors[1]
    none_left = _setp(split_term.operands[0], cmp="eq", ty="s32")   # c == 0: no remainder
    if none_left is None or preds[remainder_pre] != [split] or _br(remainder_pre) is None:
        return None
    remainder = remainder_pre.successors[0]
    loop = _single_block_loop(remainder)
    if loop is None or remainder is remainder_pre or len(preds[remainder]) != 2:
        return None
    remainder_term, remainder_back = loop
    if remainder_term.successors[1 - remainder_back] is not remainder_exit or \
            remainder_term.successor_args[1 - remainder_back] or remainder_exit.args or \
            len(remainder_exit.ops) != 1 or _br(remainder_exit) is None or \
            preds[remainder_exit] != [remainder]:
        return None
    inside = {remainder_pre, remainder, remainder_exit, join, main_pre_block, main, main_exit}

    syms = Syms()
    # --- the remainder count: c = (q + 1) & (U - 1) -------------------------------------------
    count = none_left.operands[0]
    if syms.const_of(syms.outside(none_left.operands[1], inside)) != 0:
        return None
    masked = _def(count, "ptx.and")
    if masked is None:
        return None
    consts = [syms.const_of(syms.outside(o, inside)) for o in masked.operands]
    if consts[1] is not None:
        trips, mask = masked.operands[0], consts[1]
    elif consts[0] is not None:
        trips, mask = masked.operands[1], consts[0]
    else:
        return None
    unroll = mask + 1
    if unroll < 2 or unroll & mask or unroll > 64:
        return None
    found_quotient = _quotient(syms, quotient, inside, join)
    if found_quotient is None:
        return None
    q, dividend, stride_value, stride = found_quotient
    if syms.outside(trips, inside) != syms.lin(q, syms.aff(32, 1)) or \
            syms.const_of(syms.outside(big.operands[1], inside)) != mask:
        return None

    # --- the remainder loop: which arguments are induction variables -----------------------
    rargs = remainder.args
    r_back = remainder_term.successor_args[remainder_back]
    r_init = _br(remainder_pre).successor_args[0]  # type: ignore[union-attr]
    pre_env: dict[Value, Sym] = {}
    if evaluate_ops(syms, remainder_pre.ops[:-1], pre_env, inside).effects or \
            not all(_pure(op) for op in join.ops[:-1]):
        return None         # effects outside the loop bodies would run on one way only
    discovery = {a: syms.leaf(("arg", k), _width(a)) for k, a in enumerate(rargs)}
    first = evaluate_ops(syms, remainder.ops[:-1], {**pre_env, **discovery}, inside)
    steps: dict[int, Sym] = {}
    for k, a in enumerate(rargs):
        if _width(a) is None:
            continue
        step = syms.lin(_sym(syms, first.values, r_back[k], inside), discovery[a], 1, -1)
        if step is not None and not _mentions_args(syms, step):
            steps[k] = step
    # the countdown: c, c - 1, ... until 0, read by nothing else
    stay = _setp(remainder_term.operands[0], cmp="ne", ty="s32")
    if stay is None or remainder_back != 0:
        return None
    count_next = stay.operands[0]
    if syms.const_of(syms.outside(stay.operands[1], inside)) != 0 or \
            not isinstance(count_next, OpResult) or count_next.op.parent is not remainder:
        return None
    count_arg = next((k for k, a in enumerate(rargs) if r_back[k] is count_next), None)
    if count_arg is None or steps.get(count_arg) != syms.aff(32, -1) or \
            r_init[count_arg] is not count:
        return None
    decrement = count_next.op
    if rargs[count_arg].uses != [decrement] or sorted(map(id, count_next.uses)) != \
            sorted(map(id, [stay, remainder_term])) or len(stay.results[0].uses) != 1:
        return None
    # the index: i0, i0 + s, ... with s the divisor and (n - i0 - 1) the dividend
    main_stay = _setp(main_term.operands[0], cmp="lt", ty="s32")
    if main_stay is None or main_back != 0:
        return None
    bound_value = main_stay.operands[1]
    if _defined_in(bound_value, inside):
        return None
    bound = syms.outside(bound_value, inside)
    index_arg = next((k for k, st in steps.items() if st == stride and k != count_arg), None)
    if index_arg is None or rargs[index_arg].type != "i32":
        return None
    start_value = r_init[index_arg]
    while _defined_in(start_value, inside) and isinstance(start_value, OpResult) and \
            start_value.op.name == "ptx.mov" and start_value.op.operands[0].type == "i32":
        start_value = start_value.op.operands[0]        # (a copy made in the preheader)
    if _defined_in(start_value, inside):
        return None
    start = syms.outside(start_value, inside)
    if start != _sym(syms, pre_env, r_init[index_arg], inside):
        return None
    if dividend != syms.lin(syms.lin(bound, start, 1, -1), syms.aff(32, 1), 1, -1):  # type: ignore[arg-type]
        return None
    if not accept(stride_value, start_value):
        return None         # (a thread-strided loop, or a step-1 loop the caller wants)
    syms.index = IndexRange(start, stride, unroll)

    # --- the template: one iteration of the remainder loop as a function of m -------------
    init = [pre_env.get(v) if v in pre_env else syms.outside(v, inside) for v in r_init]
    env: dict[Value, Sym] = dict(pre_env)
    hypothesis: dict[int, Sym] = {}
    for k, a in enumerate(rargs):
        if k == count_arg:
            continue
        hypothesis[k] = syms.rec(init[k], steps[k]) if k in steps and \
            syms.linear(init[k]) is not None and syms.width(init[k]) == syms.width(steps[k]) \
            else syms.make(("state", k))
        env[a] = hypothesis[k]
    template = evaluate_ops(syms, remainder.ops[:-1], env, inside,
                            skip=lambda op: op is decrement or op is stay, body=remainder)
    period = len(template.effects)
    nexts = {k: _sym(syms, template.values, r_back[k], inside) for k in hypothesis}
    states: list[dict[int, Sym]] = [{k: syms.make(("state", k)) for k in hypothesis}]
    for j in range(unroll):
        memo: dict[Sym, Sym] = {}
        states.append({k: syms.advance(nexts[k], j, states[j], memo) for k in hypothesis})

    def advance(s: Sym, j: int) -> Sym:
        return syms.advance(s, j, states[j], {})

    for k, h in hypothesis.items():
        if syms.node(h)[0] != "state" and nexts[k] != advance(h, 1):
            return None
    # --- the join: each argument carries one remainder argument ---------------------------
    skip_args = split_term.successor_args[0]
    rest_args = _br(remainder_exit).successor_args[0]  # type: ignore[union-attr]
    join_args: list[int] = []
    join_env: dict[Value, Sym] = {}
    for y, v_skip, v_rest in zip(join.args, skip_args, rest_args):
        k = next((k for k in hypothesis if r_back[k] is v_rest), None)
        if k is None or _defined_in(v_skip, inside) or \
                syms.outside(v_skip, inside) != init[k]:
            return None
        join_args.append(k)
        join_env[y] = hypothesis[k]
    # --- the main loop: U copies of the template, copy by copy ----------------------------
    if evaluate_ops(syms, main_pre_block.ops[:-1], join_env, inside).effects:
        return None
    m_init = [_sym(syms, join_env, v, inside) for v in _br(main_pre_block).successor_args[0]]  # type: ignore[union-attr]
    m_env = {**join_env, **{b: s for b, s in zip(main.args, m_init)}}
    body = evaluate_ops(syms, main.ops[:-1], m_env, inside, period=period or None, body=main)
    if len(body.effects) != unroll * period:
        return None
    for g, eff in enumerate(body.effects):
        if eff != advance(template.effects[g % period], g // period):
            return None
    m_back = main_term.successor_args[main_back]
    for b, s0, v in zip(main.args, m_init, m_back):
        if _sym(syms, body.values, v, inside) != advance(s0, unroll):
            return None
    if _sym(syms, body.values, main_stay.operands[0], inside) != \
            advance(hypothesis[index_arg], unroll):
        return None
    # --- what both leave to the exit ------------------------------------------------------
    out_main = main_term.successor_args[1 - main_back] if main_exit is exit_block else \
        _br(main_exit).successor_args[0]  # type: ignore[union-attr]
    for v_join, v_main in zip(join_term.successor_args[0], out_main):
        if not (v_join in join.args or not _defined_in(v_join, inside)):
            return None
        if _sym(syms, body.values, v_main, inside) != advance(_sym(syms, join_env, v_join, inside),
                                                                unroll):
            return None
    exit_values = [r_back[join_args[join.args.index(v)]] if v in join.args else v  # type: ignore[arg-type]
                   for v in join_term.successor_args[0]]
    return UnrolledLoop(split, remainder_pre, remainder, count_arg, index_arg, {}, exit_block,
                        exit_values, stride_value, start_value, bound_value,
                        main_stay.attributes.get("line"), [remainder_term, main_term])


def _match_main_first(region: Region, main: Block, accept: Accept,
                      preds: dict[Block, list[Block]]) -> UnrolledLoop | None:
    """nvcc's other arrangement (integer sums, whose additions it may reorder): the unrolled
    loop first, counting `T - c` down by U, then the remainder loop for the last c
    iterations:

        split: q <u U-1 ? join(start values) : main preheader
        main:  U copies; k -= U; k != 0 ? main : join(values)
        join:  c == 0 ? exit(...) : remainder preheader -> remainder -> exit(...)"""
    entry = _main_loop_entry(main, preds)
    if entry is None or entry[1] != 0:
        return None
    main_term, _, main_pre, split, split_term = entry
    join = split_term.successors[0]
    main_exit = main_term.successors[1]
    if main_exit is join:
        main_out = main_term.successor_args[1]
    elif _br(main_exit) is not None and len(main_exit.ops) == 1 and not main_exit.args and \
            main_exit.successors[0] is join and preds[main_exit] == [main] and \
            not main_term.successor_args[1]:
        main_out = _br(main_exit).successor_args[0]  # type: ignore[union-attr]
    else:
        return None
    if sorted(map(id, preds[join])) != sorted(map(id, [split, main_exit if main_exit is not join
                                                        else main])):
        return None
    big = _setp(split_term.operands[0], cmp="lt", ty="u32")        # q < U - 1: no main loop
    join_term = _cond_br(join)
    none_left = _setp(join_term.operands[0], cmp="eq", ty="s32") if join_term else None
    if big is None or join_term is None or none_left is None or join_term.successor_args[1] \
            or not all(_pure(op) for op in join.ops[:-1]):
        return None
    exit_block = join_term.successors[0]
    remainder_pre = join_term.successors[1]
    if preds[remainder_pre] != [join] or _br(remainder_pre) is None:
        return None
    remainder = remainder_pre.successors[0]
    loop = _single_block_loop(remainder)
    if loop is None or loop[1] != 0 or remainder is remainder_pre or len(preds[remainder]) != 2:
        return None
    remainder_term = loop[0]
    r_exit = remainder_term.successors[1]
    if r_exit is exit_block:
        r_out = remainder_term.successor_args[1]
        r_exit_blocks: list[Block] = []
    elif _br(r_exit) is not None and len(r_exit.ops) == 1 and not r_exit.args and \
            r_exit.successors[0] is exit_block and preds[r_exit] == [remainder] and \
            not remainder_term.successor_args[1]:
        r_out = _br(r_exit).successor_args[0]  # type: ignore[union-attr]
        r_exit_blocks = [r_exit]
    else:
        return None
    inside = {main_pre, main, join, remainder_pre, remainder, *r_exit_blocks}
    if main_exit is not join:
        inside.add(main_exit)
    syms = Syms()
    # --- the trip count: q = (n - i0 - 1) /u s, T = q + 1, c = T & (U - 1) -----------------
    quotient = big.operands[0]
    found_quotient = None if _defined_in(quotient, inside) else \
        _quotient(syms, quotient, inside, join)
    if found_quotient is None:
        return None
    q, dividend, stride_value, stride = found_quotient
    count = none_left.operands[0]
    masked = _def(count, "ptx.and")
    if masked is None or _defined_in(count, inside) or \
            syms.const_of(syms.outside(none_left.operands[1], inside)) != 0:
        return None
    consts = [syms.const_of(syms.outside(o, inside)) for o in masked.operands]
    trips, mask = (masked.operands[0], consts[1]) if consts[1] is not None else \
        (masked.operands[1], consts[0])
    if mask is None:
        return None
    unroll = mask + 1
    trip_count = syms.lin(q, syms.aff(32, 1))
    if unroll < 2 or unroll & mask or unroll > 64 or syms.outside(trips, inside) != trip_count \
            or syms.const_of(syms.outside(big.operands[1], inside)) != mask:
        return None
    # --- the main loop's arguments: countdown, index, the rest -----------------------------
    pre_env: dict[Value, Sym] = {}
    if evaluate_ops(syms, main_pre.ops[:-1], pre_env, inside).effects:
        return None
    m_init_values = _br(main_pre).successor_args[0]  # type: ignore[union-attr]
    m_init = [_sym(syms, pre_env, v, inside) for v in m_init_values]
    margs = main.args
    m_back = main_term.successor_args[0]
    discovery = {a: syms.leaf(("arg", k), _width(a)) for k, a in enumerate(margs)}
    first = evaluate_ops(syms, main.ops[:-1], {**pre_env, **discovery}, inside)
    steps: dict[int, Sym] = {}
    for k, a in enumerate(margs):
        if _width(a) is not None:
            step = syms.lin(_sym(syms, first.values, m_back[k], inside), discovery[a], 1, -1)
            if step is not None and not _mentions_args(syms, step):
                steps[k] = step
    stay = _setp(main_term.operands[0], cmp="ne", ty="s32")
    if stay is None or syms.const_of(syms.outside(stay.operands[1], inside)) != 0:
        return None
    main_count = next((k for k, a in enumerate(margs) if m_back[k] is stay.operands[0]), None)
    if main_count is None or steps.get(main_count) != syms.aff(32, -unroll) or \
            m_init[main_count] != syms.lin(trip_count, syms.outside(count, inside), 1, -1):  # type: ignore[arg-type]
        return None
    main_decrement = m_back[main_count].op  # type: ignore[attr-defined]
    if margs[main_count].uses != [main_decrement] or \
            sorted(map(id, m_back[main_count].uses)) != sorted(map(id, [stay, main_term])) or \
            len(stay.results[0].uses) != 1:
        return None
    index_arg = next((k for k in steps if k != main_count and margs[k].type == "i32" and
                      steps[k] == syms.lin(stride, stride, unroll, 0)), None)
    if index_arg is None:
        return None
    start = m_init[index_arg]
    start_value: Value | None = m_init_values[index_arg]
    while start_value is not None and _defined_in(start_value, inside):
        op = start_value.op if isinstance(start_value, OpResult) else None
        start_value = op.operands[0] if op is not None and op.name == "ptx.mov" and \
            op.operands[0].type == "i32" else None      # (a copy made in the preheader)
    if start_value is None or syms.outside(start_value, inside) != start:
        return None
    bound = syms.lin(syms.lin(dividend, start), syms.aff(32, 1))  # type: ignore[arg-type]
    bound_value = syms.value_of(bound) if bound is not None else None
    if start_value is None or bound_value is None or _defined_in(start_value, inside) or \
            _defined_in(bound_value, inside):
        return None                 # (dividend: n - i0 - 1, so n = dividend + i0 + 1)
    if not accept(stride_value, start_value):
        return None
    syms.index = IndexRange(start, stride, unroll)
    hypothesis: dict[int, Sym] = {}
    for k in range(len(margs)):
        if k == main_count:
            continue
        per_iteration = _divided(syms, steps[k], unroll) if k in steps else None
        if k == index_arg:
            hypothesis[k] = syms.rec(start, stride)
        elif per_iteration is not None and syms.linear(m_init[k]) is not None and \
                syms.width(m_init[k]) == syms.width(per_iteration):
            hypothesis[k] = syms.rec(m_init[k], per_iteration)
        else:
            hypothesis[k] = syms.make(("state", k))
    # --- the join: its arguments are the main loop's, on entry or after it ------------------
    join_env: dict[Value, Sym] = {}
    for y, v_skip, v_main in zip(join.args, split_term.successor_args[0], main_out):
        k = next((k for k in hypothesis if m_back[k] is v_main), None)
        if k is None or _defined_in(v_skip, inside) or syms.outside(v_skip, inside) != m_init[k]:
            return None
        join_env[y] = hypothesis[k]
    # --- the template: the remainder loop, entered at iteration m ---------------------------
    r_pre_env = dict(join_env)
    if evaluate_ops(syms, remainder_pre.ops[:-1], r_pre_env, inside).effects:
        return None
    r_init = _br(remainder_pre).successor_args[0]  # type: ignore[union-attr]
    rargs = remainder.args
    r_back = remainder_term.successor_args[0]
    r_stay = _setp(remainder_term.operands[0], cmp="ne", ty="s32")
    if r_stay is None or syms.const_of(syms.outside(r_stay.operands[1], inside)) != 0:
        return None
    count_arg = next((k for k in range(len(rargs)) if r_back[k] is r_stay.operands[0]), None)
    if count_arg is None or _sym(syms, r_pre_env, r_init[count_arg], inside) != \
            syms.outside(count, inside):
        return None
    decrement = r_back[count_arg].op  # type: ignore[attr-defined]
    if decrement.name != "ptx.add" or rargs[count_arg].uses != [decrement] or \
            syms.const_of(syms.outside(decrement.operands[1], inside)) != 0xFFFFFFFF or \
            decrement.operands[0] is not rargs[count_arg] or \
            sorted(map(id, r_back[count_arg].uses)) != sorted(map(id, [r_stay, remainder_term])) \
            or len(r_stay.results[0].uses) != 1:
        return None
    if any(o in join.args for op in remainder.ops for o in op.operands):
        return None         # (the join's values are fixed while the remainder loop runs)
    r_hyp = {a: _sym(syms, r_pre_env, r_init[k], inside)
             for k, a in enumerate(rargs) if k != count_arg}
    template = evaluate_ops(syms, remainder.ops[:-1], {**r_pre_env, **r_hyp}, inside,
                            skip=lambda op: op is decrement or op is r_stay, body=remainder)
    period = len(template.effects)
    # each carried state without a closed form is carried by the remainder loop too
    state_next: dict[int, Sym] = {}
    for k, a in enumerate(rargs):
        if k == count_arg:
            continue
        n = syms.node(r_hyp[a])
        if n[0] == "state":
            state_next[n[1]] = _sym(syms, template.values, r_back[k], inside)
    atoms = {k: h for k, h in hypothesis.items() if syms.node(h)[0] == "state"}
    if set(atoms) != set(state_next):
        return None
    states: list[dict[int, Sym]] = [dict(atoms)]
    for j in range(unroll):
        states.append({k: syms.advance(state_next[k], j, states[j], {}) for k in atoms})

    def advance(s: Sym, j: int) -> Sym:
        return syms.advance(s, j, states[j], {})

    for k, a in enumerate(rargs):
        if k != count_arg and syms.node(r_hyp[a])[0] != "state" and \
                _sym(syms, template.values, r_back[k], inside) != advance(r_hyp[a], 1):
            return None
    # --- the main loop: U copies of the template ---------------------------------------------
    m_env = {**pre_env, **{margs[k]: h for k, h in hypothesis.items()}}
    body = evaluate_ops(syms, main.ops[:-1], m_env, inside, period=period or None,
                        skip=lambda op: op is main_decrement or op is stay, body=main)
    if len(body.effects) != unroll * period or any(
            eff != advance(template.effects[g % period], g // period)
            for g, eff in enumerate(body.effects)):
        return None
    for k, h in hypothesis.items():
        if _sym(syms, body.values, m_back[k], inside) != advance(h, unroll):
            return None
    # --- what both leave to the exit ---------------------------------------------------------
    for v_join, v_rest in zip(join_term.successor_args[0], r_out):
        if _sym(syms, template.values, v_rest, inside) != \
                advance(_sym(syms, join_env, v_join, inside), 1):
            return None
    index_in_remainder = next((k for k, a in enumerate(rargs)
                               if k != count_arg and r_hyp[a] == hypothesis[index_arg]), None)
    return UnrolledLoop(split, remainder_pre, remainder, count_arg, index_in_remainder,
                        {y: v for y, v in zip(join.args, split_term.successor_args[0])},
                        exit_block, list(r_out), stride_value, start_value, bound_value,
                        remainder_term.attributes.get("line"), [main_term, remainder_term])


def _match_peeled(region: Region, main: Block, accept: Accept,
                  preds: dict[Block, list[Block]]) -> UnrolledLoop | None:
    """nvcc's arrangement inside an outer loop (a time-step loop): the remainder peeled into
    a chain of U - 1 copies of the body, each behind `c == k ? join(i0 + k*s)`, then the
    unrolled loop as in the first arrangement.  The copies and the unrolled loop are checked
    against the unrolled loop's first copy (the template); the simple loop runs that copy.
    Nothing may be carried but the index (no sums), and the loops leave no values."""
    entry = _main_loop_entry(main, preds)
    if entry is None or entry[1] != 0:
        return None
    main_term, _, main_pre, join, join_term = entry
    if join_term.successor_args[0] or len(join.args) != 1 or \
            not all(_pure(op) for op in join.ops[:-1]):
        return None
    exit_block = join_term.successors[0]
    main_exit = main_term.successors[1]
    if exit_block.args or main_term.successor_args[1] or (main_exit is not exit_block and (
            _br(main_exit) is None or len(main_exit.ops) != 1 or main_exit.args or
            main_exit.successors[0] is not exit_block or preds[main_exit] != [main])):
        return None
    # the chain, walked back from its last copy (the one that branches to the join always)
    last = [p for p in preds[join] if _br(p) is not None]
    if len(last) != 1 or len(preds[join]) < 2:
        return None
    chain = [last[0]]
    while len(chain) < len(preds[join]):
        before = preds[chain[0]]
        if len(before) != 1 or _cond_br(before[0]) is None or \
                _cond_br(before[0]).successors != [join, chain[0]]:  # type: ignore[union-attr]
            return None
        chain.insert(0, before[0])
    unroll = len(chain)
    if sorted(map(id, chain)) != sorted(map(id, preds[join])) or unroll < 2 or unroll & (unroll - 1):
        return None
    split, peeled = chain[0], chain[1:]
    inside = {*peeled, join, main_pre, main}
    if main_exit is not exit_block:
        inside.add(main_exit)
    syms = Syms()
    # --- the counts: c == k tests, q <u U-1 before the unrolled loop ------------------------
    big = _setp(join_term.operands[0], cmp="lt", ty="u32")
    if big is None:
        return None
    quotient = big.operands[0]
    division = _def(quotient, "ptx.div")
    count: Value | None = None
    for k, block in enumerate(chain[:-1]):
        test = _setp(_cond_br(block).operands[0], cmp="eq", ty="s32")  # type: ignore[union-attr]
        if test is None or syms.const_of(syms.outside(test.operands[1], inside)) != k or \
                (count is not None and test.operands[0] is not count):
            return None
        count = test.operands[0]
    masked = _def(count, "ptx.and") if count is not None else None
    if division is None or division.attributes.get("mods", ()) != ["u32"] or masked is None or \
            _defined_in(quotient, inside) or _defined_in(count, inside):  # type: ignore[arg-type]
        return None
    consts = [syms.const_of(syms.outside(o, inside)) for o in masked.operands]
    trips, mask = (masked.operands[0], consts[1]) if consts[1] is not None else \
        (masked.operands[1], consts[0])
    q = syms.outside(quotient, inside)
    if mask != unroll - 1 or syms.outside(trips, inside) != syms.lin(q, syms.aff(32, 1)) or \
            syms.const_of(syms.outside(big.operands[1], inside)) != mask:
        return None
    stride_value = division.operands[1]
    stride = syms.outside(stride_value, inside)
    main_stay = _setp(main_term.operands[0], cmp="lt", ty="s32")
    if main_stay is None or _defined_in(main_stay.operands[1], inside):
        return None
    bound_value = main_stay.operands[1]
    bound = syms.outside(bound_value, inside)
    start_value = _cond_br(split).successor_args[0]  # type: ignore[union-attr]
    if len(start_value) != 1 or _defined_in(start_value[0], inside):
        return None
    start = syms.outside(start_value[0], inside)
    if syms.outside(division.operands[0], inside) != \
            syms.lin(syms.lin(bound, start, 1, -1), syms.aff(32, 1), 1, -1):  # type: ignore[arg-type]
        return None
    if not accept(stride_value, start_value[0]):
        return None
    syms.index = IndexRange(start, stride, unroll)
    index = syms.rec(start, stride)
    # --- the join's index: i0 + k*s after k peeled copies -----------------------------------
    peeled_env: list[dict[Value, Sym]] = []
    for k, block in enumerate(chain):
        env: dict[Value, Sym] = {}
        if k:
            evaluate_ops(syms, block.ops[:-1], env, inside)
        peeled_env.append(env)
        term = block.ops[-1]
        incoming = term.successor_args[0][0] if term.successor_args[0] else None
        if incoming is None or _sym(syms, env, incoming, inside) != \
                syms.lin(start, stride, 1, k):
            return None
    # --- the unrolled loop: U copies of its first ----------------------------------------------
    join_env = {join.args[0]: index}
    if evaluate_ops(syms, main_pre.ops[:-1], join_env, inside).effects:
        return None
    m_init = [_sym(syms, join_env, v, inside) for v in _br(main_pre).successor_args[0]]  # type: ignore[union-attr]
    if any(syms.linear(h) is None for h in m_init):
        return None
    m_env = {**join_env, **dict(zip(main.args, m_init))}
    counted = evaluate_ops(syms, main.ops[:-1], dict(m_env), inside, body=main)
    if not counted.effects or len(counted.effects) % unroll:
        return None
    period = len(counted.effects) // unroll
    body = evaluate_ops(syms, main.ops[:-1], dict(m_env), inside, period=period, body=main)
    template = body.effects[:period]
    if any(eff != syms.advance(template[g % period], g // period, {}, {})
           for g, eff in enumerate(body.effects)):
        return None
    for h, v in zip(m_init, main_term.successor_args[0]):
        if _sym(syms, body.values, v, inside) != syms.advance(h, unroll, {}, {}):
            return None
    if _sym(syms, body.values, main_stay.operands[0], inside) != \
            syms.advance(index, unroll, {}, {}):
        return None
    # --- the peeled copies are the template at iterations 0 .. U-2 --------------------------
    for k, block in enumerate(peeled):
        effects = evaluate_ops(syms, block.ops[:-1], {}, inside, period=period).effects
        if len(effects) != period or any(
                eff != syms.at_start(syms.advance(t, k, {}, {}), {})
                for eff, t in zip(effects, template)):
            return None
    # --- the template's ops: what the first copy's effects read -------------------------------
    effect_ops = [op for op in main.ops[:-1] if not _pure(op) and not read_only_load(op)]
    wanted = set(effect_ops[:period])
    work = list(wanted)
    while work:
        op = work.pop()
        for o in op.operands:
            if isinstance(o, OpResult) and o.op.parent is main and o.op not in wanted:
                wanted.add(o.op)
                work.append(o.op)
    body_ops = [op for op in main.ops[:-1] if op in wanted]
    index_arg = next((b for b, h in zip(main.args, m_init) if h == index), None)
    if index_arg is None or any(o in main.args and o is not index_arg
                                for op in body_ops for o in op.operands):
        return None
    return UnrolledLoop(split, main_pre, main, -1, None, {join.args[0]: start_value[0]},
                        exit_block, [], stride_value, start_value[0], bound_value,
                        main_stay.attributes.get("line"), [main_term], body_ops, index_arg)


def _divided(syms: Syms, step: Sym, unroll: int) -> Sym | None:
    """A step per iteration d with unroll * d == step (one of them), if the coefficients
    divide."""
    n = syms.node(step)
    if n[0] != "aff" or n[2] % unroll or any(c % unroll for _, c in n[3]):
        return None
    return syms.aff(n[1], n[2] // unroll, {leaf: c // unroll for leaf, c in n[3]})


def _pure(op: Operation) -> bool:
    i = REGISTRY.get(op.name)
    return i is not None and i.pure and not op.regions


def _width(v: Value) -> int | None:
    return {"i32": 32, "i64": 64}.get(v.type)


def _defined_in(v: Value, blocks: set[Block]) -> bool:
    block = v.op.parent if isinstance(v, OpResult) else v.block if isinstance(v, BlockArgument) \
        else None
    return block in blocks


def _sym(syms: Syms, env: dict[Value, Sym], v: Value, inside: set[Block]) -> Sym:
    got = env.get(v)
    if got is not None:
        return got
    if _defined_in(v, inside):
        raise NotAnalysable("value from another block of the loops")
    return syms.outside(v, inside)


def _mentions_args(syms: Syms, s: Sym) -> bool:
    """Whether an affine symbol (a step) depends on a remainder argument (no invariant)."""
    for part in syms.linear(s) or ():
        for leaf, _ in syms.node(part)[3]:
            key = syms.node(leaf)[1]
            if key[0] == "arg" or key[0] == "sext" and _mentions_args(syms, key[1]):
                return True
    return False


# --- the rewrite --------------------------------------------------------------------------
