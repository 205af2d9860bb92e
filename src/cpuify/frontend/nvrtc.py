"""Compile CUDA C++ to PTX with NVRTC, loaded through ctypes.

NVRTC and the CUDA headers come from NVIDIA's PyPI wheels (``nvidia-cuda-nvrtc``,
``nvidia-cuda-runtime``, ``nvidia-cuda-crt``, ``nvidia-cuda-cccl``).  Two wheel layouts
are understood:

* CUDA 13: ``nvidia/cu13/lib/libnvrtc.so.13`` with headers in ``nvidia/cu13/include``
  and CCCL in ``nvidia/cu13/include/cccl``;
* CUDA 12: ``nvidia/cuda_nvrtc/lib/libnvrtc.so.12`` with headers spread over
  ``nvidia/cuda_runtime/include``, ``nvidia/cuda_cccl/include`` and friends.

Only when no wheel is installed, ``CPUIFY_CUDA_HOME`` or ``CUDA_HOME`` may point at a
CUDA toolkit directory as a fallback.  No GPU and no ``nvcc`` are needed.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from cpuify.errors import CompileError
from cpuify.frontend import includes

__all__ = [
    "DEFAULT_ARCH",
    "PTXResult",
    "compile_to_ptx",
    "nvrtc_version",
    "include_dirs",
]

DEFAULT_ARCH = "compute_75"
DEFAULT_STD = "c++17"

_INSTALL_HINT = ("pip install nvidia-cuda-nvrtc nvidia-cuda-runtime "
                 "nvidia-cuda-crt nvidia-cuda-cccl")

_NVRTC_SUCCESS = 0
_NVRTC_ERROR_COMPILATION = 6
_NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID = 10


@dataclass(frozen=True)
class PTXResult:
    """What :func:`compile_to_ptx` returns."""

    ptx: str
    lowered_names: dict[str, str] = field(default_factory=dict)  # name expression -> mangled
    log: str = ""  # compiler warnings (may be empty)


# --------------------------------------------------------------------------------------
# Locating and loading libnvrtc
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Toolkit:
    libnvrtc: str            # path of libnvrtc.so.N
    include_dirs: tuple[str, ...]
    origin: str              # human-readable description of where it was found


def _lib_candidates(lib_dir: str) -> list[str]:
    """libnvrtc files in `lib_dir`, best (highest major version, real soname) first."""
    if sys.platform == "win32":  # pragma: no cover - not a supported platform, best effort
        found = glob.glob(os.path.join(lib_dir, "nvrtc64_*.dll"))
        return sorted((f for f in found if "builtins" not in f), reverse=True)
    names = glob.glob(os.path.join(lib_dir, "libnvrtc.so*"))
    names += glob.glob(os.path.join(lib_dir, "libnvrtc*.dylib"))

    def key(path: str) -> tuple:
        nums = re.findall(r"\d+", os.path.basename(path))
        return tuple(int(n) for n in nums)

    return sorted(names, key=key, reverse=True)


def _existing(dirs: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for d in dirs:
        if d and os.path.isdir(d) and d not in out:
            out.append(d)
    return tuple(out)


def _nvidia_roots() -> list[str]:
    """Directories of the ``nvidia`` namespace package (pip wheels)."""
    roots: list[str] = []
    try:
        import nvidia  # type: ignore[import-not-found]  # namespace package from the wheels
    except ImportError:
        return roots
    paths = list(getattr(nvidia, "__path__", []) or [])
    f = getattr(nvidia, "__file__", None)
    if f:
        paths.append(os.path.dirname(f))
    for p in paths:
        p = os.path.abspath(p)
        if os.path.isdir(p) and p not in roots:
            roots.append(p)
    return roots


def _find_in_wheels() -> _Toolkit | None:
    roots = _nvidia_roots()
    # CUDA 13+ layout: nvidia/cuXY/{lib,include,include/cccl}; newest first.
    for root in roots:
        cu_dirs = [d for d in glob.glob(os.path.join(root, "cu[0-9]*")) if os.path.isdir(d)]
        cu_dirs.sort(key=lambda d: int(re.sub(r"\D", "", os.path.basename(d)) or 0),
                     reverse=True)
        for cu in cu_dirs:
            libs = _lib_candidates(os.path.join(cu, "lib")) or _lib_candidates(
                os.path.join(cu, "bin"))
            if not libs:
                continue
            inc = os.path.join(cu, "include")
            return _Toolkit(libs[0], _existing([inc, os.path.join(inc, "cccl")]),
                            f"wheel {cu}")
    # CUDA 12 layout: one directory per component.
    for root in roots:
        nvrtc_dir = os.path.join(root, "cuda_nvrtc")
        libs = _lib_candidates(os.path.join(nvrtc_dir, "lib")) or _lib_candidates(
            os.path.join(nvrtc_dir, "bin"))
        if not libs:
            continue
        incs: list[str] = []
        for r in roots:
            for comp in ("cuda_runtime", "cuda_nvrtc", "cuda_crt", "cuda_cccl"):
                inc = os.path.join(r, comp, "include")
                incs += [inc, os.path.join(inc, "cccl")]
        return _Toolkit(libs[0], _existing(incs), f"wheel {nvrtc_dir}")
    return None


def _find_in_cuda_home() -> _Toolkit | None:
    for var in ("CPUIFY_CUDA_HOME", "CUDA_HOME"):
        home = os.environ.get(var)
        if not home or not os.path.isdir(home):
            continue
        lib_dirs = [os.path.join(home, d) for d in
                    ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib"),
                     os.path.join("targets", "sbsa-linux", "lib"), "bin")]
        for lib_dir in lib_dirs:
            libs = _lib_candidates(lib_dir)
            if not libs:
                continue
            incs: list[str] = []
            for inc in (os.path.join(home, "include"),
                        os.path.join(home, "targets", "x86_64-linux", "include"),
                        os.path.join(home, "targets", "sbsa-linux", "include")):
                incs += [inc, os.path.join(inc, "cccl")]
            return _Toolkit(libs[0], _existing(incs), f"${var}={home}")
    return None


_load_lock = threading.Lock()
_compile_lock = threading.RLock()
_toolkit: _Toolkit | None = None
_lib: ctypes.CDLL | None = None
_keepalive: list[ctypes.CDLL] = []


def _locate() -> _Toolkit:
    global _toolkit
    if _toolkit is None:
        tk = _find_in_wheels() or _find_in_cuda_home()
        if tk is None:
            raise CompileError(
                "cannot find NVRTC (libnvrtc), which cpuify needs to compile CUDA C++ to "
                f"PTX.  Install NVIDIA's wheels: `{_INSTALL_HINT}` (or point "
                "CPUIFY_CUDA_HOME at a CUDA toolkit directory).")
        _toolkit = tk
    return _toolkit


def _bind(lib: ctypes.CDLL) -> None:
    c_int, c_char_p, c_size_t, c_void_p = ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p
    P = ctypes.POINTER
    sigs = {
        "nvrtcGetErrorString": (c_char_p, [c_int]),
        "nvrtcVersion": (c_int, [P(c_int), P(c_int)]),
        "nvrtcCreateProgram": (c_int, [P(c_void_p), c_char_p, c_char_p, c_int,
                                       P(c_char_p), P(c_char_p)]),
        "nvrtcDestroyProgram": (c_int, [P(c_void_p)]),
        "nvrtcCompileProgram": (c_int, [c_void_p, c_int, P(c_char_p)]),
        "nvrtcGetPTXSize": (c_int, [c_void_p, P(c_size_t)]),
        "nvrtcGetPTX": (c_int, [c_void_p, c_char_p]),
        "nvrtcGetProgramLogSize": (c_int, [c_void_p, P(c_size_t)]),
        "nvrtcGetProgramLog": (c_int, [c_void_p, c_char_p]),
        "nvrtcAddNameExpression": (c_int, [c_void_p, c_char_p]),
        "nvrtcGetLoweredName": (c_int, [c_void_p, c_char_p, P(c_char_p)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def _load() -> ctypes.CDLL:
    """Load libnvrtc once per process (thread-safe)."""
    global _lib
    if _lib is not None:
        return _lib
    with _load_lock:
        if _lib is not None:
            return _lib
        tk = _locate()
        lib_dir = os.path.dirname(tk.libnvrtc)
        mode = getattr(os, "RTLD_GLOBAL", 0) | getattr(os, "RTLD_NOW", 0)
        # libnvrtc dlopen()s libnvrtc-builtins at compile time; it has RPATH $ORIGIN,
        # but preloading the one beside it makes the lookup independent of that.
        for b in sorted(glob.glob(os.path.join(lib_dir, "libnvrtc-builtins.so*")),
                        reverse=True):
            try:
                _keepalive.append(ctypes.CDLL(b, mode=mode))
                break
            except OSError:
                continue
        try:
            lib = ctypes.CDLL(tk.libnvrtc, mode=mode)
            _bind(lib)
        except (OSError, AttributeError) as exc:
            raise CompileError(
                f"cannot load NVRTC from {tk.libnvrtc} ({tk.origin}): {exc}.  Reinstall "
                f"NVIDIA's wheels: `{_INSTALL_HINT}`") from exc
        _lib = lib
        return lib


def _err_str(lib: ctypes.CDLL, code: int) -> str:
    s = lib.nvrtcGetErrorString(code)
    return s.decode("utf-8", "replace") if s else f"NVRTC error {code}"


def _check(lib: ctypes.CDLL, code: int, what: str) -> None:
    if code != _NVRTC_SUCCESS:
        raise CompileError(f"NVRTC {what} failed: {_err_str(lib, code)}")


# --------------------------------------------------------------------------------------
# Public helpers
# --------------------------------------------------------------------------------------

def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC that cpuify uses."""
    lib = _load()
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def include_dirs() -> list[str]:
    """Header directories passed to NVRTC: the wheel's include dir and include/cccl."""
    return list(_locate().include_dirs)


# --------------------------------------------------------------------------------------
# Option handling
# --------------------------------------------------------------------------------------

# Flags whose value may come as a separate token: joined without '=' (-Idir, -DX=1) ...
_JOIN_DIRECT = {"-I", "-D", "-U"}
# ... or with '=' (--include-path=dir, -arch=compute_80).
_JOIN_EQ = {"--include-path", "--define-macro", "--undefine-macro", "-arch",
            "--gpu-architecture", "-std", "--std", "-include", "--pre-include",
            "-maxrregcount", "--maxrregcount"}

_ARCH_RE = re.compile(r"^(?:-arch|--gpu-architecture)(?:=|\s+)(.*)$")
_STD_RE = re.compile(r"^--?std(?:=|\s+)")


def _flatten(options: Sequence[object] | str | None) -> list[str]:
    if options is None:
        return []
    if isinstance(options, (str, bytes)):
        options = [options]
    tokens: list[str] = []
    for opt in options:
        if isinstance(opt, bytes):
            opt = opt.decode("utf-8")
        if isinstance(opt, str):
            tokens.append(opt)
        elif isinstance(opt, (tuple, list)):
            parts = _flatten(opt)
            if len(parts) == 2 and (parts[0] in _JOIN_DIRECT or parts[0] in _JOIN_EQ):
                tokens.append(_join(parts[0], parts[1]))
            else:
                tokens.extend(parts)
        else:
            raise CompileError(f"NVRTC option {opt!r} is not a string")
    # Split form in a flat sequence: ('-I', 'dir', '-D', 'X=1').
    out: list[str] = []
    i = 0
    while i < len(tokens):
        t = tokens[i].strip()
        if (t in _JOIN_DIRECT or t in _JOIN_EQ) and i + 1 < len(tokens):
            out.append(_join(t, tokens[i + 1].strip()))
            i += 2
            continue
        if t:
            out.append(t)
        i += 1
    return out


def _join(flag: str, value: str) -> str:
    return f"{flag}{value}" if flag in _JOIN_DIRECT else f"{flag}={value}"


def _normalize_arch(value: str) -> str:
    """'sm_80' / '80' / 'compute_80' -> 'compute_80' (PTX output needs a virtual arch)."""
    v = str(value).strip()
    if re.fullmatch(r"\d+[a-z]?", v):
        return f"compute_{v}"
    if v.startswith("sm_"):
        return "compute_" + v[3:]
    return v


def _build_options(options: Sequence[object], arch: str | None) -> list[str]:
    user = _flatten(options)
    out: list[str] = []
    user_arch: str | None = None
    user_std = False
    for opt in user:
        m = _ARCH_RE.match(opt)
        if m:
            user_arch = _normalize_arch(m.group(1))
            out.append(f"--gpu-architecture={user_arch}")
            continue
        if _STD_RE.match(opt):
            user_std = True
        out.append(opt)
    if user_arch is None:
        out.insert(0, f"--gpu-architecture={_normalize_arch(arch or DEFAULT_ARCH)}")
    elif arch is not None and _normalize_arch(arch) != user_arch:
        raise CompileError(
            f"conflicting GPU architectures: arch={arch!r} but the options ask for "
            f"{user_arch!r}; give only one")
    if not user_std:
        out.insert(1, f"-std={DEFAULT_STD}")
    # Ours come after the user's -I so user headers win.
    out.extend(f"-I{d}" for d in _locate().include_dirs)
    return out


# --------------------------------------------------------------------------------------
# Compilation
# --------------------------------------------------------------------------------------

_CACHE_MAX = 64
_cache: OrderedDict[tuple, PTXResult] = OrderedDict()


def _read_log(lib: ctypes.CDLL, prog: ctypes.c_void_p) -> str:
    size = ctypes.c_size_t()
    if lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) != _NVRTC_SUCCESS:
        return ""
    if size.value <= 1:
        return ""
    buf = ctypes.create_string_buffer(size.value)
    if lib.nvrtcGetProgramLog(prog, buf) != _NVRTC_SUCCESS:
        return ""
    return buf.value.decode("utf-8", "replace").rstrip("\x00")


_NAME_MAP_RE = re.compile(r'Input name expression was: "(.*)"')


def _bad_name_expressions(log: str, names: tuple[str, ...]) -> list[str]:
    """Name expressions that NVRTC's log says it could not parse or resolve."""
    if not names or "__nv_name_map" not in log:
        return []
    squash = {re.sub(r"\s+", "", n): n for n in names}
    bad: list[str] = []
    for m in _NAME_MAP_RE.finditer(log):
        n = squash.get(re.sub(r"\s+", "", m.group(1)), m.group(1).strip())
        if n not in bad:
            bad.append(n)
    if not bad:  # log format changed: point at all of them rather than none
        bad = list(names)
    return bad


def compile_to_ptx(source: str, *, filename: str = "kernel.cu", options: Sequence[str] = (),
                   name_expressions: Sequence[str] = (), arch: str | None = None,
                   headers: Mapping[str, str] | None = None) -> PTXResult:
    """Compile CUDA C++ `source` to PTX with NVRTC.

    `options` are NVRTC options (CuPy style: a sequence of strings; split pairs such as
    ``("-I", "dir")`` are joined).  The defaults add ``--gpu-architecture=compute_75``
    (unless `arch` or an ``-arch``/``--gpu-architecture`` option says otherwise),
    ``-std=c++17`` (unless a ``-std`` option is given) and the wheel's include dirs.
    `name_expressions` (e.g. ``"k<4>"``) are resolved to mangled names in
    ``PTXResult.lowered_names``.  `headers` maps include names (``"cupy/complex.cuh"``)
    to header text that NVRTC finds before its include paths.  Raises
    :class:`CompileError` carrying the NVRTC log.
    """
    if isinstance(source, bytes):
        source = source.decode("utf-8")
    if not isinstance(source, str):
        raise CompileError(f"CUDA source must be a string, not {type(source).__name__}")
    if isinstance(name_expressions, str):
        name_expressions = [name_expressions]
    names = tuple(str(n) for n in name_expressions)
    opts = _build_options(options, arch)
    header_items = tuple(sorted((headers or {}).items()))

    # (the user headers' contents too: a header edited in a running session is read again)
    included = (includes.dependency_digest(source, filename, _flatten(options))
                if "include" in source else "")
    key = (source, filename, tuple(opts), names, header_items,
           object() if included is None else included)
    with _compile_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return PTXResult(hit.ptx, dict(hit.lowered_names), hit.log)

        lib = _load()
        result = _compile(lib, source, filename, opts, names, header_items)
        _cache[key] = result
        if len(_cache) > _CACHE_MAX:
            _cache.popitem(last=False)
        return PTXResult(result.ptx, dict(result.lowered_names), result.log)


def _compile(lib: ctypes.CDLL, source: str, filename: str, opts: list[str],
             names: tuple[str, ...], headers: tuple[tuple[str, str], ...] = ()) -> PTXResult:
    prog = ctypes.c_void_p()
    n = len(headers)
    texts = (ctypes.c_char_p * max(n, 1))(*[t.encode("utf-8") for _, t in headers])
    includes = (ctypes.c_char_p * max(n, 1))(*[h.encode("utf-8") for h, _ in headers])
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode("utf-8"),
                                       filename.encode("utf-8"), n, texts if n else None,
                                       includes if n else None),
           "nvrtcCreateProgram")
    try:
        for n in names:
            code = lib.nvrtcAddNameExpression(prog, n.encode("utf-8"))
            if code != _NVRTC_SUCCESS:
                raise CompileError(f"NVRTC rejected name expression {n!r} for {filename}: "
                                   f"{_err_str(lib, code)}")
        c_opts = (ctypes.c_char_p * max(len(opts), 1))(*[o.encode("utf-8") for o in opts])
        code = lib.nvrtcCompileProgram(prog, len(opts), c_opts)
        log = _read_log(lib, prog)
        if code != _NVRTC_SUCCESS:
            body = log.rstrip() if log.strip() else _err_str(lib, code)
            msg = f"NVRTC failed to compile {filename}:\n{body}"
            bad = _bad_name_expressions(log, names)
            if bad:
                msg = (f"NVRTC failed to compile {filename}: unknown or invalid name "
                       f"expression{'s' if len(bad) > 1 else ''} "
                       f"{', '.join(repr(b) for b in bad)}\n{body}")
            if code != _NVRTC_ERROR_COMPILATION:
                msg += f"\n({_err_str(lib, code)}; options: {' '.join(opts)})"
            raise CompileError(msg, log=log)

        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
        ptx = buf.value.decode("utf-8", "replace")

        lowered: dict[str, str] = {}
        for n in names:
            out = ctypes.c_char_p()
            code = lib.nvrtcGetLoweredName(prog, n.encode("utf-8"), ctypes.byref(out))
            if code != _NVRTC_SUCCESS or not out.value:
                raise CompileError(
                    f"unknown name expression {n!r} in {filename}: NVRTC could not find "
                    f"it after compiling ({_err_str(lib, code)}).  Name a __global__ "
                    "function or template instantiation defined in the source, e.g. "
                    "'k<4>'.", log=log)
            lowered[n] = out.value.decode("utf-8")
        return PTXResult(ptx=ptx, lowered_names=lowered, log=log if log.strip() else "")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
