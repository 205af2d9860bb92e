"""Compilation of large kernels: no recursion whose depth grows with the kernel (SSA
construction, trivial block argument removal, analyses), and the iterative SSA construction
checked against the recursive formulation of Braun et al. on tricky control flow.

Timings are not asserted (benchmarks/compile_time.py measures them)."""

from __future__ import annotations

import inspect
import sys
from contextlib import contextmanager

import numpy as np
import pytest

import cpuify
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.ir.core import Block, DomTree, Operation, Region, dominates, dominators
from cpuify.ir.verifier import verify
from cpuify.lifting import lift, lift_kernel


@contextmanager
def shallow_stack(frames: int = 120):
    """Python's recursion limit set to `frames` above the current depth: anything whose
    recursion grows with the kernel fails with RecursionError."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + frames)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def chain_source(n_ifs: int) -> str:
    """A chain of `n_ifs` data-dependent branches (each loads, so it stays a branch), with
    `salt` and `i` read only at the end: their SSA reads walk back the whole chain."""
    lines = ['extern "C" __global__ void chain(const unsigned *in, unsigned *out, unsigned mask,',
             '                                 unsigned salt) {',
             '    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;',
             '    unsigned x = in[i];']
    for j in range(n_ifs):
        lines.append(f'    if ((x >> {j % 31}) & 1u) x += in[(x + {j * 7 + 1}u) & mask];')
        lines.append(f'    x = x * {2 * j + 3}u;')
    lines.append('    out[i] = x ^ salt ^ i;')
    lines.append('}')
    return "\n".join(lines) + "\n"


def chain_reference(n_ifs: int, inp: np.ndarray, salt: int) -> np.ndarray:
    n = len(inp)
    mask = np.uint32(n - 1)
    with np.errstate(over="ignore"):
        x = inp.copy()
        for j in range(n_ifs):
            cond = ((x >> np.uint32(j % 31)) & np.uint32(1)) != 0
            x = np.where(cond, x + inp[(x + np.uint32(j * 7 + 1)) & mask], x)
            x = x * np.uint32(2 * j + 3)
        return x ^ np.uint32(salt) ^ np.arange(n, dtype=np.uint32)


def test_long_branch_chain_compiles_without_deep_recursion(monkeypatch: pytest.MonkeyPatch) -> None:
    """300 branches: the recursive SSA construction needed ~3 Python frames per branch."""
    monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    n_ifs = 300
    src = chain_source(n_ifs)
    with shallow_stack():
        mod = cpuify.RawModule(code=src)
        k = mod.get_function("chain")
    inp = (np.arange(256, dtype=np.uint64) * 2654435761 % (1 << 32)).astype(np.uint32)
    out = np.zeros_like(inp)
    k((2,), (128,), (inp, out, np.uint32(255), np.uint32(0x5BD1E995)))
    np.testing.assert_array_equal(out, chain_reference(n_ifs, inp, 0x5BD1E995))


def test_deeply_nested_branches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nested ifs 120 deep, the innermost using values defined at the top."""
    monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    depth = 120
    body = ["    unsigned x = in[i], y = i * 2654435761u;"]
    for j in range(depth):
        body.append(f"    if (in[(x + {j}u) & 63u] & {1 << (j % 7)}u) {{ x = x * 3u + {j}u;")
    body.append("        y ^= x;")
    body.append("    " + "}" * depth)
    src = ('extern "C" __global__ void nest(const unsigned *in, unsigned *out) {\n'
           '    unsigned i = threadIdx.x;\n' + "\n".join(body) + "\n    out[i] = x + y;\n}\n")
    with shallow_stack():
        mod = cpuify.RawModule(code=src)
        k = mod.get_function("nest")
    inp = (np.arange(64, dtype=np.uint64) * 40503 % 1021).astype(np.uint32)
    out = np.zeros(64, np.uint32)
    k((1,), (64,), (inp, out))
    exp = np.zeros(64, np.uint32)
    with np.errstate(over="ignore"):
        for t in range(64):
            x, y = np.uint32(inp[t]), np.uint32(t) * np.uint32(2654435761)
            for j in range(depth):
                if not inp[int((x + np.uint32(j)) & np.uint32(63))] & (1 << (j % 7)):
                    break
                x = x * np.uint32(3) + np.uint32(j)
            else:
                y ^= x
            exp[t] = x + y
    np.testing.assert_array_equal(out, exp)


# --- the iterative SSA construction against the recursive one ------------------------------

class _RecursiveLifter(lift._Lifter):
    """Braun et al.'s readVariableRecursive as published (the former implementation)."""

    def read_var_recursive(self, name, block, line):  # type: ignore[no-untyped-def]
        vtype = self.var_type(name, line)
        if not block.sealed:
            arg = block.ir.add_arg(vtype, name)
            self.arg_owner[arg] = block
            block.incomplete[name] = arg
            val = arg
        elif not block.preds:
            val = self.undef(vtype)
        elif len(block.preds) == 1:
            val = self.read_var(name, block.preds[0], line)
        else:
            arg = block.ir.add_arg(vtype, name)
            self.arg_owner[arg] = block
            self.write_var(name, block, arg)
            self.add_phi_operands(name, arg, block, line)
            val = arg
        self.write_var(name, block, val)
        return val


def _dump(op: Operation) -> str:
    """A structural dump (value numbering by first appearance), independent of the printer."""
    names: dict[object, str] = {}

    def n(v: object) -> str:
        return names.setdefault(v, f"%{len(names)}")

    blocks = {id(b): i for o in op.walk() for r in o.regions for i, b in enumerate(r.blocks)}
    lines: list[str] = []

    def rec(o: Operation) -> None:
        succ = " ".join(f"^{blocks[id(s)]}({','.join(n(a) for a in args)})"
                        for s, args in zip(o.successors, o.successor_args))
        lines.append(f"{','.join(n(r) for r in o.results)} = {o.name}"
                     f"({','.join(n(v) for v in o.operands)}) {succ} "
                     f"{sorted(o.attributes.items(), key=str)}")
        for r in o.regions:
            for i, b in enumerate(r.blocks):
                lines.append(f"^{i}({','.join(n(a) + ':' + a.type for a in b.args)}):")
                for x in b.ops:
                    rec(x)

    rec(op)
    return "\n".join(lines)


# loops (a nested loop with a `continue` edge and two exits), nested ifs, a guarded
# instruction, a jump into a loop body (irreducible), a register read only after the loops
TRICKY_PTX = r"""
.version 7.5
.target sm_75
.address_size 64

.visible .entry tricky(.param .u64 out, .param .u32 n)
{
    .reg .pred %p<8>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, 0;
    mov.u32 %r4, 1;
    mov.u32 %r9, 7;
    setp.eq.u32 %p5, %r2, 3;
    @%p5 bra $MID;
$OUTER:
    mov.u32 %r5, 0;
$INNER:
    and.b32 %r6, %r5, 1;
    setp.eq.u32 %p1, %r6, 0;
    @%p1 bra $EVEN;
    add.u32 %r3, %r3, %r5;
    setp.gt.u32 %p2, %r3, 40;
    @%p2 bra $DONE;
    bra $NEXT;
$EVEN:
    mul.lo.u32 %r4, %r4, 3;
    and.b32 %r4, %r4, 1023;
    setp.lt.u32 %p3, %r5, %r2;
    @%p3 add.u32 %r3, %r3, 2;
$MID:
    xor.b32 %r9, %r9, %r4;
$NEXT:
    add.u32 %r5, %r5, 1;
    setp.lt.u32 %p4, %r5, %r1;
    @%p4 bra $INNER;
    add.u32 %r2, %r2, 5;
    setp.lt.u32 %p6, %r2, 20;
    @%p6 bra $OUTER;
$DONE:
    mad.lo.u32 %r7, %r3, 31, %r4;
    xor.b32 %r7, %r7, %r9;
    mov.u32 %r8, %tid.x;
    mul.wide.u32 %rd2, %r8, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r7;
    ret;
}
"""


def _tricky_reference(tid: int, n: int) -> int:
    r2, r3, r4, r9 = tid, 0, 1, 7
    m = 0xFFFFFFFF
    pc = "MID" if tid == 3 else "OUTER"
    r5 = 0
    while True:
        if pc == "OUTER":
            r5 = 0
            pc = "INNER"
        if pc == "INNER":
            if r5 & 1:
                r3 = (r3 + r5) & m
                if r3 > 40:
                    break
                pc = "NEXT"
            else:
                r4 = (r4 * 3) & 1023
                if r5 < r2:
                    r3 = (r3 + 2) & m
                pc = "MID"
        if pc == "MID":
            r9 ^= r4
            pc = "NEXT"
        if pc == "NEXT":
            r5 = (r5 + 1) & m
            if r5 < n:
                pc = "INNER"
                continue
            r2 = (r2 + 5) & m
            if r2 < 20:
                pc = "OUTER"
                continue
            break
    return ((r3 * 31 + r4) ^ r9) & m


def test_iterative_ssa_matches_recursive_on_tricky_cfg() -> None:
    module = parse_ptx(TRICKY_PTX)
    entry = module.entries[0]
    new = lift_kernel(module, entry)
    verify(new.op)
    old = _RecursiveLifter(module, lift.inline_calls(module, entry)).run()
    assert _dump(new.op) == _dump(old.op)
    # and it computes what the PTX says (compiled code and the interpreter)
    n = 6
    expected = np.array([_tricky_reference(t, n) for t in range(32)], np.uint32)
    out = np.zeros(32, np.uint32)
    cpuify.RawModule(ptx=TRICKY_PTX).get_function("tricky")((1,), (32,), (out, np.uint32(n)))
    np.testing.assert_array_equal(out, expected)
    out2 = np.zeros(32, np.uint32)
    interpret_kernel(TRICKY_PTX, "tricky", (1,), (32,), [out2, np.uint32(n)])
    np.testing.assert_array_equal(out2, expected)


@pytest.mark.parametrize("n_ifs", [3, 40])
def test_iterative_ssa_matches_recursive_on_chains(n_ifs: int) -> None:
    ptx = compile_to_ptx(chain_source(n_ifs)).ptx
    module = parse_ptx(ptx)
    entry = module.entries[0]
    new = lift_kernel(module, entry)
    old = _RecursiveLifter(module, lift.inline_calls(module, entry)).run()
    assert _dump(new.op) == _dump(old.op)


def test_dom_tree_matches_dominates() -> None:
    import random
    rnd = random.Random(7)
    for _ in range(200):
        n = rnd.randrange(1, 12)
        blocks = [Block() for _ in range(n)]
        region = Region(blocks)
        for b in blocks:
            k = rnd.choice([0, 1, 2, 2])
            b.append(Operation("cf.br", successors=[blocks[rnd.randrange(n)] for _ in range(k)]))
        idom = dominators(region)
        tree = DomTree(idom)
        for a in blocks:
            for b in blocks:
                assert tree.dominates(a, b) == dominates(idom, a, b)


def test_cyclic_blocks_are_the_blocks_on_cycles() -> None:
    import random
    from cpuify.analysis.cfg import cyclic_blocks
    rnd = random.Random(11)
    for _ in range(300):
        n = rnd.randrange(1, 14)
        blocks = [Block() for _ in range(n)]
        region = Region(blocks)
        for b in blocks:
            k = rnd.choice([0, 1, 1, 2, 2])
            b.append(Operation("cf.br", successors=[blocks[rnd.randrange(n)] for _ in range(k)]))
        on_cycle = set()
        for start in blocks:            # the definition: start is reachable from itself
            seen: set[Block] = set()
            stack = list(start.successors)
            while stack:
                b = stack.pop()
                if b is start:
                    on_cycle.add(start)
                    break
                if b not in seen:
                    seen.add(b)
                    stack.extend(b.successors)
        assert cyclic_blocks(region) == on_cycle


def _ipdom_by_sets(region: Region) -> dict[Block, Block]:
    """Immediate post-dominators from post-dominator sets iterated to a fixed point (the
    textbook definition; quadratic memory, fine for small CFGs)."""
    from cpuify.ir.core import predecessors
    blocks = region.blocks
    exits = [b for b in blocks if not b.successors]
    pdom = {b: ({b} if b in exits else set(blocks)) for b in blocks}
    changed = True
    while changed:
        changed = False
        for b in reversed(blocks):
            if b in exits:
                continue
            new = set.intersection(*(pdom[s] for s in b.successors)) | {b}
            if new != pdom[b]:
                pdom[b] = new
                changed = True
    reach = set(exits)
    preds = predecessors(region)
    work = list(exits)
    while work:
        for p in preds.get(work.pop(), []):
            if p not in reach:
                reach.add(p)
                work.append(p)
    out = {}
    for b in blocks:
        if b in reach:
            strict = pdom[b] - {b}
            for c in strict:
                if strict <= pdom[c]:
                    out[b] = c
                    break
    return out


def test_immediate_post_dominators_match_the_set_definition() -> None:
    import random
    from cpuify.analysis.cfg import immediate_post_dominators
    rnd = random.Random(5)
    for _ in range(500):
        n = rnd.randrange(1, 14)
        blocks = [Block() for _ in range(n)]
        region = Region(blocks)
        for i, b in enumerate(blocks):
            k = rnd.choice([0, 1, 1, 2, 2, 2]) if i else rnd.choice([1, 2])
            succ = [blocks[rnd.randrange(n)] for _ in range(k)]
            if k and i + 1 < n and rnd.random() < 0.6:
                succ[0] = blocks[i + 1]
            b.append(Operation("cf.br" if k else "upir.exit", successors=succ))
        assert immediate_post_dominators(region) == _ipdom_by_sets(region)
