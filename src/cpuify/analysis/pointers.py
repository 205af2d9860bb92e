"""Which 64-bit integers are real addresses (emitted as GEPs the loop vectorizer
understands), which 32-bit index arithmetic cannot wrap, and which `__shared__` variable an
address points into."""

from __future__ import annotations

from cpuify.ir.core import BlockArgument, OpResult, Operation, Region, Value
from cpuify.analysis.cfg import incoming_values as _incoming
from cpuify.ir.structured import forwarded_values, nested_blocks
from cpuify.ir.structured_values import has_nested_structure, merged_values

# --- pointer inference ------------------------------------------------------------------

_ADDRESS_SPACES_REAL = ("global", "const", "generic", "param")


def _mem_space(op: Operation) -> str:
    mods = op.attributes.get("mods", [])
    for s in ("global", "shared", "local", "const", "param"):
        if s in mods:
            return s
    return "generic"


def memory_space(op: Operation) -> str:
    return _mem_space(op)


def infer_pointers(region: Region) -> set[Value]:
    """64-bit values that hold real (global/generic) addresses: emitted as LLVM `ptr`."""
    address_flow: set[Value] = set()
    work: list[Value] = []

    def mark(v: Value) -> None:
        if v.type == "i64" and v not in address_flow:
            address_flow.add(v)
            work.append(v)

    all_ops = [op for b in region.blocks for op in b.ops]
    for op in all_ops:
        if op.name in ("ptx.ld", "ptx.ldu", "ptx.st", "ptx.atom", "ptx.red") and \
                _mem_space(op) in _ADDRESS_SPACES_REAL:
            mark(op.operands[0])
        elif op.name == "ptx.cvta" and "to" in op.attributes.get("mods", ()):
            mark(op.operands[0])
    incoming = _incoming(region)
    while work:
        v = work.pop()
        if isinstance(v, OpResult):
            op = v.op
            if op.name in ("ptx.add", "ptx.sub", "ptx.mov"):
                for o in op.operands:
                    mark(o)
        elif isinstance(v, BlockArgument):
            for src in incoming.get(v, []):
                mark(src)

    pointers: set[Value] = set()
    for op in all_ops:
        for r in op.results:
            if r not in address_flow and not (op.name == "ptx.cvta"):
                continue
            if op.name == "ptx.cvta" and r.type == "i64" and "to" not in op.attributes.get("mods", ()):
                pointers.add(r)       # shared/local/global -> generic: a real address
            elif op.name == "ptx.cvta" and r.type == "i64" and ("global" in op.attributes["mods"]):
                pointers.add(r)
            elif op.name in ("upir.param", "ptx.ld", "ptx.ldu") and r.type == "i64":
                pointers.add(r)
            elif op.name == "upir.addressof" and op.attributes.get("space") in ("global", "const", "param"):
                pointers.add(r)
    for b in region.blocks:
        for a in b.args:
            if a in address_flow:
                pointers.add(a)
    # forward: add/sub/mov with exactly one pointer operand; block args need all inputs
    changed = True
    while changed:
        changed = False
        for op in all_ops:
            if op.name in ("ptx.add", "ptx.sub", "ptx.mov") and op.results and op.results[0].type == "i64":
                r = op.results[0]
                n_ptr = sum(1 for o in op.operands if o in pointers)
                is_ptr = r in address_flow and (
                    (op.name == "ptx.add" and n_ptr == 1) or
                    (op.name in ("ptx.sub", "ptx.mov") and op.operands[0] in pointers and n_ptr == 1))
                if is_ptr and r not in pointers:
                    pointers.add(r)
                    changed = True
                elif not is_ptr and r in pointers:
                    pointers.discard(r)
                    changed = True
        for b in region.blocks:
            for a in b.args:
                if a in pointers and not all(src in pointers for src in incoming.get(a, [])):
                    pointers.discard(a)
                    changed = True
    return pointers


# --- signed index arithmetic ----------------------------------------------------------------

_INDEX_OPS = ("ptx.add", "ptx.sub", "ptx.mul", "ptx.mad")


def _is_sext_to_64(op: Operation) -> bool:
    mods = op.attributes.get("mods", ())
    if op.name in ("ptx.mul", "ptx.mad") and "wide" in mods and "s32" in mods:
        return True
    return op.name == "ptx.cvt" and "s64" in mods and "s32" in mods


_ADDRESSED = ("ptx.ld", "ptx.ldu", "ptx.st", "ptx.atom", "ptx.red", "ptx.prefetch")
_OFFSET_ARITH = ("ptx.add", "ptx.sub", "ptx.mul", "ptx.mad", "ptx.shl", "ptx.mov", "ptx.cvta")


#: structured ops and terminators that pass values on (ir/structured.py `forwarded_values`):
#: how many of their first operands they read themselves (a test, a for's bounds and step)
_FORWARDING = {"upir.yield": 0, "upir.condition": 1, "upir.while": 0, "upir.for": 3}


def address_only(region: Region) -> set[Value]:
    """64-bit values whose every use forms a memory address: the address operand of a load,
    store or atomic, or 64-bit arithmetic (add/sub/mul/mad/shl/mov/cvta) or a block argument
    whose own uses all do.  A value also stored, compared, converted or returned is not one."""
    structured = has_nested_structure(region)
    blocks = list(nested_blocks(region)) if structured else region.blocks
    cand: set[Value] = {r for b in blocks for op in b.ops for r in op.results if r.type == "i64"}
    cand |= {a for b in blocks for a in b.args if a.type == "i64"}
    incoming = merged_values(region) if structured else _incoming(region)

    def only_addresses(v: Value) -> bool:
        for user in v.uses:
            if user.name in _FORWARDING and v not in user.operands[:_FORWARDING[user.name]]:
                # (structured form: passed on as a branch passes it, to values that must be
                # address-only too)
                targets = [a for x, a in forwarded_values(user) or () if x is v]
                if targets and all(a in cand for a in targets):
                    continue
            if user.name in _ADDRESSED and user.operands and user.operands[0] is v \
                    and v not in user.operands[1:]:
                continue
            if user.name in _OFFSET_ARITH and len(user.results) == 1 and user.results[0] in cand \
                    and "hi" not in user.attributes.get("mods", ()) \
                    and not (user.name == "ptx.shl" and user.operands[1] is v):
                continue
            if user.name in ("cf.br", "cf.cond_br") and v not in user.operands:
                targets = [a for succ, args in zip(user.successors, user.successor_args)
                           for a, x in zip(succ.args, args) if x is v]
                if all(a in cand for a in targets):
                    continue
            return False
        return True

    work = list(cand)
    while work:
        v = work.pop()
        if v not in cand or only_addresses(v):
            continue
        cand.discard(v)
        # what fed v may have been address-only through v alone
        if isinstance(v, OpResult) and v.op.name in _OFFSET_ARITH:
            work.extend(o for o in v.op.operands if o in cand)
        elif isinstance(v, BlockArgument) or v in incoming:     # (or a structured op's result)
            work.extend(o for o in incoming.get(v, []) if o in cand)
    return cand


def no_signed_wrap(region: Region) -> set[Value]:
    """32-bit add/sub/mul/mad results used only to form memory addresses: sign-extended to
    64 bits into address arithmetic (`address_only`), or shared/local addresses (directly or
    through more such arithmetic).  They are array indices computed in C++ `int`, whose
    overflow is undefined in the source.  Marking them `nsw` (as clang does) lets LLVM prove
    that the 64-bit addresses are affine in the thread index, instead of guarding every
    vector loop with wrap checks.  (A program whose `int` index does wrap gets an address
    2^32 elements from the GPU's: documented as a limit in docs/usage.md.)

    Only addresses: a sign-extended sum that is a *value* (stored, compared) may wrap in
    well-defined source (`(long long)(int)(a + b)` of unsigned a, b; `__mul24(x, x)`, whose
    low 32 bits may be negative), and nsw there let LLVM compute it in 64 bits or prove it
    non-negative (the fuzzer's fz_2617_449 and fz_2617_719)."""
    addresses = address_only(region)
    cand: set[Value] = set()
    for b in nested_blocks(region):
        for op in b.ops:
            mods = op.attributes.get("mods", ())
            if op.name in _INDEX_OPS and ("s32" in mods or "u32" in mods or "b32" in mods) \
                    and "wide" not in mods and "hi" not in mods \
                    and "sat" not in mods and "cc" not in mods and op.results:
                cand.add(op.results[0])
    changed = True
    while changed:
        changed = False
        for v in list(cand):
            for user in v.uses:
                if user.name in _INDEX_OPS and user.results and user.results[0] in cand:
                    continue
                if _is_sext_to_64(user) and v in user.operands[:2] and user.results[0] in addresses:
                    continue
                # shared/local offsets are sign-extended by the code generator too
                if user.name in ("ptx.ld", "ptx.st", "ptx.atom", "ptx.red") and \
                        _mem_space(user) in ("shared", "local") and user.operands[0] is v and \
                        v not in user.operands[1:]:
                    continue
                cand.discard(v)
                changed = True
                break
    return cand



# --- which __shared__ variable an address points into ---------------------------------------

_ADDRESS_ARITH = ("ptx.add", "ptx.sub", "ptx.mad", "ptx.mov", "ptx.cvta", "ptx.cvt")


def shared_variables(region: Region) -> dict[Value, str]:
    """Shared-memory addresses -> the `__shared__` variable they point into, where every
    path derives the address from that one variable (its `upir.addressof` plus offsets).
    Distinct variables never overlap and indexing past the end of one is undefined in
    CUDA, so accesses through different variables are independent."""
    incoming = _incoming(region)
    users: dict[Value, list[Operation]] = {}
    for b in region.blocks:
        for op in b.ops:
            for o in op.operands:
                users.setdefault(o, []).append(op)
    # the values an address flows into (through address arithmetic and block arguments)
    roots = [op.results[0] for b in region.blocks for op in b.ops
             if op.name == "upir.addressof" and op.attributes.get("space") == "shared"]
    flow: set[Value] = set(roots)
    work = list(roots)
    while work:
        v = work.pop()
        for op in users.get(v, []):
            if op.name in _ADDRESS_ARITH and op.results:
                targets = [op.results[0]]
            elif op.name in ("cf.br", "cf.cond_br"):
                targets = [a for succ, args in zip(op.successors, op.successor_args)
                           for a, x in zip(succ.args, args) if x is v]
            else:
                targets = []
            for t in targets:
                if t not in flow:
                    flow.add(t)
                    work.append(t)
    # optimistic: a value's variable, or None once two variables (or a non-address) meet
    base: dict[Value, str | None] = {op.results[0]: op.attributes["symbol"] for b in region.blocks
                                     for op in b.ops if op.name == "upir.addressof"
                                     and op.attributes.get("space") == "shared"}

    def derive(op: Operation) -> str | None:
        ops = op.operands
        if op.name == "ptx.mad":       # a*b + c is an address only through c
            addr, offsets = ops[2:], ops[:2]
        elif op.name == "ptx.sub":     # address - offset
            addr, offsets = ops[:1], ops[1:]
        elif op.name == "ptx.add":
            addr = [o for o in ops if o in flow]
            offsets = [o for o in ops if o not in flow]
        else:
            addr, offsets = ops[:1], ops[1:]
        if len(addr) != 1 or any(o in flow for o in offsets) or addr[0] not in flow:
            return None
        return base.get(addr[0], "")

    changed = True
    while changed:
        changed = False
        for b in region.blocks:
            values: list[tuple[Value, str | None]] = []
            for a in b.args:
                if a in flow:
                    srcs = incoming.get(a, [])
                    got = {None if x not in flow else base.get(x, "") for x in srcs} - {""}
                    values.append((a, got.pop() if len(got) == 1 else None if got else ""))
            for op in b.ops:
                if op.results and op.results[0] in flow and op.name != "upir.addressof":
                    values.append((op.results[0], derive(op)))
            for v, new in values:
                if new == "":
                    continue            # nothing known yet (a loop not visited)
                old = base.get(v, "")
                merged = new if old == "" else (old if old == new else None)
                if merged != old:
                    base[v] = merged
                    changed = True
    return {v: s for v, s in base.items() if s}




# --- which pointer parameter an address is based on ------------------------------------------

#: ops whose result points into the object of the given operands (the others are offsets)
_BASE_OPERANDS = {"ptx.add": (0, 1), "ptx.sub": (0,), "ptx.mov": (0,), "ptx.cvta": (0,),
                  "ptx.cvt": (0,), "ptx.mad": (2,), "ptx.selp": (0, 1), "ptx.slct": (0, 1),
                  # (an index masked in 64 bits; a pointer aligned down stays based on it)
                  "ptx.and": (0, 1), "ptx.or": (0, 1)}
#: how many ops an address is followed back through
_BASE_DEPTH = 64


def pointer_parameter(address: Value, incoming: dict[BlockArgument, list[Value]] | None = None,
                      memo: dict | None = None) -> int | None:  # type: ignore[type-arg]
    """The byte offset of the 64-bit kernel parameter (`upir.param`) that `address` is
    based on, in C's sense: the address is that pointer plus integer offsets, through
    additions, moves, conversions and block arguments (every incoming value based on the
    same parameter).  None when it may be based on anything else too: a pointer loaded from
    memory, a variable's address, two parameters added, a value followed too far.  A
    32-bit value in a base position is an offset (it cannot hold a 64-bit address);
    multiplied or shifted values are offsets."""
    memo = {} if memo is None else memo
    if address in memo:
        return memo[address]  # type: ignore[no-any-return]
    roots: set[int] = set()
    seen: set[Value] = set()
    work = [address]
    while work:
        v = work.pop()
        if v in seen or v.type != "i64" and v is not address:
            continue
        if v.type != "i64":
            return None                 # a 32-bit generic address: shared or local memory
        seen.add(v)
        if len(seen) > _BASE_DEPTH:
            return None
        if v in memo and v is not address:
            known = memo[v]
            if known is None:
                return None
            roots.add(known)
        elif isinstance(v, OpResult):
            op = v.op
            if op.name == "upir.param":
                if op.attributes.get("hoisted"):
                    return None         # a value the launch prologue computed
                roots.add(int(op.attributes.get("offset", -1)))
            elif op.name == "upir.const":
                continue                # an integer constant: an offset
            elif op.name in _BASE_OPERANDS:
                if op.name == "ptx.cvta" and "to" not in op.attributes.get("mods", ()):
                    return None         # a shared/local address made generic
                work.extend(op.operands[k] for k in _BASE_OPERANDS[op.name]
                            if k < len(op.operands))
            elif op.name in ("ptx.mul", "ptx.shl"):
                continue                # an index scaled: an offset
            else:
                return None
        elif isinstance(v, BlockArgument):
            if incoming is None:
                region = v.block.parent
                if region is None:
                    return None
                # (computed once per region for all the addresses of one memo)
                cached = memo.get(region)  # type: ignore[call-overload]
                if cached is None:
                    cached = memo[region] = _incoming(region)  # type: ignore[index]
                incoming = cached
            srcs = incoming.get(v)
            if not srcs:
                return None
            work.extend(srcs)
        else:
            return None
        if len(roots) > 1:
            break
    got = roots.pop() if len(roots) == 1 else None
    memo[address] = got
    return got


def parameter_bases(kernel: Operation) -> set[int]:
    """The byte offsets of the parameters some global or generic memory access of the kernel
    is based on (pointer_parameter): the arguments a launch-time non-overlap check must
    know the extents of."""
    out: set[int] = set()
    memo: dict = {}  # type: ignore[type-arg]
    for op in kernel.walk():
        if op.name in ("ptx.ld", "ptx.ldu", "ptx.st", "ptx.atom", "ptx.red") and op.operands \
                and memory_space(op) in ("global", "generic"):
            base = pointer_parameter(op.operands[0], None, memo)
            if base is not None:
                out.add(base)
    return out
