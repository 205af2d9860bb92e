"""Warp-wide matrix instructions (wmma.mma, mma.sync, ldmatrix) made explicit for code
generation: each `upir.warp_collective` of kind "mma" or "ldmatrix" becomes

    st.local   its operands to the thread's record (8 bytes per register)
    syncwarp   every lane of the warp has stored its record
    upir.warp_matrix   the lane's results, computed from the records of the warp's lanes
    syncwarp   every lane has read them before a lane overwrites its record

The records are a local variable the pass declares; a lane reads another lane's record at
the same offset of that thread's local window (codegen/ptx_tensor.py).  The sync points are
ordinary `__syncwarp()`s: the block's thread loops split there and the scheduler waits for
the whole warp, as for a shuffle.

Code generation needs this, so it runs after every pipeline (compiler.optimize_kernel), not
as an optional pass; the reference interpreter runs the collectives as lifted."""

from __future__ import annotations

from cpuify.ir.core import Operation, Value, replace_all_uses
from cpuify.ir.structure import block_body

RECORD = "__cpuify_warp_matrix"
_STORE_TYPE = {"i32": "b32", "f32": "f32", "f64": "f64", "i64": "b64", "i16": "b16"}


def lower_warp_matrix_ops(kernel: Operation) -> int:
    """Rewrite the kernel's mma/ldmatrix collectives; returns how many."""
    region = block_body(kernel)
    count = 0
    most = 0
    for blk in region.blocks:
        i = 0
        while i < len(blk.ops):
            op = blk.ops[i]
            if op.name != "upir.warp_collective" or op.attributes.get("kind") not in ("mma", "ldmatrix"):
                i += 1
                continue
            line = op.attributes.get("line", 0)
            new: list[Operation] = []

            def add(o: Operation, new: list[Operation] = new) -> Operation:
                new.append(o)
                return o

            record = add(Operation("upir.addressof", [], ["i64"],
                                   {"symbol": RECORD, "space": "local", "line": line})).results[0]
            for k, v in enumerate(op.operands):
                if op.attributes["kind"] == "ldmatrix" and v.type != "i64":
                    # a 32-bit shared-memory address: the record holds 64 bits
                    v = add(Operation("ptx.cvt", [v], ["i64"], {"mods": ["u64", "u32"],
                                                                "line": line})).results[0]
                add(Operation("ptx.st", [record, v], [], {"mods": ["local", _STORE_TYPE[v.type]],
                                                          "offset": 8 * k, "line": line}))
            most = max(most, len(op.operands))
            full = add(Operation("upir.const", [], ["i32"], {"value": -1})).results[0]
            add(Operation("upir.warp_collective", [full], [],
                          {"kind": "syncwarp", "mods": ["warp", "sync"], "line": line}))
            attrs = {k: v for k, v in op.attributes.items()}
            matrix = add(Operation("upir.warp_matrix", [record], [r.type for r in op.results],
                                   attrs))
            full2 = add(Operation("upir.const", [], ["i32"], {"value": -1})).results[0]
            add(Operation("upir.warp_collective", [full2], [],
                          {"kind": "syncwarp", "mods": ["warp", "sync"], "line": line}))
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
        top = kernel.regions[0].entry
        if not any(o.name == "upir.global" and o.attributes.get("sym_name") == RECORD
                   for o in top.ops):
            decl = Operation("upir.global", attributes={
                "sym_name": RECORD, "space": "local", "type": "b8", "line": 0, "align": 8,
                "dims": [8 * most], "linkage": "", "vector": 1})
            decl.parent = top
            top.ops.insert(0, decl)
    return count
