"""Recursive device functions: which functions recurse, and what a call keeps on the stack.

cpuify inlines device functions into their kernel (inline.py).  A recursive cycle cannot be
inlined, so the functions of a cycle (a strongly connected component of the call graph,
indirect calls counted as calls to every function they may reach) run as a *recursion
engine* inside the kernel: each function of the cycle is emitted once, a call inside the
cycle pushes a frame on a per-thread call stack (the registers live across the call, the
parameters the caller reads after it, the return site) and jumps to the callee, and a `ret`
pops the frame and jumps back to the return site.  The callee's `.local` frame (its local
depot) lives on that stack too, so each activation has its own local arrays.

This module has the call graph and a register liveness over PTX statements; inline.py
builds the engine."""

from __future__ import annotations

from collections.abc import Iterable

from cpuify.frontend.ptx_ast import (
    Addr,
    CallArgs,
    Function,
    Instruction,
    Label,
    Module,
    Operand,
    Pair,
    Reg,
    Vec,
)

# opcodes whose first operand is not a destination register
_NO_DEST = {"st", "red", "bra", "brx", "ret", "exit", "trap", "bar", "barrier", "membar", "fence",
            "prefetch", "prefetchu", "nanosleep", "pmevent", "discard", "sust", "sured", "call",
            "printf", "malloc", "free", "assertfail", "param_copy", "__rcall"}


def call_targets(module: Module, func: Function) -> set[str]:
    """The functions with a body that `func` may call (an indirect call: every function whose
    address the module takes and whose signature fits the call's prototype)."""
    out: set[str] = set()
    addresses = None
    for stmt in func.body or ():
        if not isinstance(stmt, Instruction) or stmt.opcode != "call":
            continue
        ops = [o for o in stmt.operands if not isinstance(o, CallArgs)]
        if not ops or not isinstance(ops[0], Reg):
            continue
        target = ops[0].name
        if not target.startswith("%"):
            callee = module.functions.get(target)
            if callee is not None and callee.body is not None:
                out.add(target)
            continue
        proto = func.prototypes.get(ops[1].name) if len(ops) > 1 and isinstance(ops[1], Reg) else None
        if proto is None:
            continue
        if addresses is None:
            addresses = module.function_addresses()
        for name in addresses:
            f = module.functions[name]
            if f.body is not None and tuple(p.size for p in f.returns) == proto[0] and \
                    tuple(p.size for p in f.params) == proto[1]:
                out.add(name)
    return out


def recursive_groups(module: Module) -> dict[str, frozenset[str]]:
    """Each function that is part of a recursive cycle -> the functions of its cycle (the
    strongly connected component of the call graph; Tarjan's algorithm, iterative)."""
    graph = {name: sorted(call_targets(module, f)) for name, f in module.functions.items()
             if f.body is not None}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: dict[str, frozenset[str]] = {}
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            succs = graph.get(node, [])
            if i < len(succs):
                work.append((node, i + 1))
                nxt = succs[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                members = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    members.append(m)
                    if m == node:
                        break
                if len(members) > 1 or node in graph.get(node, []):
                    group = frozenset(members)
                    for m in members:
                        groups[m] = group
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return groups


def _regs_in(op: Operand, out: list[str]) -> None:
    if isinstance(op, Reg):
        if op.name.startswith("%"):
            out.append(op.name)
    elif isinstance(op, Addr):
        if op.base is not None and op.base.startswith("%"):
            out.append(op.base)
    elif isinstance(op, Vec):
        for item in op.items:
            _regs_in(item, out)
    elif isinstance(op, Pair):
        _regs_in(op.first, out)
        _regs_in(op.second, out)


def uses_and_defs(stmt: Instruction, params: set[str]) -> tuple[set[str], set[str]]:
    """Registers `stmt` reads and registers it surely writes (a guarded write may not happen:
    it kills nothing).  A load from one of `params` (the function's own parameters) reads
    the pseudo-variable `param:NAME+OFFSET:TYPE`."""
    uses: list[str] = []
    defs: list[str] = []
    ops = stmt.operands
    first = 0
    if stmt.opcode not in _NO_DEST and ops and isinstance(ops[0], (Reg, Vec, Pair)):
        _regs_in(ops[0], defs)
        first = 1
    for o in ops[first:]:
        _regs_in(o, uses)
        if stmt.opcode == "ld" and isinstance(o, Addr) and o.base in params:
            uses.append(f"param:{o.base}+{o.offset}:{stmt.modifiers[-1]}")
    if stmt.guard is not None:
        uses.append(stmt.guard.name)
    if stmt.opcode == "atom" or stmt.guard is not None:
        uses.extend(defs)      # (atom's first operand is its result; kept conservative)
        defs = [] if stmt.guard is not None else defs
    return set(uses), set(defs)


def live_after(body: list[Instruction | Label], sites: Iterable[int],
               params: set[str]) -> dict[int, set[str]]:
    """For each index in `sites` (statements of `body`), the registers (and parameter
    pseudo-variables) live right after it: read on some path before being written.  A
    branch to a label outside `body` (a return) ends the path."""
    n = len(body)
    labels = {s.name: i for i, s in enumerate(body) if isinstance(s, Label)}
    succ: list[list[int]] = []
    for i, s in enumerate(body):
        nxt = [i + 1] if i + 1 < n else []
        if isinstance(s, Instruction):
            if s.opcode == "bra":
                t = s.operands[0]
                tgt = [labels[t.name]] if isinstance(t, Reg) and t.name in labels else []
                nxt = tgt + (nxt if s.guard is not None else [])
            elif s.opcode == "brx":
                nxt = list(labels.values()) + (nxt if s.guard is not None else [])
            elif s.opcode in ("ret", "exit", "trap") and s.guard is None:
                nxt = []
        succ.append(nxt)
    info = [uses_and_defs(s, params) if isinstance(s, Instruction) else (set(), set())
            for s in body]
    live_in: list[set[str]] = [set() for _ in range(n)]
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            out: set[str] = set()
            for j in succ[i]:
                out |= live_in[j]
            uses, defs = info[i]
            new = uses | (out - defs)
            if new != live_in[i]:
                live_in[i] = new
                changed = True
    result: dict[int, set[str]] = {}
    for i in sites:
        out = set()
        for j in succ[i]:
            out |= live_in[j]
        result[i] = out
    return result
