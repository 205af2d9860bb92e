"""Raw memory for the reference interpreter: typed loads and stores at real process
addresses (NumPy arrays passed by pointer, module variables, shared and local windows) and
aligned NumPy-backed allocations."""

from __future__ import annotations

import ctypes

import numpy as np

from cpuify.interp.values import from_bits, ir_type_of, mask, to_bits
from cpuify.ir.modifiers import type_size


def align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def load(addr: int, ptx_type: str) -> object:
    """The value of PTX type `ptx_type` stored at a real address (little endian)."""
    size = type_size(ptx_type)
    raw = ctypes.string_at(addr, size)
    return from_bits(int.from_bytes(raw, "little"), ir_type_of(ptx_type))


def store(addr: int, ptx_type: str, value: object) -> None:
    """Store `value` (a value of PTX type `ptx_type`) at a real address."""
    size = type_size(ptx_type)
    bits = to_bits(value, ir_type_of(ptx_type)) & mask(8 * size)
    ctypes.memmove(addr, bits.to_bytes(size, "little"), size)


def alloc(size: int, align: int = 64) -> tuple[np.ndarray, int]:
    """A zero-filled NumPy buffer of `size` bytes at an `align`-aligned address; the caller
    keeps the array (the memory lives as long as it does)."""
    raw = np.zeros(size + align, dtype=np.uint8)
    base = raw.ctypes.data
    start = align_up(base, align) - base
    return raw[start:start + size], base + start
