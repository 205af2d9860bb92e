"""The include directories `cpuify nvcc` puts ahead of the CUDA toolkit's.

Two of them:

* `runtime/include/` (in this package, always on the include path): headers of ours that
  the PyPI wheels do not ship or name differently: `cpuify_legacy.h` (the CUDA runtime
  functions CUDA 12/13 removed), `cuda_profiler_api.h`, and `nvToolsExt*.h` (NVTX v2 names
  of the header-only NVTX v3 from the `nvidia-nvtx` wheel).
* the *legacy header directory*, generated on the user's machine from the installed
  toolkit (NVIDIA's headers are never copied into this repository): a copy of the wheel's
  `driver_types.h` whose `struct cudaDeviceProp` again has the fields CUDA 12/13 removed
  (`clockRate`, `deviceOverlap`, `memoryClockRate`, `kernelExecTimeoutEnabled`,
  `computeMode`, ...).  They take the place of part of the struct's `reserved` array, so
  the struct keeps its size and the offsets of every other field: code compiled against
  the unmodified header (a .cpp built by plain g++) still calls the same
  cudaGetDeviceProperties.  Next to it, one small wrapper per toolkit header that pulls in
  `driver_types.h` (cuda_runtime.h, cuda_runtime_api.h, ...): the wrapper includes the
  patched copy first (its include guard then keeps the wheel's out) and the real header
  with `#include_next`.  cpuify's runtime library is compiled against the same directory.

The legacy layer (the legacy directory and the pre-included `cpuify_legacy.h`) is on by
default; `--cpuify-no-legacy` or CPUIFY_LEGACY=0 turns it off.

The headers of other NVIDIA wheels (nvidia-nvtx, nvidia-curand, nvidia-nvml-dev) come after
them when installed.  Without the nvidia-curand wheel, `runtime/nocurand/` (last) has a
curand.h and a curand_kernel.h that stop the build with an error naming the extra to install.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from cpuify import cache
from cpuify.errors import CpuifyError
from cpuify.nvcc.toolkit import Toolkit

RUNTIME_INCLUDE = Path(__file__).resolve().parent.parent / "runtime" / "include"
# curand.h and curand_kernel.h that say to install the nvidia-curand wheel
NO_CURAND_INCLUDE = RUNTIME_INCLUDE.parent / "nocurand"
LEGACY_HEADER = "cpuify_legacy.h"
NO_LEGACY_FLAG = "--cpuify-no-legacy"

# cudaDeviceProp fields of CUDA <= 12 that CUDA 13 removed (all `int`), with what our
# runtime fills them with (runtime/cudart.c)
LEGACY_PROP_FIELDS = ("clockRate", "deviceOverlap", "kernelExecTimeoutEnabled", "computeMode",
                      "maxTexture1DLinear", "memoryClockRate", "singleToDoublePrecisionPerfRatio",
                      "cooperativeMultiDeviceLaunch")

_STRUCT = re.compile(r"struct\s+__device_builtin__\s+cudaDeviceProp\s*\{(.*?)\n\};", re.DOTALL)
_RESERVED = re.compile(r"\n(\s*)int\s+reserved\s*\[\s*(\d+)\s*\]\s*;[^\n]*")
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def legacy_enabled(flags: set[str] | frozenset[str] = frozenset()) -> bool:
    return NO_LEGACY_FLAG not in flags and os.environ.get("CPUIFY_LEGACY", "1") != "0"


def patch_driver_types(text: str) -> str:
    """`driver_types.h` with the removed cudaDeviceProp fields put back (see the module
    docstring); the text unchanged when the struct already has them all (CUDA <= 12)."""
    m = _STRUCT.search(text)
    if not m:
        raise CpuifyError("cannot find 'struct cudaDeviceProp' in the toolkit's driver_types.h; "
                          f"build with {NO_LEGACY_FLAG} (or CPUIFY_LEGACY=0)")
    body = m.group(1)
    missing = [f for f in LEGACY_PROP_FIELDS if not re.search(rf"\b{f}\b", body)]
    if not missing:
        return text
    r = _RESERVED.search(body)
    fields = "".join(f"\n    int {f};  /* cpuify: removed in CUDA 13, filled by cpuify's runtime */"
                     for f in missing)
    if r and int(r.group(2)) >= len(missing):
        new_body = (body[:r.start()] + fields +
                    f"\n{r.group(1)}int reserved[{int(r.group(2)) - len(missing)}];" + body[r.end():])
    else:       # no room in `reserved`: append (the struct grows; our runtime matches it)
        new_body = body + fields
    patched = text[:m.start(1)] + new_body + text[m.end(1):]
    marker = "\n#define CPUIFY_LEGACY_DEVICE_PROP 1\n"
    return patched[:m.start()] + marker + patched[m.start():]


def _includers_of_driver_types(include: Path) -> list[str]:
    """Top-level toolkit headers that include driver_types.h, directly or through other
    toolkit headers."""
    deps: dict[str, set[str]] = {}
    for path in glob.glob(str(include / "*.h")) + glob.glob(str(include / "crt" / "*.h")):
        rel = os.path.relpath(path, include)
        try:
            deps[rel] = set(_INCLUDE.findall(Path(path).read_text(errors="replace")))
        except OSError:
            continue
    reaches: dict[str, bool] = {"driver_types.h": True}

    def visit(name: str, stack: set[str]) -> bool:
        if name in reaches:
            return reaches[name]
        if name in stack or name not in deps:
            return False
        stack.add(name)
        found = any(visit(d, stack) for d in deps[name])
        stack.discard(name)
        reaches[name] = found
        return found

    return sorted(n for n in deps if "/" not in n and n != "driver_types.h" and visit(n, set()))


def legacy_header_dir(tk: Toolkit) -> Path:
    """The generated legacy header directory for toolkit `tk` (made on first use, cached
    by the wheel header's contents)."""
    include = Path(tk.include)
    src = include / "driver_types.h"
    try:
        original = src.read_text(errors="replace")
    except OSError as exc:
        raise CpuifyError(f"cannot read the toolkit's driver_types.h: {exc}") from exc
    h = hashlib.sha256()
    headers = " ".join(sorted(os.path.basename(p) for p in glob.glob(str(include / "*.h"))))
    for part in (str(include), original, headers, Path(__file__).read_text()):
        h.update(part.encode())
        h.update(b"\1")
    target = cache.cache_dir("include") / f"legacy-{h.hexdigest()[:16]}"
    if (target / "driver_types.h").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-legacy-"))
    try:
        (tmp / "driver_types.h").write_text(
            "/* Generated by cpuify (cpuify/nvcc/headers.py) from\n"
            f" * {src}:\n * struct cudaDeviceProp with the fields CUDA 13 removed. */\n"
            + patch_driver_types(original))
        for name in _includers_of_driver_types(include):
            (tmp / name).write_text(
                f"/* Generated by cpuify (cpuify/nvcc/headers.py): {name} with cpuify's\n"
                " * driver_types.h (legacy cudaDeviceProp fields) included first. */\n"
                '#include "driver_types.h"\n'
                f"#include_next <{name}>\n")
        # the files are a function of the toolkit's header: they carry its time, so a build
        # that made them does not take them for headers changed while it ran (cpuify run)
        stamp = src.stat()
        for f in tmp.iterdir():
            os.chmod(f, 0o600)          # private as the rest of the cache, whatever the umask
            os.utime(f, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        try:
            os.rename(tmp, target)
        except OSError:         # another process made it first
            if not (target / "driver_types.h").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _wheel_include_dirs(tk: Toolkit, header: str) -> list[str]:
    """Include directories of other NVIDIA wheels (nvidia-nvtx, nvidia-curand) holding
    `header`, when they are not the toolkit's own include directory."""
    found: list[str] = []
    try:
        import nvidia  # type: ignore[import-not-found]
    except ImportError:
        return found
    for root in list(getattr(nvidia, "__path__", []) or []):
        for inc in sorted(glob.glob(os.path.join(root, "*", "include"))):
            if os.path.exists(os.path.join(inc, header)) and \
                    os.path.realpath(inc) != os.path.realpath(tk.include) and inc not in found:
                found.append(inc)
    return found


def curand_include(tk: Toolkit) -> str | None:
    """The directory of NVIDIA's curand.h (the toolkit's or the nvidia-curand wheel's), or None."""
    if os.path.isfile(os.path.join(tk.include, "curand.h")):
        return tk.include
    found = _wheel_include_dirs(tk, "curand.h")
    return found[0] if found else None


def include_options(tk: Toolkit, *, legacy: bool) -> list[str]:
    """nvcc options putting cpuify's headers ahead of the toolkit's (and the legacy
    layer's pre-include when `legacy`)."""
    opts: list[str] = []
    if legacy:
        opts += ["-I", str(legacy_header_dir(tk))]
    opts += ["-I", str(RUNTIME_INCLUDE)]
    for header in ("nvtx3/nvToolsExt.h", "curand_kernel.h", "nvml.h"):
        for inc in _wheel_include_dirs(tk, header):
            opts += ["-I", inc]
    if not curand_include(tk):
        opts += ["-I", str(NO_CURAND_INCLUDE)]
    if legacy:
        opts += ["-include", LEGACY_HEADER]
    return opts
