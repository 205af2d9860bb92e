"""Textures and surfaces for the reference interpreter: `ptx.tex`, `ptx.tld4`, `ptx.txq`,
`ptx.suld`, `ptx.sust` on object handles.

A handle is the address of the 128-byte descriptor documented in docs/usage.md ("Textures
and surfaces"); this module reads it with its own code (the compiled path samples in
runtime/cpuify_tex.c) and samples texel by texel in float32, as the CUDA programming
guide's texture fetching appendix describes: address modes on texel indices (wrap and mirror
act as clamp with unnormalized coordinates), point sampling at floor(x), linear filtering
between floor(x - 0.5) and the next texel with weights in 9-bit fixed point (8 fractional
bits, rounded to the nearest 1/256), normalized-float reads of 8/16-bit integers."""

from __future__ import annotations

import ctypes
import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cpuify.interp.ops import handles
from cpuify.ir.core import Operation
from cpuify.ir.modifiers import mods, types

if TYPE_CHECKING:
    from cpuify.interp.thread import Thread

F = np.float32
TEX_MAGIC, SURF_MAGIC = 0x31584554, 0x31525553
_LAYOUT = struct.Struct("<14I7Q4f")
_GEOMETRY = {"1d": (1, False), "2d": (2, False), "3d": (3, False), "a1d": (1, True), "a2d": (2, True)}
_TXQ = ("width", "height", "depth", "channel_data_type", "channel_order", "normalized_coords",
        "filter_mode", "addr_mode_0", "addr_mode_1", "addr_mode_2", "array_size",
        "num_mipmap_levels", "num_samples")
_WRAP, _CLAMP, _MIRROR, _BORDER = range(4)


@dataclass
class Descriptor:
    magic: int
    channels: int
    bits: int
    kind: int            # 0 signed, 1 unsigned, 2 float
    dims: int
    layered: int
    linear: int
    filter: int
    address: tuple[int, int, int]
    normalized: int
    read_mode: int
    sizes: tuple[int, int, int]
    layers: int
    pitch: int
    slice: int
    data: int
    border: tuple[float, ...]

    @property
    def element_size(self) -> int:
        return self.channels * self.bits // 8


def descriptor(th: "Thread", op: Operation, handle: int, magic: int) -> Descriptor:
    what = "texture" if magic == TEX_MAGIC else "surface"
    if handle == 0:
        th.fail(f"{what} access through a null {what} object handle", op)
    f = _LAYOUT.unpack(ctypes.string_at(handle, _LAYOUT.size))
    if f[0] != magic and not (op.name == "ptx.txq" and f[0] in (TEX_MAGIC, SURF_MAGIC)):
        th.fail(f"{what} access through an invalid {what} object handle {handle:#x}", op)
    return Descriptor(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], (f[8], f[9], f[10]),
                      f[11], f[12], (f[14], f[15], f[16]), f[17], f[18], f[19], f[20],
                      tuple(f[21:25]))


def _raw_channels(d: Descriptor, x: int, y: int, z: int, layer: int) -> list[int]:
    addr = d.data + (z + layer) * d.slice + y * d.pitch + x * d.element_size
    size = d.bits // 8
    raw = ctypes.string_at(addr, d.element_size)
    return [int.from_bytes(raw[c * size:(c + 1) * size], "little") for c in range(d.channels)]


def _as_int(d: Descriptor, v: int) -> int:
    if d.kind == 0 and v >= 1 << (d.bits - 1):
        return v - (1 << d.bits)
    return v


def _as_float(d: Descriptor, v: int) -> np.float32:
    if d.kind == 2:
        dtype = np.float16 if d.bits == 16 else np.float32
        return F(np.frombuffer(v.to_bytes(d.bits // 8, "little"), dtype)[0])
    i = _as_int(d, v)
    if d.read_mode == 1 and d.bits < 32:
        if d.kind == 1:
            return F(i) / F((1 << d.bits) - 1)
        return max(F(i) / F((1 << (d.bits - 1)) - 1), F(-1))
    return F(i)


def _address(d: Descriptor, dim: int, i: int, n: int) -> int | None:
    mode = d.address[dim]
    if not d.normalized and mode in (_WRAP, _MIRROR):
        mode = _CLAMP
    if mode == _WRAP:
        return i % n
    if mode == _MIRROR:
        m = i % (2 * n)
        return m if m < n else 2 * n - 1 - m
    if mode == _BORDER:
        return i if 0 <= i < n else None
    return min(max(i, 0), n - 1)


def _texel(d: Descriptor, idx: list[int], layer: int) -> tuple[list[np.float32], list[int]]:
    """(channels as floats, as integers) of the texel at integer coordinates idx."""
    pos = [0, 0, 0]
    for k in range(d.dims):
        a = _address(d, k, idx[k], d.sizes[k])
        if a is None:
            # channels the format lacks read 0, the border color's too
            return ([F(b) if c < d.channels else F(0) for c, b in enumerate(d.border)],
                    [int(b) if c < d.channels else 0 for c, b in enumerate(d.border)])
        pos[k] = a
    raw = _raw_channels(d, pos[0], pos[1], pos[2], layer) + [0] * (4 - d.channels)
    floats = [_as_float(d, r) if c < d.channels else F(0) for c, r in enumerate(raw)]
    ints = [_as_int(d, r) if c < d.channels else 0 for c, r in enumerate(raw)]
    return floats, ints


def _floor(v: np.float32) -> int:
    if math.isnan(v):
        return 0
    return int(max(min(math.floor(v), 10 ** 12), -10 ** 12))


def _weight(frac: np.float32) -> np.float32:
    return F(math.floor(F(frac * F(256)) + F(0.5))) / F(256)


def _lerp(a: np.float32, lo: np.float32, hi: np.float32) -> np.float32:
    return F((F(1) - a) * lo + a * hi)


def _geometry(op: Operation) -> tuple[int, bool]:
    return next(_GEOMETRY[m] for m in mods(op) if m in _GEOMETRY)


@handles("ptx.tex", "ptx.tld4")
def _tex(th: "Thread", op: Operation) -> None:
    result_type, coord_type = types(op)[0], types(op)[1]
    d = descriptor(th, op, th.src(op, 0, "u64"), TEX_MAGIC)
    ndim, layered = _geometry(op)
    coords = [th.src(op, 1 + k, "s32" if (layered and k == 0) or coord_type == "s32" else "f32")
              for k in range(4)]
    layer = 0
    if layered:
        layer = min(max(int(coords[0]), 0), max(d.layers - 1, 0))
        coords = coords[1:]
    ndim = min(ndim, d.dims)
    gather = next((" rgba".index(m) for m in mods(op) if m in ("r", "g", "b", "a")), 0) \
        if op.name == "ptx.tld4" else 0
    if coord_type == "s32":
        idx = [int(coords[k]) if k < ndim else 0 for k in range(3)]
        if d.linear and not 0 <= idx[0] < d.sizes[0]:
            floats, ints = [F(0)] * 4, [0] * 4
        else:
            floats, ints = _texel(d, idx, layer)
        _results(th, op, result_type, floats, ints)
        return
    x = [F(coords[k]) * F(d.sizes[k]) if d.normalized else F(coords[k]) for k in range(ndim)]
    if not (d.filter == 1 or gather):
        idx = [_floor(v) for v in x] + [0] * (3 - ndim)
        floats, ints = _texel(d, idx, layer)
        _results(th, op, result_type, floats, ints)
        return
    xb = [F(v - F(0.5)) for v in x]
    base = [_floor(v) for v in xb]
    w = [F(0) if math.isnan(v) else _weight(F(v - F(math.floor(v)))) for v in xb]

    def corner(*off: int) -> tuple[list[np.float32], list[int]]:
        return _texel(d, [base[k] + off[k] if k < ndim else 0 for k in range(3)], layer)
    if gather:
        c = gather - 1
        texels = [corner(0, 1), corner(1, 1), corner(1, 0), corner(0, 0)]
        _results(th, op, result_type, [t[0][c] for t in texels], [t[1][c] for t in texels])
        return
    # the corner texels' float channels, x fastest: (0,0,0), (1,0,0), (0,1,0), (1,1,0), ...
    t = [corner(k & 1, (k >> 1) & 1, (k >> 2) & 1)[0] for k in range(1 << ndim)]
    out = []
    for c in range(4):
        if ndim == 1:
            out.append(_lerp(w[0], t[0][c], t[1][c]))
            continue
        planes = [_lerp(w[1], _lerp(w[0], t[4 * z][c], t[4 * z + 1][c]),
                        _lerp(w[0], t[4 * z + 2][c], t[4 * z + 3][c])) for z in range(ndim - 1)]
        out.append(planes[0] if ndim == 2 else _lerp(w[2], planes[0], planes[1]))
    _results(th, op, result_type, out, [0] * 4)


def _results(th: "Thread", op: Operation, result_type: str, floats: list[np.float32],
             ints: list[int]) -> None:
    for k in range(len(op.results)):
        if result_type == "f32":
            th.set(op, F(floats[k]), "f32", k)
        else:
            th.set(op, ints[k] & 0xFFFFFFFF, "u32", k)


@handles("ptx.txq")
def _txq(th: "Thread", op: Operation) -> None:
    d = descriptor(th, op, th.src(op, 0, "u64"), TEX_MAGIC)
    query = next(m for m in mods(op) if m in _TXQ)
    values = {"width": d.sizes[0], "height": d.sizes[1], "depth": d.sizes[2],
              "normalized_coords": d.normalized, "filter_mode": d.filter,
              "addr_mode_0": d.address[0], "addr_mode_1": d.address[1],
              "addr_mode_2": d.address[2], "array_size": d.layers, "num_mipmap_levels": 1,
              "num_samples": 1}
    th.set(op, values.get(query, 0) & 0xFFFFFFFF, "u32")


def _surface_address(th: "Thread", op: Operation) -> tuple[int | None, int, int]:
    """(address or None for a zero-mode access out of range, element bits, elements)."""
    d = descriptor(th, op, th.src(op, 0, "u64"), SURF_MAGIC)
    ndim, layered = _geometry(op)
    bits = int(types(op)[-1][1:])
    n = 4 if "v4" in mods(op) else 2 if "v2" in mods(op) else 1
    nbytes = bits * n // 8
    raw = [th.src(op, 1 + k, "s32") for k in range(4)]
    if layered:
        layer, c = raw[0], raw[1:] + [0]
    else:
        layer, c = 0, raw
    c = [c[k] if k < ndim else 0 for k in range(3)] + [layer]
    hi = [max(d.sizes[0] * d.element_size - nbytes, 0), d.sizes[1] - 1, d.sizes[2] - 1,
          max(d.layers - 1, 0)]
    mode = next((m for m in mods(op) if m in ("trap", "clamp", "zero")), "trap")
    for k in range(4):
        if 0 <= c[k] <= hi[k]:
            continue
        if mode == "clamp":
            c[k] = min(max(c[k], 0), hi[k])
        elif mode == "zero":
            return None, bits, n
        else:
            th.fail(f"surface access out of range in trap mode at x {c[0]} bytes, y {c[1]}, "
                    f"z {c[2]}, layer {c[3]}", op)
    return d.data + (c[2] + c[3]) * d.slice + c[1] * d.pitch + c[0], bits, n


@handles("ptx.suld")
def _suld(th: "Thread", op: Operation) -> None:
    addr, bits, n = _surface_address(th, op)
    size = bits // 8
    raw = ctypes.string_at(addr, size * n) if addr is not None else bytes(size * n)
    for k in range(min(n, len(op.results))):
        th.set(op, int.from_bytes(raw[k * size:(k + 1) * size], "little"), f"b{bits}", k)


@handles("ptx.sust")
def _sust(th: "Thread", op: Operation) -> None:
    addr, bits, n = _surface_address(th, op)
    if addr is None:
        return
    size = bits // 8
    data = b"".join((th.src(op, 5 + k, f"b{bits}") & ((1 << bits) - 1)).to_bytes(size, "little")
                    for k in range(n))
    ctypes.memmove(addr, data, len(data))
