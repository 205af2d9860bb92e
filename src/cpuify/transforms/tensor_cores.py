"""Warp-wide matrix instructions (wmma.mma, mma.sync, ldmatrix) made explicit for code
generation: each `upir.warp_collective` of kind "mma" or "ldmatrix" becomes

    upir.warp_matrix {phase = "put"}(record, ...): mma: the lane writes its A and B
               elements into the warp's dense A rows and B columns (row r of A in lane
               r's record, column c of B after it in lane c's); ldmatrix, stmatrix: its
               row address to its record; movmatrix: its register
    syncwarp   every lane of the warp has written
    upir.warp_matrix {phase = "get"}(record, c registers | stmatrix's registers): the
               lane's results: its D elements from the rows and columns it needs (vector
               loads), its ldmatrix/movmatrix registers, or its stmatrix stores

Each record has two buffers used in turn (a counter at its start, which every lane keeps
alike: all lanes run the same warp-wide instructions): the next instruction's "put" writes
the other buffer, so a lane running ahead to it cannot overwrite what a lane behind it in
the thread loop still reads, and one warp sync per instruction is enough.

The records are a local variable the pass declares; a lane reaches another lane's record
at the same offset of that thread's local window (codegen/ptx_tensor.py).  The sync points are
ordinary `__syncwarp()`s: the block's thread loops split there and the scheduler waits for
the whole warp, as for a shuffle.

Code generation needs this, so it runs after every pipeline (compiler.optimize_kernel), not
as an optional pass; the reference interpreter runs the collectives as lifted."""

from __future__ import annotations

from cpuify.ir.core import Operation, Value, replace_all_uses
from cpuify.ir.structure import block_body
from cpuify.ir.structured import lower_structured_control_flow
from cpuify.lifting.tensor_cores import parse_matrix_op

RECORD = "__cpuify_warp_matrix"
_KINDS = ("mma", "ldmatrix", "stmatrix", "movmatrix")


def lower_warp_matrix_ops(kernel: Operation) -> int:
    """Rewrite the kernel's mma/ldmatrix collectives; returns how many."""
    if any(op.name == "upir.warp_collective" and op.attributes.get("kind") in _KINDS
           for op in kernel.walk()):
        lower_structured_control_flow(kernel)       # (the rewrite walks the CFG)
    region = block_body(kernel)
    count = 0
    most = 0
    lowered: list[Operation] = []
    for blk in region.blocks:
        i = 0
        while i < len(blk.ops):
            op = blk.ops[i]
            if op.name != "upir.warp_collective" or op.attributes.get("kind") not in _KINDS:
                i += 1
                continue
            line = op.attributes.get("line", 0)
            new: list[Operation] = []

            def add(o: Operation, new: list[Operation] = new) -> Operation:
                new.append(o)
                return o

            record = add(Operation("upir.addressof", [], ["i64"],
                                   {"symbol": RECORD, "space": "local", "line": line})).results[0]
            kind = op.attributes["kind"]
            attrs = {k: v for k, v in op.attributes.items()}
            if kind == "mma":
                spec = parse_matrix_op(str(op.attributes["family"]),
                                       tuple(op.attributes["mods"]))
                assert not isinstance(spec, str)
                na, nb = spec.registers("a"), spec.registers("b")
                # each lane writes its A and B elements into the rows of the warp's dense
                # A (lane r: row r) and B^T (lane c: column c) in the lanes' records
                put = list(op.operands[:na + nb])
                kept = list(op.operands[na + nb:])
                _, _, k = spec.dims()
                most = max(most, 2 * k * (8 if spec.types["a"] == "f64" else 4))
            else:
                # ldmatrix, stmatrix: the lane's row address (64 bits); movmatrix: its register
                v = op.operands[0]
                if v.type != "i64" and kind != "movmatrix":
                    # a 32-bit shared-memory address
                    v = add(Operation("ptx.cvt", [v], ["i64"], {"mods": ["u64", "u32"],
                                                                "line": line})).results[0]
                put = [v]
                kept = list(op.operands[1:])      # stmatrix: the registers it stores
                most = max(most, 8)
            lowered.append(add(Operation("upir.warp_matrix", [record] + put, [],
                                         {**attrs, "phase": "put"})))
            full = add(Operation("upir.const", [], ["i32"], {"value": -1})).results[0]
            add(Operation("upir.warp_collective", [full], [],
                          {"kind": "syncwarp", "mods": ["warp", "sync"], "line": line}))
            matrix = add(Operation("upir.warp_matrix", [record] + kept,
                                   [r.type for r in op.results], {**attrs, "phase": "get"}))
            lowered.append(matrix)
            old_results: list[Value] = list(op.results)
            for old, got in zip(old_results, matrix.results):
                replace_all_uses(old, got)
            op.drop_uses()
            blk.ops[i:i + 1] = new
            for o in new:
                o.parent = blk
            i += len(new)
            count += 1
    if count:
        buffer = (most + 15) // 16 * 16
        for o in lowered:
            o.attributes["buffer"] = buffer
        top = kernel.regions[0].entry
        decl = Operation("upir.global", attributes={
            "sym_name": RECORD, "space": "local", "type": "b8", "line": 0, "align": 16,
            "dims": [16 + 2 * buffer], "linkage": "", "vector": 1})
        decl.parent = top
        top.ops.insert(0, decl)
        # the lanes' buffer counters start at 0 (local memory starts undefined)
        entry = region.entry
        start = [Operation("upir.addressof", [], ["i64"], {"symbol": RECORD, "space": "local"})]
        start.append(Operation("upir.const", [], ["i32"], {"value": 0}))
        start.append(Operation("ptx.st", [start[0].results[0], start[1].results[0]], [],
                               {"mods": ["local", "b32"], "offset": 0}))
        for o in reversed(start):
            o.parent = entry
            entry.ops.insert(0, o)
    return count
