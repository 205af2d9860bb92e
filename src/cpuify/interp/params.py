"""The interpreter's own packing of kernel arguments into a parameter buffer.

Written apart from the compiled path's packer (`cpuify.api.arguments`) on purpose: the
interpreter is the oracle the compiled path is checked against, so it shares no code with
it; `tests/test_interp.py` checks that both packers agree.  The rules are CuPy's: arrays
(and anything with the array interface or the buffer protocol) pass their data address,
scalars are converted to the PTX parameter type and range-checked, structs by value come
from NumPy structured scalars or bytes of the exact size."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from cpuify.ir.modifiers import type_size


class Param(Protocol):
    """What the packer reads of a kernel parameter (the lifted kernel's KernelParam)."""
    name: str
    ptx_type: str
    offset: int
    size: int
    dims: tuple[int, ...]


def data_address(arg: Any) -> int | None:
    """The data address of an array-like argument, or None if `arg` is not one."""
    if isinstance(arg, (bytes, str, int, float, np.generic)) or arg is None:
        return None
    iface = getattr(arg, "__array_interface__", None)
    if iface is not None:
        return int(iface["data"][0])
    try:
        view = np.frombuffer(arg, dtype=np.uint8)      # shares the memory of the buffer
    except (TypeError, ValueError):
        return None
    return int(view.__array_interface__["data"][0])


def _struct_value(kernel: str, i: int, arg: Any, size: int) -> bytes:
    if isinstance(arg, np.generic) or (isinstance(arg, np.ndarray) and arg.dtype.fields is not None):
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


def _scalar(kernel: str, i: int, ptx_type: str, arg: Any) -> bytes:
    size = type_size(ptx_type)
    if ptx_type in ("f32", "f64"):
        if isinstance(arg, (float, int, np.floating, np.integer)) and not isinstance(arg, (bool, np.bool_)):
            return struct.pack("<f" if ptx_type == "f32" else "<d", float(arg))
        raise TypeError(f"kernel '{kernel}' argument {i}: expected a {ptx_type} scalar, "
                        f"got {type(arg).__name__}")
    if size == 8:
        if arg is None:
            return bytes(8)
        addr = data_address(arg)
        if addr is not None:
            return addr.to_bytes(8, "little")
    if isinstance(arg, (bool, np.bool_)):
        arg = int(arg)
    if isinstance(arg, (int, np.integer)):
        # a PTX integer type does not say whether the C type was signed (`int` is .u32):
        # both ranges of the width are accepted
        value, bits = int(arg), 8 * size
        if not -2**(bits - 1) <= value < 2**bits:
            raise ValueError(f"kernel '{kernel}' argument {i}: {value} does not fit the "
                             f"parameter type .{ptx_type}")
        return (value & (2**bits - 1)).to_bytes(size, "little")
    if isinstance(arg, (float, np.floating)):
        raise TypeError(f"kernel '{kernel}' argument {i}: expected an integer for "
                        f"parameter type .{ptx_type}, got {type(arg).__name__} {arg!r}")
    raise TypeError(f"kernel '{kernel}' argument {i}: cannot pass {type(arg).__name__} for a "
                    f".{ptx_type} parameter" + (" (expected a pointer: a NumPy array)" if size == 8 else ""))


def pack_arguments(kernel: str, params: Sequence[Param], param_size: int,
                   args: Sequence[Any]) -> bytes:
    """The parameter buffer of a launch of `kernel`: `args` at the offsets of `params`."""
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"kernel '{kernel}': args must be a tuple, got {type(args).__name__}")
    if len(args) != len(params):
        raise TypeError(f"kernel '{kernel}' takes {len(params)} argument(s) "
                        f"({', '.join(p.ptx_type for p in params)}), {len(args)} given")
    buf = bytearray(max(param_size, 1))
    for i, (p, arg) in enumerate(zip(params, args)):
        if p.dims or p.size != type_size(p.ptx_type):
            data = _struct_value(kernel, i, arg, p.size)
        else:
            data = _scalar(kernel, i, p.ptx_type, arg)
        buf[p.offset:p.offset + len(data)] = data
    return bytes(buf)
