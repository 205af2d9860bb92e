"""Kernel arguments: Python values packed into the parameter buffer of a launch.

One set of rules for the compiled path (`Function`) and the reference interpreter: arrays
(and anything with the array interface or the buffer protocol) pass their data address;
scalars are converted to the parameter type the PTX declares, range-checked; structs by
value come from NumPy structured scalars or bytes of the exact size."""

from __future__ import annotations

import ctypes
import struct
from typing import Any, Sequence

import numpy as np

from cpuify.frontend.ptx_ast import type_size

# PTX parameter types do not say whether a C integer was signed (`int` is `.u32`, `char`
# is `.u8`): accept both the signed and the unsigned range of the width
INT_RANGES = {
    f"{k}{w}": (-2**(w - 1), 2**w - 1, fmt)
    for w, fmt in ((8, "B"), (16, "H"), (32, "I"), (64, "Q")) for k in "bsu"
}


def address_of(arg: Any) -> int | None:
    """Data address of an array-like argument, or None if it is not one."""
    if type(arg) is np.ndarray:
        return arg.__array_interface__["data"][0]
    iface = getattr(arg, "__array_interface__", None)
    if iface is not None:
        return int(iface["data"][0])
    if isinstance(arg, (bytes, str)):
        return None
    try:
        mv = memoryview(arg)
    except TypeError:
        return None
    if mv.readonly:
        arr = np.frombuffer(mv, dtype=np.uint8)
        return arr.__array_interface__["data"][0]
    return ctypes.addressof(ctypes.c_char.from_buffer(mv))


def pack_arguments(kernel: str, plan: Sequence[tuple[str, str, int, int]],
                   aggregate: Sequence[bool], args: Sequence[Any], buf: Any) -> None:
    """Pack `args` into `buf` (a bytearray or ctypes char array) by `plan`, a list of
    (name, PTX type, byte offset, size); `aggregate[i]` marks byte-array (struct) params."""
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"kernel '{kernel}': args must be a tuple, got {type(args).__name__}")
    if len(args) != len(plan):
        raise TypeError(f"kernel '{kernel}' takes {len(plan)} argument(s) "
                        f"({', '.join(t for _, t, _, _ in plan)}), {len(args)} given")
    for i, ((_, t, off, size), arg) in enumerate(zip(plan, args)):
        if t in ("f32", "f64"):
            if isinstance(arg, (float, int, np.floating, np.integer)) and not isinstance(arg, bool):
                struct.pack_into("<f" if t == "f32" else "<d", buf, off, float(arg))
                continue
            raise TypeError(f"kernel '{kernel}' argument {i}: expected a {t} scalar, "
                            f"got {type(arg).__name__}")
        if aggregate[i] or size != type_size(t):
            buf[off:off + size] = _struct_bytes(kernel, i, arg, size)
            continue
        if t in ("b64", "u64", "s64"):
            addr = address_of(arg) if not isinstance(arg, (int, np.integer)) else None
            if addr is not None:
                struct.pack_into("<Q", buf, off, addr)
                continue
            if arg is None:
                struct.pack_into("<Q", buf, off, 0)
                continue
        if isinstance(arg, (bool, np.bool_)):
            arg = int(arg)
        if isinstance(arg, (int, np.integer)):
            lo, hi, fmt = INT_RANGES[t]
            v = int(arg)
            if not lo <= v <= hi:
                raise ValueError(f"kernel '{kernel}' argument {i}: {v} does not fit the "
                                 f"parameter type .{t}")
            struct.pack_into("<" + fmt, buf, off, v & ((1 << (8 * size)) - 1))
            continue
        if isinstance(arg, (float, np.floating)):
            raise TypeError(f"kernel '{kernel}' argument {i}: expected an integer for "
                            f"parameter type .{t}, got {type(arg).__name__} {arg!r}")
        raise TypeError(f"kernel '{kernel}' argument {i}: cannot pass "
                        f"{type(arg).__name__} for a .{t} parameter"
                        + (" (expected a pointer: a NumPy array)" if t.endswith("64") else ""))


def _struct_bytes(kernel: str, i: int, arg: Any, size: int) -> bytes:
    if isinstance(arg, np.generic) or isinstance(arg, np.ndarray) and arg.dtype.fields is not None:
        data = arg.tobytes()
    elif isinstance(arg, (bytes, bytearray, memoryview)):
        data = bytes(arg)
    else:
        raise TypeError(f"kernel '{kernel}' argument {i}: a struct of {size} bytes is passed "
                        f"by value; give a NumPy structured scalar or bytes, not {type(arg).__name__}")
    if len(data) != size:
        raise ValueError(f"kernel '{kernel}' argument {i}: struct parameter is {size} bytes, "
                         f"the value given is {len(data)} bytes")
    return data
