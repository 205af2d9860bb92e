"""Device `printf` and `assert` messages for the interpreter, written apart from the native
runtime's (`cpuify_vprintf` in runtime/cpuify_rt.c) so that the oracle does not share the
code it checks.

CUDA's vprintf ABI: the format string and a buffer holding the arguments, each aligned to
its own size: 4 bytes for `%d %i %u %o %x %X %c` (8 with `l`, `ll`, `j`, `z`, `t`), 8 for
`%s %p %n` and for floats (promoted to double).  Each conversion is formatted by the C
library's `snprintf`, so the text is C's, byte for byte; a conversion that cannot be
printed (`*` width, an unknown letter, missing arguments) is copied as written."""

from __future__ import annotations

import ctypes
import os
import struct
import sys

_LIBC = ctypes.CDLL(None)
_LIBC.fflush.argtypes = [ctypes.c_void_p]
_LIBC.fflush.restype = ctypes.c_int

_INT_CONVERSIONS = "diuoxX"
_FLOAT_CONVERSIONS = "fFeEgGaA"
_WIDE = ("l", "ll", "j", "z", "t", "L")


def _snprintf(spec: bytes, value: ctypes._SimpleCData) -> bytes:  # type: ignore[name-defined]
    n = _LIBC.snprintf(None, ctypes.c_size_t(0), spec, value)
    if n < 0:
        return b""
    buf = ctypes.create_string_buffer(n + 1)
    _LIBC.snprintf(buf, ctypes.c_size_t(n + 1), spec, value)
    return buf.raw[:n]


class _Args:
    """The argument buffer, read in order, each argument aligned to its size."""

    def __init__(self, address: int) -> None:
        self.address = address
        self.offset = 0

    def next(self, size: int) -> bytes | None:
        if not self.address:
            return None
        self.offset = (self.offset + size - 1) // size * size
        data = ctypes.string_at(self.address + self.offset, size)
        self.offset += size
        return data


def _parse_spec(fmt: bytes, i: int) -> tuple[int, bytes, str, str, bool]:
    """The conversion starting at fmt[i] == '%': (end index, flags+width+precision,
    length modifier, conversion letter or '' at the end of the string, usable)."""
    j = i + 1
    ok = True
    while j < len(fmt) and fmt[j:j + 1] in (b"-", b"+", b" ", b"#", b"0"):
        j += 1
    for part in ("width", "precision"):
        if part == "precision":
            if fmt[j:j + 1] != b".":
                break
            j += 1
        if fmt[j:j + 1] == b"*":
            ok = False
            j += 1
            continue
        start = j
        while j < len(fmt) and fmt[j:j + 1].isdigit():
            j += 1
        if j - start > 6:
            ok = False                     # an absurd width or precision
    body = fmt[i + 1:j]
    length = ""
    for mod in ("hh", "h", "ll", "l", "j", "z", "t", "L"):
        if fmt[j:j + len(mod)].decode("latin-1") == mod:
            length = mod
            j += len(mod)
            break
    if j >= len(fmt):
        return len(fmt), body, length, "", False
    return j + 1, body, length, chr(fmt[j]), ok


def format_printf(fmt: bytes, args_address: int) -> bytes:
    """The text CUDA's printf(fmt, ...) prints, the arguments at `args_address`."""
    out = bytearray()
    args = _Args(args_address)
    i = 0
    while i < len(fmt):
        k = fmt.find(b"%", i)
        if k < 0:
            out += fmt[i:]
            break
        out += fmt[i:k]
        if fmt[k + 1:k + 2] == b"%":
            out += b"%"
            i = k + 2
            continue
        end, body, length, conv, ok = _parse_spec(fmt, k)
        written = fmt[k:end]
        i = end
        if not conv:
            out += written
            break
        text = _convert(b"%" + body, length, conv, args) if ok else None
        out += written if text is None else text
    return bytes(out)


def _convert(spec: bytes, length: str, conv: str, args: _Args) -> bytes | None:
    """One conversion, or None when it is printed as written."""
    if conv in _INT_CONVERSIONS:
        signed = conv in "di"
        if length in _WIDE:
            raw = args.next(8)
            if raw is None:
                return None
            v = int.from_bytes(raw, "little", signed=signed)
            value = ctypes.c_longlong(v) if signed else ctypes.c_ulonglong(v)
            return _snprintf(spec + b"ll" + conv.encode(), value)
        raw = args.next(4)
        if raw is None:
            return None
        v = int.from_bytes(raw, "little", signed=signed)
        short = length.encode() if length in ("h", "hh") else b""
        value32 = ctypes.c_int(v) if signed else ctypes.c_uint(v)
        return _snprintf(spec + short + conv.encode(), value32)
    if conv == "c":
        raw = args.next(4)
        if raw is None:
            return None
        v = int.from_bytes(raw, "little")
        if length == "l":
            return _snprintf(spec + b"lc", ctypes.c_uint(v))
        return _snprintf(spec + b"c", ctypes.c_int(v & 0xFF))
    if conv == "s":
        raw = args.next(8)
        if raw is None:
            return None
        addr = int.from_bytes(raw, "little")
        if length == "l" and addr:
            return _snprintf(spec + b"ls", ctypes.c_void_p(addr))
        return _snprintf(spec + b"s", ctypes.c_char_p(ctypes.string_at(addr) if addr else b"(null)"))
    if conv == "p":
        raw = args.next(8)
        if raw is None:
            return None
        return _snprintf(spec + b"p", ctypes.c_void_p(int.from_bytes(raw, "little") or None))
    if conv in _FLOAT_CONVERSIONS:
        raw = args.next(8)
        if raw is None:
            return None
        return _snprintf(spec + conv.encode(), ctypes.c_double(struct.unpack("<d", raw)[0]))
    if conv == "n":                        # consumes its pointer, writes nothing
        return b"" if args.next(8) is not None else None
    return None


def _flush_all() -> None:
    """Python's and C's buffered output first, so that the text lands in order."""
    sys.stdout.flush()
    sys.stderr.flush()
    _LIBC.fflush(None)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def device_printf(fmt_address: int, args_address: int) -> int:
    """printf from a CUDA thread: writes to standard output, returns the byte count
    (-1 without a format string)."""
    if not fmt_address:
        return -1
    text = format_printf(ctypes.string_at(fmt_address), args_address)
    if text:
        _flush_all()
        _write(1, text)
    return min(len(text), 2**31 - 1)


def device_assert_message(message_address: int) -> None:
    """The message of a failed device `assert` (the condition's text), on standard error."""
    message = ctypes.string_at(message_address) if message_address else b"(no message)"
    _flush_all()
    _write(2, b"cpuify: device assertion failed: " + message + b"\n")
