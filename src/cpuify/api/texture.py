"""Texture and surface objects for the Python API: `cudaTextureObject_t` /
`cudaSurfaceObject_t` kernel arguments over NumPy arrays.

    tex = cpuify.TextureObject(img, filter_mode="linear", address_mode="border",
                               normalized_coords=True, read_mode="normalized_float")
    kernel(grid, block, (tex.handle, out, n))

The handle is the address of the 128-byte descriptor the compiled kernels (and the reference
interpreter) sample through; its layout is documented in docs/usage.md.  The object keeps
the descriptor and the array alive: keep it as long as kernels may use the handle."""

from __future__ import annotations

import struct
from typing import Sequence

import numpy as np

__all__ = ["TextureObject", "SurfaceObject"]

_TEX_MAGIC, _SURF_MAGIC = 0x31584554, 0x31525553
_LAYOUT = struct.Struct("<14I7Q4f")
_KIND = {"i": 0, "u": 1, "f": 2}
_FILTER = {"point": 0, "linear": 1}
_ADDRESS = {"wrap": 0, "clamp": 1, "mirror": 2, "border": 3}
_READ = {"element": 0, "normalized_float": 1}


def _choice(table: dict[str, int], value: str, what: str) -> int:
    if value not in table:
        raise ValueError(f"{what} must be one of {', '.join(table)}, not {value!r}")
    return table[value]


class _Resource:
    """The descriptor bytes over a C-contiguous array of shape
    ([layers,] [depth,] [height,] width[, channels]) (the channel axis: `channels`)."""

    def __init__(self, magic: int, array: np.ndarray, *, channels: int, dims: int, layered: bool,
                 linear: bool, fields: tuple[int, int, tuple[int, int, int], int, int],
                 border: Sequence[float]) -> None:
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            raise TypeError("a texture or surface needs a C-contiguous NumPy array")
        if array.dtype.kind not in _KIND or array.dtype.itemsize not in (1, 2, 4) or \
                (array.dtype.kind == "f" and array.dtype.itemsize == 1):
            raise TypeError(f"unsupported texture element type {array.dtype} (use 8/16/32-bit "
                            "integers, float16 or float32)")
        if channels not in (1, 2, 4):
            raise ValueError("channels must be 1, 2 or 4 (CUDA has no 3-channel formats)")
        if dims not in (1, 2, 3) or (layered and dims == 3) or (linear and (dims != 1 or layered)):
            raise ValueError("dims must be 1, 2 or 3 (layered: 1 or 2; linear: 1)")
        shape = array.shape[:-1] if channels > 1 else array.shape
        if channels > 1 and array.shape[-1] != channels:
            raise ValueError(f"the last axis must hold the {channels} channels")
        want = dims + (1 if layered else 0)
        if len(shape) != want:
            raise ValueError(f"a {'layered ' if layered else ''}{dims}D resource needs "
                             f"{want} axes besides the channels, the array has {len(shape)}")
        sizes = list(reversed(shape[len(shape) - dims:])) + [1] * (3 - dims)
        layers = shape[0] if layered else 1
        esize = array.dtype.itemsize * channels
        pitch = sizes[0] * esize
        slice_ = pitch * sizes[1]
        filter_mode, normalized, address, read_mode, _ = fields
        self.array = array
        self._desc = np.zeros(_LAYOUT.size, np.uint8)
        self._desc[:] = np.frombuffer(_LAYOUT.pack(
            magic, channels, 8 * array.dtype.itemsize, _KIND[array.dtype.kind], dims,
            int(layered), int(linear), filter_mode, *address, normalized, read_mode, 0,
            sizes[0], sizes[1], sizes[2], layers, pitch, slice_, array.ctypes.data,
            *[float(b) for b in (list(border) + [0, 0, 0, 0])[:4]]), np.uint8)

    @property
    def handle(self) -> int:
        """The `cudaTextureObject_t` / `cudaSurfaceObject_t` value to pass to a kernel."""
        return int(self._desc.ctypes.data)


class TextureObject(_Resource):
    """A texture object over `array`: `dims` of 1, 2 or 3 (its last axes, width last),
    `layered` (the first axis is the layer), `linear` (a linear-memory resource for
    `tex1Dfetch`: integer fetches out of range read zeros), `channels` (1, 2 or 4: the last
    axis),
    `filter_mode` ("point", "linear"), `address_mode` (one or three of "wrap", "clamp",
    "mirror", "border"), `normalized_coords`, `read_mode` ("element", "normalized_float"),
    `border_color`."""

    def __init__(self, array: np.ndarray, *, dims: int | None = None, layered: bool = False,
                 linear: bool = False, channels: int = 1, filter_mode: str = "point",
                 address_mode: str | Sequence[str] = "clamp", normalized_coords: bool = False,
                 read_mode: str = "element", border_color: Sequence[float] = (0, 0, 0, 0)) -> None:
        modes = [address_mode] * 3 if isinstance(address_mode, str) else list(address_mode)
        if len(modes) != 3:
            raise ValueError("address_mode: one mode or three")
        if dims is None:
            dims = array.ndim - (1 if channels > 1 else 0) - (1 if layered else 0)
        f = _choice(_FILTER, filter_mode, "filter_mode")
        r = _choice(_READ, read_mode, "read_mode")
        if f == 1 and not (array.dtype.kind == "f" or (r == 1 and array.dtype.itemsize < 4)):
            raise ValueError("linear filtering needs float data or read_mode='normalized_float' "
                             "on 8/16-bit integers (as cudaCreateTextureObject)")
        address = tuple(_choice(_ADDRESS, m, "address_mode") for m in modes)
        super().__init__(_TEX_MAGIC, array, channels=channels, dims=dims, layered=layered,
                         linear=linear, fields=(f, int(bool(normalized_coords)), address, r, 0),  # type: ignore[arg-type]
                         border=border_color)


class SurfaceObject(_Resource):
    """A surface object over `array` (the shapes of TextureObject): `surf*read/write` with
    byte-addressed x."""

    def __init__(self, array: np.ndarray, *, dims: int | None = None, layered: bool = False,
                 channels: int = 1) -> None:
        if dims is None:
            dims = array.ndim - (1 if channels > 1 else 0) - (1 if layered else 0)
        super().__init__(_SURF_MAGIC, array, channels=channels, dims=dims, layered=layered,
                         linear=False, fields=(0, 0, (1, 1, 1), 0, 0), border=())
