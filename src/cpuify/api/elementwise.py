"""CuPy's other two user-kernel APIs, ElementwiseKernel and ReductionKernel, on cpuify's
compiler: the kernel text is generated here (CUDA C++), compiled by RawModule once per
combination of argument types, and launched on NumPy arrays.

    add = cpuify.ElementwiseKernel("T x, T y", "T z", "z = x + y", "add")
    z = add(a, b)                       # broadcast, z allocated as a's dtype
    l2 = cpuify.ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2")
    l2(a, axis=1)

Parameter lists are CuPy's: `type name` pairs separated by commas, where a type is a NumPy
dtype name (`float32`, `int64`, `complex128`, ...) or a placeholder (`T`, `U`, ...) that
takes the dtype of the first array (or scalar) bound to it; `raw` before the type passes
the whole array (indexed with `i` or any index in the operation) instead of one element."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from cpuify.errors import ArgumentError, ArgumentValueError, CompileException

_C_TYPES = {
    np.dtype(np.bool_): "bool", np.dtype(np.int8): "signed char", np.dtype(np.uint8): "unsigned char",
    np.dtype(np.int16): "short", np.dtype(np.uint16): "unsigned short", np.dtype(np.int32): "int",
    np.dtype(np.uint32): "unsigned int", np.dtype(np.int64): "long long",
    np.dtype(np.uint64): "unsigned long long", np.dtype(np.float32): "float",
    np.dtype(np.float64): "double", np.dtype(np.complex64): "complex<float>",
    np.dtype(np.complex128): "complex<double>",
}
_NAME = re.compile(r"^[A-Za-z_]\w*$")


@dataclass(frozen=True)
class _Param:
    name: str
    type_name: str              # a dtype name or a placeholder
    dtype: np.dtype | None      # fixed dtype, or None for a placeholder
    raw: bool
    is_const: bool


def _parse_params(text: str, what: str, inputs: bool) -> list[_Param]:
    if not isinstance(text, str):
        raise ArgumentError(f"{what} must be a string like 'float32 x, T y', got "
                            f"{type(text).__name__}")
    out: list[_Param] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        words = part.split()
        raw = False
        if words and words[0] == "raw":
            raw, words = True, words[1:]
        if len(words) != 2 or not _NAME.match(words[1]) or not _NAME.match(words[0]):
            raise ArgumentValueError(f"{what}: cannot read parameter {part!r} (expected "
                                     "'[raw] type name', e.g. 'raw float32 x' or 'T y')")
        type_name, name = words
        try:
            dtype = np.dtype(type_name) if type_name not in ("T", "U", "V", "S") else None
            if dtype is not None and dtype not in _C_TYPES:
                raise ArgumentValueError(f"{what}: type {type_name!r} of {name!r} is not "
                                         "supported (use a bool, integer, float or complex type)")
        except TypeError:
            dtype = None                # a placeholder
        out.append(_Param(name, type_name, dtype, raw, inputs))
    names = [p.name for p in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ArgumentValueError(f"{what}: parameter {sorted(dup)[0]!r} appears twice")
    return out


def _c_type(dtype: np.dtype) -> str:
    c = _C_TYPES.get(np.dtype(dtype))
    if c is None:
        raise ArgumentError(f"arrays of dtype {dtype} cannot be passed to a generated kernel "
                            "(use a bool, integer, float or complex dtype)")
    return c


def _scalar_dtype(v: Any) -> np.dtype:
    if isinstance(v, np.generic):
        return v.dtype
    if isinstance(v, bool):
        return np.dtype(np.bool_)
    if isinstance(v, int):
        return np.dtype(np.int64)
    if isinstance(v, float):
        return np.dtype(np.float64)
    if isinstance(v, complex):
        return np.dtype(np.complex128)
    raise ArgumentError(f"cannot pass {type(v).__name__} to a generated kernel")


class _KernelBase:
    def __init__(self, in_params: str, out_params: str, name: str, preamble: str,
                 options: Sequence[str]) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ArgumentValueError(f"invalid kernel name {name!r}")
        self.name = self.__name__ = name
        self.in_params = _parse_params(in_params, f"kernel '{name}' in_params", True)
        self.out_params = _parse_params(out_params, f"kernel '{name}' out_params", False)
        clash = {p.name for p in self.in_params} & {p.name for p in self.out_params}
        if clash:
            raise ArgumentValueError(f"kernel '{name}': {sorted(clash)[0]!r} is both an input "
                                     "and an output")
        if "i" in {p.name for p in self.in_params + self.out_params}:
            raise ArgumentValueError(f"kernel '{name}': 'i' (the element index) cannot be a "
                                     "parameter name")
        self.preamble = preamble
        self.options = tuple(options)
        self._modules: dict[str, Any] = {}

    def _function(self, source: str):  # type: ignore[no-untyped-def]
        """The generated kernel compiled (once per source: per argument types)."""
        from cpuify.api.module import RawModule
        mod = self._modules.get(source)
        if mod is None:
            mod = RawModule(code=source, options=self.options, filename=f"{self.name}.cu")
            try:
                mod.compile()
            except CompileException as exc:
                raise CompileException(f"{type(self).__name__} '{self.name}': {exc}", exc.source,
                                       exc.name, exc.options, exc.backend, log=exc.log) from None
            self._modules[source] = mod
        return mod.get_function(self.name)

    def _split_args(self, args: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
        nin, nout = len(self.in_params), len(self.out_params)
        if len(args) not in (nin, nin + nout):
            raise ArgumentError(f"kernel '{self.name}' takes {nin} input(s)"
                                f"{f' and optionally {nout} output(s)' if nout else ''}, "
                                f"{len(args)} given")
        return list(args[:nin]), list(args[nin:])

    def _bind_types(self, params: Sequence[_Param], values: Sequence[Any],
                    types: dict[str, np.dtype]) -> None:
        """Placeholders from the arrays first, then from scalars (as CuPy does)."""
        for pass_arrays in (True, False):
            for p, v in zip(params, values):
                if p.dtype is not None or v is None or p.type_name in types:
                    continue
                if isinstance(v, np.ndarray) == pass_arrays:
                    types[p.type_name] = v.dtype if pass_arrays else _scalar_dtype(v)

    def _dtype_of(self, p: _Param, types: dict[str, np.dtype]) -> np.dtype:
        if p.dtype is not None:
            return p.dtype
        t = types.get(p.type_name)
        if t is None:
            raise ArgumentError(f"kernel '{self.name}': the type {p.type_name} of {p.name!r} "
                                "is not determined by any argument; pass the output array")
        return t

    def _typedefs(self, types: dict[str, np.dtype]) -> str:
        return "".join(f"typedef {_c_type(t)} {n};\n" for n, t in sorted(types.items()))


def _as_array(kernel: str, p: _Param, v: Any) -> np.ndarray:
    if isinstance(v, np.ndarray):
        if v.dtype.hasobject:
            raise ArgumentError(f"kernel '{kernel}': argument {p.name!r} is an array of Python "
                                "objects; convert it to a numeric dtype")
        return v
    raise ArgumentError(f"kernel '{kernel}': argument {p.name!r} must be a NumPy array, got "
                        f"{type(v).__name__}")


class ElementwiseKernel(_KernelBase):
    """CuPy's `ElementwiseKernel(in_params, out_params, operation, name='kernel',
    reduce_dims=True, preamble='', no_return=False, return_tuple=False, loop_prep='',
    after_loop='', options=())`; call with the inputs (and optionally the outputs),
    `size=` when every array is `raw`.  Non-raw arrays are broadcast together; outputs not
    given are allocated with the broadcast shape."""

    def __init__(self, in_params: str, out_params: str, operation: str, name: str = "kernel",
                 reduce_dims: bool = True, preamble: str = "", no_return: bool = False,
                 return_tuple: bool = False, loop_prep: str = "", after_loop: str = "",
                 options: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(in_params, out_params, name, preamble, options)
        if kwargs:
            raise ArgumentError(f"ElementwiseKernel: unknown keyword(s) {sorted(kwargs)}")
        if not isinstance(operation, str):
            raise ArgumentError("ElementwiseKernel: operation must be a string of CUDA C++")
        self.operation = operation
        self.no_return, self.return_tuple = no_return, return_tuple
        self.loop_prep, self.after_loop = loop_prep, after_loop

    def __call__(self, *args: Any, size: int | None = None, block_size: int = 128,
                 stream: Any = None) -> Any:
        name = self.name
        if not isinstance(block_size, int) or not 1 <= block_size <= 1024:
            raise ArgumentValueError(f"kernel '{name}': block_size must be in 1..1024")
        ins, outs = self._split_args(args)
        types: dict[str, np.dtype] = {}
        self._bind_types(self.in_params + self.out_params, ins + outs, types)
        for p, v in zip(self.in_params + self.out_params, ins + outs):
            if isinstance(v, np.ndarray) and p.dtype is None and types[p.type_name] != v.dtype:
                raise ArgumentError(f"kernel '{name}': {p.name!r} is {v.dtype}, but {p.type_name} "
                                    f"is {types[p.type_name]} from an earlier argument")
        # the shape every non-raw array is broadcast to
        shaped = [v for p, v in zip(self.in_params + self.out_params, ins + outs)
                  if not p.raw and isinstance(v, np.ndarray)]
        try:
            shape = np.broadcast_shapes(*(v.shape for v in shaped)) if shaped else None
        except ValueError as exc:
            raise ArgumentValueError(f"kernel '{name}': the arguments do not broadcast "
                                     f"together: {exc}") from None
        if shape is None:
            if size is None:
                raise ArgumentValueError(f"kernel '{name}': every argument is raw or a scalar; "
                                         "give size=")
            shape = (int(size),)
        elif size is not None and int(size) != int(np.prod(shape)):
            raise ArgumentValueError(f"kernel '{name}': size={size} but the arrays have "
                                     f"{int(np.prod(shape))} elements")
        n = int(np.prod(shape))
        if not outs:
            outs = [np.empty(shape, self._dtype_of(p, types)) for p in self.out_params]
        launch_args: list[Any] = []
        params_c: list[str] = []
        body: list[str] = []
        copies_back: list[tuple[np.ndarray, np.ndarray]] = []
        for p, v in zip(self.in_params + self.out_params, ins + outs):
            dtype = self._dtype_of(p, types)
            ctype = _c_type(dtype)
            const = "const " if p.is_const else ""
            if not isinstance(v, np.ndarray):
                if not p.is_const:
                    raise ArgumentError(f"kernel '{name}': output {p.name!r} must be an array")
                if p.raw:
                    raise ArgumentError(f"kernel '{name}': raw argument {p.name!r} must be an array")
                params_c.append(f"{ctype} {p.name}")
                launch_args.append(np.array(v, dtype=dtype)[()])
                continue
            v = _as_array(name, p, v)
            if v.dtype != dtype:
                if not p.is_const:
                    raise ArgumentError(f"kernel '{name}': output {p.name!r} is {v.dtype}, "
                                        f"expected {dtype}")
                v = v.astype(dtype)
            if p.raw:
                arr = v if v.flags.c_contiguous else np.ascontiguousarray(v)
                if not p.is_const and arr is not v:
                    copies_back.append((v, arr))
                params_c.append(f"{const}{ctype}* __restrict__ _raw_{p.name}, long long _size_{p.name}")
                body.append(f"    cpuify_raw<{const}{ctype}> {p.name}(_raw_{p.name}, _size_{p.name});\n")
                launch_args += [arr, np.int64(arr.size)]
                continue
            if p.is_const:
                arr = np.ascontiguousarray(np.broadcast_to(v, shape))
            else:
                if v.shape != tuple(shape):
                    raise ArgumentValueError(f"kernel '{name}': output {p.name!r} has shape "
                                             f"{v.shape}, the broadcast shape is {tuple(shape)}")
                if not v.flags.writeable:
                    raise ArgumentError(f"kernel '{name}': output {p.name!r} is read-only")
                arr = v if v.flags.c_contiguous else np.ascontiguousarray(v)
                if arr is not v:
                    copies_back.append((v, arr))
            params_c.append(f"{const}{ctype}* __restrict__ _e_{p.name}")
            launch_args.append(arr)
            ref = "" if p.is_const else "&"
            body.append(f"      {const}{ctype} {ref}{p.name} = _e_{p.name}[i];\n")
        params_c.append("long long _n")
        launch_args.append(np.int64(n))
        elementwise = "".join(b for b in body if b.startswith("      "))
        raws = "".join(b for b in body if not b.startswith("      "))
        source = (
            "#include <cupy/complex.cuh>\n" + _RAW_HELPER + self._typedefs(types) + self.preamble +
            f'\nextern "C" __global__ void {name}({", ".join(params_c)}) {{\n'
            "    cpuify_index _ind(_n);\n" + raws + f"    {self.loop_prep}\n"
            "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < _n;\n"
            "         i += (long long)blockDim.x * gridDim.x) {\n" + elementwise +
            f"      {self.operation};\n    }}\n    {self.after_loop}\n}}\n")
        if n > 0:
            fn = self._function(source)
            grid = max(1, min((n + block_size - 1) // block_size, 1 << 16))
            fn((grid,), (block_size,), tuple(launch_args))
        for original, contiguous in copies_back:
            original[...] = contiguous
        if self.no_return:
            return None
        if len(outs) == 1 and not self.return_tuple:
            return outs[0]
        return tuple(outs)


_RAW_HELPER = r"""
template <class T> struct cpuify_raw {
    T* p; long long n;
    __device__ cpuify_raw(T* p_, long long n_) : p(p_), n(n_) {}
    __device__ T& operator[](long long k) const { return p[k]; }
    __device__ long long size() const { return n; }
};
struct cpuify_index {
    long long n;
    __device__ cpuify_index(long long n_) : n(n_) {}
    __device__ long long size() const { return n; }
};
"""


class ReductionKernel(_KernelBase):
    """CuPy's `ReductionKernel(in_params, out_params, map_expr, reduce_expr, post_map_expr,
    identity, name='reduce_kernel', reduce_type=None, reduce_dims=True, preamble='',
    options=())`; call with the inputs (optionally the output), `axis=`, `keepdims=`,
    `out=`.  Each output element is reduced by one block: `map_expr` per input element,
    `reduce_expr` combining `a` and `b`, `post_map_expr` writing the output from `a`."""

    def __init__(self, in_params: str, out_params: str, map_expr: str, reduce_expr: str,
                 post_map_expr: str, identity: str | None, name: str = "reduce_kernel",
                 reduce_type: str | None = None, reduce_dims: bool = True, preamble: str = "",
                 options: Sequence[str] = ()) -> None:
        super().__init__(in_params, out_params, name, preamble, options)
        if len(self.out_params) != 1:
            raise ArgumentValueError(f"ReductionKernel '{name}': exactly one output parameter")
        if any(p.raw for p in self.in_params + self.out_params):
            raise ArgumentValueError(f"ReductionKernel '{name}': raw parameters are not supported")
        self.map_expr, self.reduce_expr, self.post_map_expr = map_expr, reduce_expr, post_map_expr
        self.identity = identity
        self.reduce_type = reduce_type

    def __call__(self, *args: Any, axis: Any = None, keepdims: bool = False, out: Any = None,
                 stream: Any = None) -> np.ndarray:
        name = self.name
        ins, outs = self._split_args(args)
        if out is not None:
            if outs:
                raise ArgumentError(f"kernel '{name}': the output is given twice (argument and out=)")
            outs = [out]
        types: dict[str, np.dtype] = {}
        self._bind_types(self.in_params + self.out_params, ins + outs, types)
        arrays = [v for v in ins if isinstance(v, np.ndarray)]
        if not arrays:
            raise ArgumentError(f"kernel '{name}': at least one input must be an array")
        try:
            shape = np.broadcast_shapes(*(a.shape for a in arrays))
        except ValueError as exc:
            raise ArgumentValueError(f"kernel '{name}': the inputs do not broadcast together: "
                                     f"{exc}") from None
        ndim = len(shape)
        if axis is None:
            axes = tuple(range(ndim))
        else:
            try:
                axes = tuple(sorted({int(a) % ndim if ndim else 0 for a in
                                     (axis if isinstance(axis, (tuple, list)) else (axis,))}))
            except (TypeError, ValueError):
                raise ArgumentError(f"kernel '{name}': axis must be an int or a tuple of ints") from None
            for a in (axis if isinstance(axis, (tuple, list)) else (axis,)):
                if not -ndim <= int(a) < max(ndim, 1):
                    raise ArgumentValueError(f"kernel '{name}': axis {a} is out of range for "
                                             f"{ndim} dimensions")
        kept = [d for d in range(ndim) if d not in axes]
        out_shape = tuple(1 if d in axes else shape[d] for d in range(ndim)) if keepdims \
            else tuple(shape[d] for d in kept)
        n_out = int(np.prod([shape[d] for d in kept])) if kept else 1
        n_red = int(np.prod([shape[d] for d in axes])) if axes else 1
        op = self.out_params[0]
        out_dtype = self._dtype_of(op, types)
        if outs:
            y = outs[0]
            if not isinstance(y, np.ndarray) or y.shape != out_shape or y.dtype != out_dtype:
                raise ArgumentValueError(f"kernel '{name}': the output must be a {out_dtype} "
                                         f"array of shape {out_shape}")
        else:
            y = np.empty(out_shape, out_dtype)
        reduce_name = self.reduce_type or op.type_name
        try:
            reduce_dtype = np.dtype(reduce_name) if reduce_name not in types else types[reduce_name]
        except TypeError:
            reduce_dtype = types.get(reduce_name)
            if reduce_dtype is None:
                raise ArgumentError(f"kernel '{name}': reduce_type {reduce_name} is not "
                                    "determined by any argument") from None
        order = kept + list(axes)
        launch_args: list[Any] = []
        params_c: list[str] = []
        loads: list[str] = []
        for p, v in zip(self.in_params, ins):
            dtype = self._dtype_of(p, types)
            ctype = _c_type(dtype)
            if isinstance(v, np.ndarray):
                v = _as_array(name, p, v).astype(dtype, copy=False)
                arr = np.ascontiguousarray(np.broadcast_to(v, shape).transpose(order))
                params_c.append(f"const {ctype}* __restrict__ _e_{p.name}")
                loads.append(f"        const {ctype} {p.name} = _e_{p.name}[_base + _j];\n")
                launch_args.append(arr)
            else:
                params_c.append(f"{ctype} {p.name}")
                launch_args.append(np.array(v, dtype=dtype)[()])
        y_flat = y if y.flags.c_contiguous else np.ascontiguousarray(y)
        octype = _c_type(out_dtype)
        params_c += [f"{octype}* __restrict__ _out", "long long _n_out", "long long _n_red"]
        launch_args += [y_flat, np.int64(n_out), np.int64(n_red)]
        rtype = "_type_reduce"
        block = 256
        identity = self.identity if self.identity not in (None, "") else None
        init = f"{rtype}(({rtype}){identity})" if identity is not None else f"{rtype}()"
        source = (
            "#include <cupy/complex.cuh>\n" + self._typedefs(types) +
            f"typedef {_c_type(reduce_dtype)} {rtype};\n" + self.preamble +
            f"\n#define _CPUIFY_REDUCE(a, b) ({self.reduce_expr})\n"
            f'extern "C" __global__ void {name}({", ".join(params_c)}) {{\n'
            f"    __shared__ __align__(16) unsigned char _sbuf[{block} * sizeof({rtype})];\n"
            f"    {rtype}* _s = reinterpret_cast<{rtype}*>(_sbuf);\n"
            "    for (long long _o = blockIdx.x; _o < _n_out; _o += gridDim.x) {\n"
            "      long long _base = _o * _n_red;\n"
            f"      {rtype} _acc = {init};\n"
            f"      bool _have = {'true' if identity is not None else 'false'};\n"
            "      for (long long _j = threadIdx.x; _j < _n_red; _j += blockDim.x) {\n"
            + "".join(loads) +
            f"        {rtype} _v = ({rtype})({self.map_expr});\n"
            f"        if (_have) {{ {rtype} a = _acc, b = _v; _acc = _CPUIFY_REDUCE(a, b); }}\n"
            "        else { _acc = _v; _have = true; }\n"
            "      }\n"
            "      _s[threadIdx.x] = _acc;\n"
            "      __syncthreads();\n"
            f"      for (int _k = {block // 2}; _k > 0; _k >>= 1) {{\n"
            "        if (threadIdx.x < _k && threadIdx.x + _k < _n_red) {\n"
            f"          {rtype} a = _s[threadIdx.x], b = _s[threadIdx.x + _k];\n"
            "          _s[threadIdx.x] = _CPUIFY_REDUCE(a, b);\n"
            "        }\n"
            "        __syncthreads();\n"
            "      }\n"
            "      if (threadIdx.x == 0) {\n"
            f"        {rtype} a = _s[0];\n"
            f"        {octype} &{op.name} = _out[_o];\n"
            f"        {self.post_map_expr};\n"
            "      }\n"
            "      __syncthreads();\n"
            "    }\n}\n")
        if identity is None and n_red == 0:
            raise ArgumentValueError(f"kernel '{name}': a reduction over zero elements needs an "
                                     "identity")
        if n_out > 0:
            fn = self._function(source)
            grid = max(1, min(n_out, 1 << 16))
            fn((grid,), (block,), tuple(launch_args))
        if y_flat is not y:
            y[...] = y_flat.reshape(y.shape)
        return y
