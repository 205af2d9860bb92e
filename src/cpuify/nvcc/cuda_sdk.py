"""`cpuify cuda-sdk`: a directory laid out like NVIDIA's GPU Computing SDK of 2008-2012
(`NVIDIA_COMPUTE_SDK_LOCATION`), for SDK-era programs whose Makefiles end with
`include .../common/common.mk` and whose sources include `cutil.h` or `shrUtils.h` (the
GPGPU-Sim ISPASS 2009 benchmarks, old SDK samples and the projects written from them).

    C/common/common.mk         the SDK's make rules (EXECUTABLE, CUFILES, CCFILES, ...), compiling
                               with $(CUDA_INSTALL_PATH)/bin/nvcc (default: this cuda-home's)
    C/common/inc/              cutil.h, cutil_inline*.h, cutil_math.h (cpuify's, runtime/sdk/)
    C/common/lib/linux/        empty (the SDK kept GLEW/GLUT there)
    C/lib/libcutil_x86_64.a    cutil.cpp (also as libcutil.a and the debug name libcutilD_x86_64.a)
    C/src/                     empty: the SDK's projects directory (ROOTDIR)
    shared/inc/                shrUtils.h, shrQATest.h (the SDK 3.x utilities)
    shared/lib/libshrutil_x86_64.a   shrUtils.cpp (also libshrutil.a, libshrutilD_x86_64.a);
                               it calls libcutil: link -lshrutil_x86_64 -lcutil_x86_64

It lives inside the `cpuify cuda-home` directory (`<home>/sdk`), made with it and versioned
with it: its sources are part of cuda-home's cache key.  All of it is cpuify's own code,
written from the SDK's documented API; no NVIDIA file is copied.
"""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path

from cpuify import cache
from cpuify.errors import CpuifyError
from cpuify.nvcc.rtlib import RUNTIME_DIR

SDK_SOURCES = RUNTIME_DIR / "sdk"
HEADERS = ("cutil.h", "cutil_inline.h", "cutil_inline_runtime.h", "cutil_inline_drvapi.h",
           "cutil_inline_bankchecker.h", "cutil_math.h")
LIBRARY_SOURCE = "cutil.cpp"
SHARED_HEADERS = ("shrUtils.h", "shrQATest.h")
SHARED_SOURCE = "shrUtils.cpp"
MAKE_RULES = "common.mk"
SUBDIR = "sdk"


def library_arch() -> str:
    """The SDK's name for the machine in its library names (libcutil_x86_64.a)."""
    return platform.machine() or "x86_64"


def expected_files() -> tuple[str, ...]:
    """Paths (relative to the cuda-home) that a complete SDK directory has."""
    return (f"{SUBDIR}/C/common/{MAKE_RULES}", *(f"{SUBDIR}/C/common/inc/{h}" for h in HEADERS),
            *(f"{SUBDIR}/shared/inc/{h}" for h in SHARED_HEADERS),
            f"{SUBDIR}/C/lib/libcutil_{library_arch()}.a",
            f"{SUBDIR}/shared/lib/libshrutil_{library_arch()}.a")


def sources_digest() -> bytes:
    """What the SDK directory is made of (for cuda-home's cache key)."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for name in (*HEADERS, LIBRARY_SOURCE, MAKE_RULES, *SHARED_HEADERS, SHARED_SOURCE):
        h.update(name.encode() + b"\0")
        h.update((SDK_SOURCES / name).read_bytes())
    return h.digest()


def _run(cmd: list[str], what: str) -> None:
    proc = cache.run_tool(cmd)
    if proc.returncode != 0:
        raise CpuifyError(f"{what} failed:\n  {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")


def build(home: Path, final_home: Path, work: str) -> None:
    """Make `<home>/sdk` (`final_home` is where `home` will be once complete: common.mk names
    it by its absolute path)."""
    sdk = home / SUBDIR
    final_sdk = final_home / SUBDIR
    for d in ("C/common/inc", "C/common/lib/linux", "C/lib", "C/src", "shared/inc", "shared/lib"):
        (sdk / d).mkdir(parents=True, exist_ok=True)
    for header in HEADERS:
        (sdk / "C/common/inc" / header).write_bytes((SDK_SOURCES / header).read_bytes())
    rules = (SDK_SOURCES / MAKE_RULES).read_text()
    rules = rules.replace("@CPUIFY_SDK@", str(final_sdk)).replace("@CPUIFY_CUDA_HOME@",
                                                                   str(final_home))
    (sdk / "C/common" / MAKE_RULES).write_text(rules)

    for header in SHARED_HEADERS:
        (sdk / "shared/inc" / header).write_bytes((SDK_SOURCES / header).read_bytes())

    # libcutil and libshrutil: C++ (default arguments, bool), C linkage, position-independent
    # so that they link into executables and shared libraries alike
    arch = library_arch()
    for source, name, libdir in ((LIBRARY_SOURCE, "cutil", "C/lib"),
                                 (SHARED_SOURCE, "shrutil", "shared/lib")):
        obj = os.path.join(work, f"{name}.o")
        _run(["c++", "-O2", "-fPIC", "-std=c++17", "-Wall", f"-I{sdk / 'C/common/inc'}",
              f"-I{sdk / 'shared/inc'}", "-c", str(SDK_SOURCES / source), "-o", obj],
             f"compiling cpuify's lib{name}")
        library = f"lib{name}_{arch}.a"
        _run(["ar", "rcs", str(sdk / libdir / library), obj], f"creating lib{name}")
        for alias in (f"lib{name}.a", f"lib{name}D_{arch}.a"):
            os.symlink(library, sdk / libdir / alias)
