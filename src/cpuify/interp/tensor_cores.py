"""Tensor-core instructions in the reference interpreter: `wmma.load/store` per thread, and
the warp collectives `mma` (wmma.mma, mma.sync) and `ldmatrix` over all lanes of a warp.

Fragments are read with the layouts of `cpuify.lifting.tensor_cores` (the specification both
sides read); the arithmetic here is NumPy on whole matrices, written from the PTX ISA:

  * f16 / bf16 / tf32 inputs: every product is exact in f32; D = C + sum over k in the order
    k = 0, 1, ..., K-1, each addition rounded to f32 (round to nearest even).  tf32 inputs
    use their upper 19 bits (the low 13 bits of the f32 register are ignored, as on an H100:
    round with cvt.rna.tf32.f32 first).  An f16 accumulator is widened to f32 and D rounded
    to f16 once at the end.
  * f64: D = fma(A[i,k], B[k,j], D) for k in order, each fma rounded once.
  * s8 / u8: exact integer sums; s32 wraps around, or saturates with .satfinite."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from cpuify.interp.memory import load, store
from cpuify.interp.ops import handles
from cpuify.interp.values import from_bits
from cpuify.ir.core import Operation
from cpuify.lifting.tensor_cores import (
    LdMatrix, MatrixOp, lane_elements, parse_matrix_op, per_register, shape_dims,
)

if TYPE_CHECKING:
    from cpuify.interp.thread import Thread

_BITS = {"f16": 16, "bf16": 16, "s8": 8, "u8": 8}


def _elements(op: MatrixOp, matrix: str, regs: Sequence[int]) -> list[Any]:
    """The element values of one lane's registers (raw bits in) as Python/NumPy numbers."""
    t = op.types[matrix]
    out: list[Any] = []
    if t in _BITS:
        w = _BITS[t]
        for r in regs:
            for k in range(32 // w):
                bits = (r >> (w * k)) & ((1 << w) - 1)
                if t == "f16":
                    out.append(np.float32(np.uint16(bits).view(np.float16)))
                elif t == "bf16":
                    out.append(np.uint32(bits << 16).view(np.float32))
                elif t == "s8":
                    out.append(bits - 256 if bits & 0x80 else bits)
                else:
                    out.append(bits)
        return out
    for r in regs:
        if t == "tf32":
            out.append(np.uint32(r & 0xFFFFE000).view(np.float32))
        elif t == "f32":
            out.append(np.uint32(r).view(np.float32))
        elif t == "f64":
            out.append(float(np.uint64(r).view(np.float64)))
        else:                                   # s32
            out.append(r - (1 << 32) if r & 0x80000000 else r)
    return out


def _matrix(op: MatrixOp, matrix: str, lanes: list[list[int]], rows: int, cols: int,
            dtype: Any) -> np.ndarray:
    lay = op.layout(matrix)
    assert lay is not None
    out = np.zeros((rows, cols), dtype=dtype)
    seen = np.zeros((rows, cols), dtype=bool)
    for lane, regs in enumerate(lanes):
        for (r, c), v in zip(lane_elements(lay, lane), _elements(op, matrix, regs)):
            out[r, c] = v
            seen[r, c] = True
    # (C of m8n8k4 with f16 inputs covers the quad pairs' diagonal blocks only)
    assert seen.all() or matrix == "c", f"fragment layout of {matrix} does not cover the matrix"
    return out


def warp_mma(op: MatrixOp, operands: list[list[int]]) -> list[list[int]]:
    """D registers (raw bits) of each of the 32 lanes from their a, b, c registers (raw
    bits, in operand order)."""
    m, n, k = op.dims()
    na, nb = op.registers("a"), op.registers("b")
    a_regs = [regs[:na] for regs in operands]
    b_regs = [regs[na:na + nb] for regs in operands]
    c_regs = [regs[na + nb:] for regs in operands]
    t = op.types["a"]
    if t in ("s8", "u8"):
        a = _matrix(op, "a", a_regs, m, k, object)
        b = _matrix(op, "b", b_regs, k, n, object)
        c = _matrix(op, "c", c_regs, m, n, object)
        d = c + a.dot(b)
        lo, hi = -(1 << 31), (1 << 31) - 1
        if op.satfinite:
            d = np.vectorize(lambda x: min(max(x, lo), hi), otypes=[object])(d)
        else:
            d = np.vectorize(lambda x: ((x - lo) % (1 << 32)) + lo, otypes=[object])(d)
    elif t == "f64":
        a = _matrix(op, "a", a_regs, m, k, object)
        b = _matrix(op, "b", b_regs, k, n, object)
        d = _matrix(op, "c", c_regs, m, n, object)
        for kk in range(k):
            for i in range(m):
                for j in range(n):
                    # one rounding per fma: the exact value rounded to the nearest double
                    d[i, j] = float(Fraction(a[i, kk]) * Fraction(b[kk, j]) + Fraction(d[i, j]))
    else:
        a = _matrix(op, "a", a_regs, m, k, np.float32)
        b = _matrix(op, "b", b_regs, k, n, np.float32)
        c_type = op.types["c"]
        if c_type == "f16":
            c = _matrix_f16_acc(op, c_regs, m, n)
        else:
            c = _matrix(op, "c", c_regs, m, n, np.float32)
        d = c.astype(np.float32)
        for kk in range(k):
            # the product of two f16/bf16/tf32 values is exact in f32; one rounding per sum
            d = (d + np.outer(a[:, kk], b[kk, :]).astype(np.float32)).astype(np.float32)
    return _fragments(op, d)


def _matrix_f16_acc(op: MatrixOp, regs: list[list[int]], m: int, n: int) -> np.ndarray:
    lay = op.layout("c")
    assert lay is not None
    out = np.zeros((m, n), dtype=np.float32)
    for lane, rs in enumerate(regs):
        vals = [np.float32(np.uint16((r >> (16 * h)) & 0xFFFF).view(np.float16))
                for r in rs for h in (0, 1)]
        for (r, c), v in zip(lane_elements(lay, lane), vals):
            out[r, c] = v
    return out


def _fragments(op: MatrixOp, d: np.ndarray) -> list[list[int]]:
    t = op.types["d"]
    lay = op.layout("d")
    assert lay is not None
    out: list[list[int]] = []
    for lane in range(32):
        vals = [d[r, c] for r, c in lane_elements(lay, lane)]
        if t == "f16":
            halves = [int(np.float16(np.float32(v)).view(np.uint16)) for v in vals]
            out.append([halves[i] | halves[i + 1] << 16 for i in range(0, len(halves), 2)])
        elif t == "f32":
            out.append([int(np.float32(v).view(np.uint32)) for v in vals])
        elif t == "f64":
            out.append([int(np.float64(v).view(np.uint64)) for v in vals])
        else:
            out.append([int(v) & 0xFFFFFFFF for v in vals])
    return out


def wmma_load(op: MatrixOp, lane: int, base: int, stride: int) -> list[int]:
    """One lane's registers (raw bits) of a fragment read from memory at real address
    `base`, `stride` elements between rows (.row) or columns (.col)."""
    t = op.types[op.matrix]
    lay = op.layout(op.matrix)
    assert lay is not None
    size = max(_BITS.get(t, 32 if t != "f64" else 64) // 8, 1)
    mem_type = {"f16": "b16", "bf16": "b16", "s8": "b8", "u8": "b8", "tf32": "b32", "f32": "b32",
                "s32": "b32", "f64": "b64"}[t]
    row_major = op.layouts[0] == "row"
    elems = []
    for r, c in lane_elements(lay, lane):
        index = r * stride + c if row_major else c * stride + r
        elems.append(int(load(base + index * size, mem_type)))   # type: ignore[call-overload]
    return _pack(elems, t)


def _pack(elems: list[int], t: str) -> list[int]:
    per = per_register(t)
    if per == 1:
        return elems
    w = 32 // per
    return [sum((e & ((1 << w) - 1)) << (w * j) for j, e in enumerate(elems[i:i + per]))
            for i in range(0, len(elems), per)]


def store_plan(op: MatrixOp, lane: int, stride: int, regs: list[int]) -> list[tuple[int, str, int]]:
    """wmma.store.d: (byte offset from the base, memory type, bits) per element of `lane`."""
    t = op.types["d"]
    lay = op.layout("d")
    assert lay is not None
    row_major = op.layouts[0] == "row"
    if t == "f16":
        elems = [(r >> (16 * h)) & 0xFFFF for r in regs for h in (0, 1)]
        size, mem_type = 2, "b16"
    elif t == "f64":
        elems, size, mem_type = list(regs), 8, "b64"
    else:
        elems, size, mem_type = list(regs), 4, "b32"
    out = []
    for (r, c), bits in zip(lane_elements(lay, lane), elems):
        index = r * stride + c if row_major else c * stride + r
        out.append((index * size, mem_type, bits))
    return out


def ldmatrix(spec: LdMatrix, addresses: list[int]) -> list[list[int]]:
    """Each lane's registers from the row addresses (real addresses) the 32 lanes gave:
    matrix m's row i is the 8 halves at the address of lane 8m + i."""
    out: list[list[int]] = []
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        regs = []
        for m in range(spec.count):
            if not spec.trans:
                regs.append(int(load(addresses[8 * m + g] + 4 * t, "b32")))  # type: ignore[call-overload]
            else:
                lo = int(load(addresses[8 * m + 2 * t] + 2 * g, "b16"))  # type: ignore[call-overload]
                hi = int(load(addresses[8 * m + 2 * t + 1] + 2 * g, "b16"))  # type: ignore[call-overload]
                regs.append(lo | hi << 16)
        out.append(regs)
    return out


def stmatrix(spec: LdMatrix, addresses: list[int], regs: list[list[int]]) -> None:
    """Every lane's registers stored to the rows the 32 lanes' addresses name (the inverse
    of ldmatrix)."""
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for m in range(spec.count):
            word = regs[lane][m]
            if not spec.trans:
                store(addresses[8 * m + g] + 4 * t, "b32", word)
            else:
                store(addresses[8 * m + 2 * t] + 2 * g, "b16", word & 0xFFFF)
                store(addresses[8 * m + 2 * t + 1] + 2 * g, "b16", word >> 16)


def movmatrix(words: list[int]) -> list[list[int]]:
    """movmatrix.m8n8.trans.b16: lane l holds row l / 4, columns 2 (l % 4), +1 of an 8x8
    matrix; afterwards, of its transpose."""
    def element(r: int, c: int) -> int:
        return (words[4 * r + c // 2] >> (16 * (c % 2))) & 0xFFFF
    return [[element(2 * (lane & 3), lane >> 2) | element(2 * (lane & 3) + 1, lane >> 2) << 16]
            for lane in range(32)]


def _space(op: Operation) -> str:
    return next((s for s in ("global", "shared") if s in op.attributes["mods"]), "generic")


def _wmma_access(th: "Thread", op: Operation) -> tuple[MatrixOp, int, int]:
    """(shape, base address, stride) of a wmma load or store, its extent checked."""
    spec = parse_matrix_op("wmma", tuple(op.attributes["mods"]))
    assert not isinstance(spec, str)
    space = _space(op)
    base = th.address(op, space, 1)
    stride = th.bits(op.operands[1]) & 0xFFFFFFFF
    _check_extent(th, op, space, base, spec, stride)
    return spec, base, stride


@handles("ptx.wmma_load")
def _wmma_load(th: "Thread", op: Operation) -> None:
    spec, base, stride = _wmma_access(th, op)
    regs = wmma_load(spec, th.linear & 31, base, stride)
    for r, bits in zip(op.results, regs):
        th.env[r] = from_bits(bits, r.type)


@handles("ptx.wmma_store")
def _wmma_store(th: "Thread", op: Operation) -> None:
    spec, base, stride = _wmma_access(th, op)
    regs = [th.bits(v) for v in op.operands[2:]]
    for offset, mem_type, bits in store_plan(spec, th.linear & 31, stride, regs):
        store(base + offset, mem_type, bits)


def _check_extent(th: "Thread", op: Operation, space: str, base: int, spec: MatrixOp,
                  stride: int) -> None:
    """Shared memory: the whole tile must lie in the block's window."""
    if space != "shared":
        return
    m, n, k = shape_dims(spec.shape)
    rows, cols = {"a": (m, k), "b": (k, n)}.get(spec.matrix, (m, n))
    outer, inner = (rows, cols) if spec.layouts[0] == "row" else (cols, rows)
    size = {"f16": 2, "bf16": 2, "s8": 1, "u8": 1, "f64": 8}.get(spec.types[spec.matrix], 4)
    end = base - th.window_base("shared") + ((outer - 1) * stride + inner) * size
    if end > th.window_size("shared"):
        th.fail(f"wmma tile in shared memory out of bounds: ends at byte {end} of a window of "
                f"{th.window_size('shared')}", op)
