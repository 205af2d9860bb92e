"""Warp-wide matrix instructions (wmma.mma, mma.sync, ldmatrix) made explicit for code
generation: each `upir.warp_collective` of kind "mma" or "ldmatrix" becomes

    mma:       upir.warp_matrix {kind = "mma_scatter"}(record, a and b registers): the lane
               writes its A and B elements into the warp's dense A rows and B columns
               (row r of A in lane r's record, column c of B after it in lane c's)
    ldmatrix, stmatrix:  st.local of the lane's row address to its record (movmatrix: of
               its register)
    syncwarp   every lane of the warp has written
    upir.warp_matrix(record, c registers)   the lane's results: its D elements from the
               rows and columns it needs (vector loads), its ldmatrix/movmatrix registers,
               or its stmatrix stores
    syncwarp   every lane has read them before a lane writes the records again

The records are a local variable the pass declares; a lane reaches another lane's record
at the same offset of that thread's local window (codegen/ptx_tensor.py).  The sync points are
ordinary `__syncwarp()`s: the block's thread loops split there and the scheduler waits for
the whole warp, as for a shuffle.

Code generation needs this, so it runs after every pipeline (compiler.optimize_kernel), not
as an optional pass; the reference interpreter runs the collectives as lifted."""

from __future__ import annotations

from cpuify.ir.core import Operation, Value, replace_all_uses
from cpuify.ir.structure import block_body
from cpuify.lifting.tensor_cores import parse_matrix_op

RECORD = "__cpuify_warp_matrix"
_KINDS = ("mma", "ldmatrix", "stmatrix", "movmatrix")


def lower_warp_matrix_ops(kernel: Operation) -> int:
    """Rewrite the kernel's mma/ldmatrix collectives; returns how many."""
    region = block_body(kernel)
    count = 0
    most = 0
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
            kept: list[Value] = []           # operands the warp_matrix op itself takes
            if kind == "mma":
                spec = parse_matrix_op(str(op.attributes["family"]),
                                       tuple(op.attributes["mods"]))
                assert not isinstance(spec, str)
                na, nb = spec.registers("a"), spec.registers("b")
                # each lane writes its A and B elements into the rows of the warp's dense
                # A (lane r: row r) and B^T (lane c: column c) in the lanes' records
                add(Operation("upir.warp_matrix", [record] + list(op.operands[:na + nb]), [],
                              {**attrs, "kind": "mma_scatter"}))
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
                add(Operation("ptx.st", [record, v], [], {
                    "mods": ["local", "b32" if kind == "movmatrix" else "b64"], "offset": 0,
                    "line": line}))
                kept = list(op.operands[1:])      # stmatrix: the registers it stores
                most = max(most, 8)
            full = add(Operation("upir.const", [], ["i32"], {"value": -1})).results[0]
            add(Operation("upir.warp_collective", [full], [],
                          {"kind": "syncwarp", "mods": ["warp", "sync"], "line": line}))
            matrix = add(Operation("upir.warp_matrix", [record] + kept,
                                   [r.type for r in op.results], attrs))
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
                "dims": [most], "linkage": "", "vector": 1})
            decl.parent = top
            top.ops.insert(0, decl)
    return count
