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

from cpuify.errors import ArgumentError, ArgumentOverflowError, ArgumentValueError
from cpuify.frontend.ptx_ast import type_size

# PTX parameter types do not say whether a C integer was signed (`int` is `.u32`, `char`
# is `.u8`): accept both the signed and the unsigned range of the width
INT_RANGES = {
    f"{k}{w}": (-2**(w - 1), 2**w - 1, fmt)
    for w, fmt in ((8, "B"), (16, "H"), (32, "I"), (64, "Q")) for k in "bsu"
}


def address_of(arg: Any) -> int | None:
    """Data address of an array-like argument, or None if it is not one."""
    found = _array_like(arg)
    return None if found is None else found[0]


def _array_like(arg: Any) -> tuple[int, bool, bool] | None:
    """(data address, read-only?, holds Python objects?) of an array-like argument: an
    ndarray, anything with `__array_interface__`, a buffer; None for anything else."""
    if isinstance(arg, np.ndarray):
        return (array_address(arg) if type(arg) is np.ndarray else arg.__array_interface__["data"][0],
                not arg.flags.writeable, arg.dtype.hasobject)
    iface = getattr(arg, "__array_interface__", None)
    if isinstance(iface, dict) and isinstance(iface.get("data"), tuple):
        typestr = str(iface.get("typestr", ""))
        descr = iface.get("descr") or ()
        objects = typestr.endswith("O") or any(len(d) > 1 and str(d[1]).endswith("O")
                                               for d in descr if isinstance(d, tuple))
        return int(iface["data"][0]), bool(iface["data"][1]), objects
    if isinstance(arg, (bytes, str)):
        return None
    try:
        mv = memoryview(arg)
    except TypeError:
        return None
    objects = mv.format.endswith("O")
    if mv.readonly:
        arr = np.frombuffer(mv, dtype=np.uint8) if mv.nbytes else np.zeros(0, np.uint8)
        return arr.__array_interface__["data"][0], True, objects
    if not mv.c_contiguous or mv.nbytes == 0:
        return np.asarray(mv).__array_interface__["data"][0], False, objects
    return ctypes.addressof(ctypes.c_char.from_buffer(mv)), False, objects


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
                 aggregate: Sequence[bool], written: Sequence[int] = ()) -> None:
        self.kernel, self.plan, self.aggregate = kernel, list(plan), list(aggregate)
        self.written = frozenset(written)
        # per parameter: (pointer?, offset, {exact Python/NumPy type: struct format})
        self.fast: list[tuple[bool, int, dict[type, str]]] = []
        for i, ((_, t, off, size), agg) in enumerate(zip(plan, aggregate)):
            formats: dict[type, str] = {}
            if t in ("f32", "f64"):
                fmt = "<f" if t == "f32" else "<d"
                formats = {float: fmt, np.float32: fmt, np.float64: fmt}
            elif not agg and size == type_size(t) and size in self._INTS:
                signed, unsigned = self._INTS[size]
                letter = {1: "b", 2: "h", 4: "i", 8: "q"}[size]
                formats = {signed: "<" + letter, unsigned: "<" + letter.upper()}
            pointer = t in ("b64", "u64", "s64") and not agg and size == 8
            # 1: a pointer only read through, 2: one written through
            self.fast.append((2 if i in self.written else 1 if pointer else 0, off, formats))

    def __call__(self, args: Sequence[Any], buf: Any) -> None:
        if type(args) is tuple and len(args) == len(self.fast):
            pack = struct.pack_into
            try:
                for (pointer, off, formats), arg in zip(self.fast, args):
                    kind = type(arg)
                    if pointer and kind is np.ndarray and not arg.dtype.hasobject and \
                            (pointer == 1 or arg.flags.writeable):
                        pack("<Q", buf, off, array_address(arg))
                        continue
                    fmt = formats.get(kind)
                    if fmt is None:
                        break
                    pack(fmt, buf, off, arg)
                else:
                    return
            except (struct.error, OverflowError, TypeError, ValueError):
                pass            # the general conversion says what is wrong
        pack_arguments(self.kernel, self.plan, self.aggregate, args, buf, self.written)


def pack_arguments(kernel: str, plan: Sequence[tuple[str, str, int, int]],
                   aggregate: Sequence[bool], args: Sequence[Any], buf: Any,
                   written: Sequence[int] | frozenset[int] = ()) -> None:
    """Pack `args` into `buf` (a bytearray or ctypes char array) by `plan`, a list of
    (name, PTX type, byte offset, size); `aggregate[i]` marks byte-array (struct) params,
    `written` the pointer parameters the kernel writes through (read-only arrays refused).
    Raises ArgumentError (a TypeError) or ArgumentValueError (a ValueError; an
    OverflowError too for numbers beyond a type's range), naming the kernel and argument."""
    if not isinstance(args, (tuple, list)):
        raise ArgumentError(f"kernel '{kernel}': args must be a tuple, got {type(args).__name__}")
    if len(args) != len(plan):
        raise ArgumentError(f"kernel '{kernel}' takes {len(plan)} argument(s) "
                            f"({', '.join(t for _, t, _, _ in plan)}), {len(args)} given")
    for i, ((_, t, off, size), arg) in enumerate(zip(plan, args)):
        if t in ("f32", "f64"):
            if isinstance(arg, (float, int, np.floating, np.integer)) and \
                    not isinstance(arg, (bool, np.bool_)):
                _pack_float(kernel, i, t, arg, buf, off)
                continue
            if isinstance(arg, (complex, np.complexfloating)):
                raise ArgumentError(f"kernel '{kernel}' argument {i}: a complex value for a "
                                    f".{t} parameter (pass its .real, or declare the parameter "
                                    "complex)")
            raise ArgumentError(f"kernel '{kernel}' argument {i}: expected a {t} scalar, "
                                f"got {type(arg).__name__}")
        if aggregate[i] or size != type_size(t):
            buf[off:off + size] = _struct_bytes(kernel, i, arg, size)
            continue
        if t in ("b64", "u64", "s64") and not isinstance(arg, (int, np.integer)):
            if arg is None:
                struct.pack_into("<Q", buf, off, 0)
                continue
            found = _array_like(arg)
            if found is not None:
                addr, readonly, objects = found
                if objects:
                    raise ArgumentError(f"kernel '{kernel}' argument {i}: an array of Python "
                                        "objects (dtype=object) cannot be passed to a kernel; "
                                        "convert it to a numeric dtype")
                if readonly and i in written:
                    raise ArgumentError(f"kernel '{kernel}' argument {i}: the array is "
                                        "read-only, and the kernel writes through this pointer "
                                        "(pass a writable copy: np.array(a), or "
                                        "a.setflags(write=True) when you own its memory)")
                struct.pack_into("<Q", buf, off, addr)
                continue
        if isinstance(arg, (bool, np.bool_)):
            arg = int(arg)
        if isinstance(arg, (int, np.integer)):
            lo, hi, fmt = INT_RANGES[t]
            v = int(arg)
            if not lo <= v <= hi:
                raise ArgumentOverflowError(f"kernel '{kernel}' argument {i}: {v} does not fit "
                                            f"the parameter type .{t}")
            struct.pack_into("<" + fmt, buf, off, v & ((1 << (8 * size)) - 1))
            continue
        if isinstance(arg, (float, np.floating)):
            raise ArgumentError(f"kernel '{kernel}' argument {i}: expected an integer for "
                                f"parameter type .{t}, got {type(arg).__name__} {arg!r}")
        raise ArgumentError(f"kernel '{kernel}' argument {i}: cannot pass "
                            f"{type(arg).__name__} for a .{t} parameter"
                            + (" (expected a pointer: a NumPy array)" if t.endswith("64") else ""))


# the smallest magnitude that rounds to infinity in f32 (FLT_MAX plus half an ulp)
_F32_OVERFLOW = 2.0**128 - 2.0**103


def _pack_float(kernel: str, i: int, t: str, arg: Any, buf: Any, off: int) -> None:
    try:
        v = float(arg)
    except OverflowError:
        raise ArgumentOverflowError(f"kernel '{kernel}' argument {i}: {arg} is too large for "
                                    f"a .{t} parameter") from None
    if t == "f32" and _F32_OVERFLOW <= abs(v) < float("inf"):
        raise ArgumentOverflowError(
            f"kernel '{kernel}' argument {i}: {v!r} is beyond the float range (max "
            f"{float(np.finfo(np.float32).max)!r}); pass np.float32(np.inf) if infinity is meant")
    struct.pack_into("<f" if t == "f32" else "<d", buf, off, v)


def _complex_bytes(arg: Any, size: int) -> bytes | None:
    """A complex scalar (Python or NumPy) as the 8 bytes of a cuComplex / complex<float> or
    the 16 of a cuDoubleComplex / complex<double> passed by value."""
    if isinstance(arg, (complex, np.complexfloating)):
        z = complex(arg)
        if size == 8:
            return np.array([z], np.complex64).tobytes()
        if size == 16:
            return np.array([z], np.complex128).tobytes()
    return None


def _struct_bytes(kernel: str, i: int, arg: Any, size: int) -> bytes:
    as_complex = _complex_bytes(arg, size)
    if as_complex is not None:
        return as_complex
    if isinstance(arg, (complex, np.complexfloating)):
        raise ArgumentError(f"kernel '{kernel}' argument {i}: a complex value is 8 or 16 bytes; "
                            f"the parameter is a struct of {size} bytes")
    if isinstance(arg, np.generic) or isinstance(arg, np.ndarray) and arg.dtype.fields is not None:
        data = arg.tobytes()
    elif isinstance(arg, (bytes, bytearray, memoryview)):
        data = bytes(arg)
    else:
        raise ArgumentError(f"kernel '{kernel}' argument {i}: a struct of {size} bytes is passed "
                            f"by value; give a NumPy structured scalar or bytes, not "
                            f"{type(arg).__name__}")
    if len(data) != size:
        raise ArgumentValueError(f"kernel '{kernel}' argument {i}: struct parameter is {size} bytes, "
                         f"the value given is {len(data)} bytes")
    return data
