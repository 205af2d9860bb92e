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
        return array_address(arg)
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


def _data_field_offset() -> int | None:
    """Where an ndarray object holds its data pointer: NumPy's public PyArrayObject_fields
    starts with PyObject_HEAD and then `char *data` (16 bytes in, 32 in a Python built with
    Py_TRACE_REFS).  Checked on two probe arrays; None if neither offset matches."""
    probes = [np.arange(8, dtype=np.uint8), np.arange(8, dtype=np.uint8)[3:]]
    for off in (16, 32):
        if all(ctypes.c_void_p.from_address(id(a) + off).value == a.__array_interface__["data"][0]
               for a in probes):
            return off
    return None


_DATA_OFFSET = _data_field_offset()
_pointer_at = ctypes.c_void_p.from_address


def array_address(arr: np.ndarray) -> int:
    """Data address of an ndarray (exactly that type): read from the object, where
    `__array_interface__` builds a dict on every access (0.9 us, most of the time of a
    launch with a few array arguments)."""
    if _DATA_OFFSET is not None:
        return _pointer_at(id(arr) + _DATA_OFFSET).value or 0
    return arr.__array_interface__["data"][0]


class ArgumentPacker:
    """pack_arguments for one kernel's parameters, with a fast path for the usual kinds of
    argument: NumPy arrays for pointers, NumPy integer scalars of the parameter's width,
    floats for f32/f64.  Anything else (and every error) takes pack_arguments."""

    _INTS = {1: (np.int8, np.uint8), 2: (np.int16, np.uint16), 4: (np.int32, np.uint32),
             8: (np.int64, np.uint64)}

    def __init__(self, kernel: str, plan: Sequence[tuple[str, str, int, int]],
                 aggregate: Sequence[bool]) -> None:
        self.kernel, self.plan, self.aggregate = kernel, list(plan), list(aggregate)
        # per parameter: (pointer?, offset, {exact Python/NumPy type: struct format})
        self.fast: list[tuple[bool, int, dict[type, str]]] = []
        for (_, t, off, size), agg in zip(plan, aggregate):
            formats: dict[type, str] = {}
            if t in ("f32", "f64"):
                fmt = "<f" if t == "f32" else "<d"
                formats = {float: fmt, np.float32: fmt, np.float64: fmt}
            elif not agg and size == type_size(t) and size in self._INTS:
                signed, unsigned = self._INTS[size]
                letter = {1: "b", 2: "h", 4: "i", 8: "q"}[size]
                formats = {signed: "<" + letter, unsigned: "<" + letter.upper()}
            self.fast.append((t in ("b64", "u64", "s64") and not agg and size == 8, off, formats))

    def __call__(self, args: Sequence[Any], buf: Any) -> None:
        if type(args) is tuple and len(args) == len(self.fast):
            pack = struct.pack_into
            for (pointer, off, formats), arg in zip(self.fast, args):
                kind = type(arg)
                if pointer and kind is np.ndarray:
                    pack("<Q", buf, off, array_address(arg))
                    continue
                fmt = formats.get(kind)
                if fmt is None:
                    break
                pack(fmt, buf, off, arg)
            else:
                return
        pack_arguments(self.kernel, self.plan, self.aggregate, args, buf)


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
