"""`cpuify cuda-home`: a directory laid out like a CUDA toolkit install, for build systems that
look for one (`make CUDA_PATH=...`, CMake's `enable_language(CUDA)` / `find_package(CUDAToolkit)`,
`PATH=.../bin:$PATH make` with a Makefile that calls plain `nvcc`).

    bin/nvcc               runs `cpuify nvcc` with the Python interpreter that made the directory
    bin/__nvcc_device_query  the compute capability of cpuify's devices, as NVIDIA's tool prints
                           its GPUs' (`75`)
    include/               NVIDIA's headers from the PyPI wheels (symlinks; curand*.h from the
                           nvidia-curand wheel when installed) + cpuify's runtime headers
    lib64/ (lib -> lib64)  libcudart_static.a  cpuify's CUDA runtime (libcpuify_cudart.a)
                           libcudart.so        the same runtime as a shared library
                           libcublas.so, libcublas_static.a, libcufft.so, libcufft_static.a,
                           libcurand.so, libcurand_static.a
                                               cpuify's cuBLAS, cuFFT and cuRAND on the CPU
                                               (mathlibs.py)
                           libcuda.so          the driver API (a few functions real, the rest
                                               stubs that say so), also in lib64/stubs/
                           libnvidia-ml.so     NVML: the device cpuify's runtime reports (name,
                                               memory, clocks, PCI id, UUID), the rest stubs
                                               that say so; needs nvml.h (nvidia-nvml-dev wheel)
                           libcudadevrt.a      empty (the device runtime of dynamic parallelism
                                               is cpuify's runtime)
    nvvm/                  the wheel's nvvm (CMake checks for nvvm/libdevice)
    sdk/                   the GPU Computing SDK's build environment (`cpuify cuda-sdk`:
                           C/common/common.mk, cutil.h, libcutil; cuda_sdk.py)
    version.json, version.txt

The shared libraries' SONAME is their absolute path, so an executable linked with
`-L$(cpuify cuda-home)/lib64 -lcudart` loads cpuify's runtime and never a system CUDA's
libcudart that the dynamic loader would find by name.  The directory lives in the cache
directory under a name that hashes everything it is made of; it is built in a temporary
directory and renamed into place, so processes that build it at the same time are safe.

What `cpuify cuda-home` prints (and `nvcc -v` gives CMake as TOP) is a stable path to it:
`cuda-home/<key of this installation>` in the cache directory, a mirror of it made of links
(stable_cuda_home), moved to the current directory whenever cpuify, its runtime or the
wheels change.  A build directory
configured once (CMake caches the compiler's and the libraries' paths) then compiles with
the headers and links the runtime of the cpuify that runs its `bin/nvcc`, after an upgrade
too; one configured with a toolkit directory's own name (before there was a stable path)
still works, and its `bin/nvcc` says that it is not the current one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from cpuify import cache
from cpuify.errors import CpuifyError
from cpuify.nvcc import cuda_sdk, mathlibs
from cpuify.nvcc.headers import (
    NO_CURAND_INCLUDE,
    RUNTIME_INCLUDE,
    _wheel_include_dirs,
    curand_include,
    legacy_header_dir,
)
from cpuify.nvcc.rtlib import RUNTIME_DIR, c_compiler, runtime_cflags, runtime_library
from cpuify.nvcc.toolkit import HOME_MARKER, Toolkit, find_toolkit

DRIVER_SOURCE = "cuda_driver.c"
#: NVIDIA's name of the tool that prints the GPUs' compute capabilities (runtime/nvcc_device_query.c)
DEVICE_QUERY = "__nvcc_device_query"
DEVICE_QUERY_SOURCE = "nvcc_device_query.c"
NVML_SOURCE = "nvml.c"
# what nvcc links an executable with, after the objects (nvcc -v shows the same line)
RUNTIME_LINK_LIBS = ("-lcudadevrt", "-lcudart_static", "-lrt", "-lpthread", "-ldl", "-lm")

# declared `CUresult CUDAAPI name(`
_DRIVER_DECL = re.compile(r"\bCUresult\s+(?:CUDAAPI\s+)?(cu\w+)\s*\(")
# declared `nvmlReturn_t DECLDIR name(`
_NVML_DECL = re.compile(r"\bnvmlReturn_t\s+(?:DECLDIR\s+)?(nvml\w+)\s*\(")


def _run(cmd: list[str], what: str) -> str:
    proc = cache.run_tool(cmd)
    if proc.returncode != 0:
        raise CpuifyError(f"{what} failed:\n  {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def _defined_symbols(obj: str) -> set[str]:
    out = subprocess.run(["nm", "--defined-only", "-g", obj], capture_output=True, text=True,
                         check=False)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


def driver_api_names(header_text: str, preprocessed: list[str]) -> set[str]:
    """Every driver API function name a program compiled against cuda.h may reference: the
    names as written (older programs' ABI) and as the header's macros map them (`_v2`,
    per-thread `_ptds`/`_ptsz` variants, given as preprocessed texts)."""
    names = set(_DRIVER_DECL.findall(header_text))
    for text in preprocessed:
        names |= set(_DRIVER_DECL.findall(text))
    return names


def _enum_values(header_text: str, enum: str, typedef: str, prefix: str,
                 library: str) -> dict[int, str]:
    """value -> name of `typedef enum <enum> { ... } <typedef>;` in a header (the first name
    of each value; comments dropped)."""
    m = re.search(rf"typedef\s+enum\s+{enum}\s*\{{(.*?)\}}\s*{typedef}\s*;", header_text, re.DOTALL)
    if not m:
        raise CpuifyError(f"the header has no `enum {enum}`: cannot build cpuify's {library}")
    body = re.sub(r"//[^\n]*|/\*.*?\*/", "", m.group(1), flags=re.DOTALL)
    values: dict[int, str] = {}
    for name, value in re.findall(rf"\b({prefix}\w+)\s*=\s*(\d+)", body):
        values.setdefault(int(value), name)
    return values


def error_values(header_text: str) -> dict[int, str]:
    """CUresult value -> name, from cuda.h's `enum cudaError_enum`."""
    return _enum_values(header_text, "cudaError_enum", "CUresult", "CUDA_", "libcuda.so")


def _stub_source(header: str, api: str, table: str, values: dict[int, str],
                 text: Callable[[str], str], names: set[str], implemented: set[str]) -> str:
    """C source of a library's unimplemented functions (each prints its name once and returns
    the value named `..._NOT_SUPPORTED`) and of `table(value)`, `text` of each value's name."""
    not_supported = next(n for n in values.values() if n.endswith("ERROR_NOT_SUPPORTED"))
    code = next(v for v, n in values.items() if n == not_supported)
    lines = [f"/* generated by cpuify/nvcc/cuda_home.py from {header}: the {api} functions",
             f"   cpuify does not implement, and {table}'s texts */",
             "#include <stdatomic.h>", "#include <stdio.h>", "",
             f"const char *{table}(int value) {{", "    switch (value) {"]
    lines += [f'    case {v}: return "{text(n)}";' for v, n in sorted(values.items())]
    lines += ["    default: return 0;", "    }", "}", "",
              "static int not_supported(const char *fn, atomic_int *said) {",
              "    if (!atomic_exchange(said, 1))",
              (f'        fprintf(stderr, "cpuify: %s ({api}) is not supported by cpuify '
               f'(returning {not_supported})\\n", fn);'),
              f"    return {code};", "}", ""]
    for n in sorted(names - implemented):
        lines.append(f"int {n}(void) {{ static atomic_int said; "
                     f'return not_supported("{n}", &said); }}')
    return "\n".join(lines) + "\n"


def driver_stub_source(names: set[str], implemented: set[str], errors: dict[int, str]) -> str:
    return _stub_source("cuda.h", "CUDA driver API", "cpuify_cu_error_name", errors, str,
                        names, implemented)


def nvml_api_names(header_text: str, preprocessed: list[str]) -> set[str]:
    """Every NVML function name a program compiled against nvml.h may reference: as written
    (the unversioned names older programs link) and as the header's macros map them (`_v2`)."""
    names = set(_NVML_DECL.findall(header_text))
    for text in preprocessed:
        names |= set(_NVML_DECL.findall(text))
    return names


def nvml_return_values(header_text: str) -> dict[int, str]:
    """nvmlReturn_t value -> name, from nvml.h's `enum nvmlReturn_enum`."""
    return _enum_values(header_text, "nvmlReturn_enum", "nvmlReturn_t", "NVML_", "libnvidia-ml.so")


def nvml_error_text(name: str) -> str:
    """nvmlErrorString's text for a value: its name in words (NVML_ERROR_NOT_SUPPORTED ->
    'Not Supported', NVML_SUCCESS -> 'Success')."""
    words = name.removeprefix("NVML_").removeprefix("ERROR_").split("_")
    return " ".join(w if w in ("GPU", "RM", "IRQ", "ECC", "VGPU") else w.capitalize() for w in words)


def nvml_stub_source(names: set[str], implemented: set[str], returns: dict[int, str]) -> str:
    return _stub_source("nvml.h", "NVML", "cpuify_nvml_error_text", returns, nvml_error_text,
                        names, implemented)


def nvml_header(tk: Toolkit) -> str | None:
    """nvml.h of the toolkit, or of the nvidia-nvml-dev wheel (installed next to the other
    cu13 headers, or in a site directory of its own), or None."""
    for inc in (tk.include, *_wheel_include_dirs(tk, "nvml.h")):
        path = os.path.join(inc, "nvml.h")
        if os.path.isfile(path):
            return path
    return None


def toolkit_release(tk: Toolkit) -> str:
    """The toolkit's full version, e.g. '13.5.37' (from `nvcc --version`)."""
    out = subprocess.run([tk.nvcc, "--version"], capture_output=True, text=True,
                         check=False).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else tk.version() + ".0"


#: set by bin/nvcc to the path it was run by ($0): the driver tells a stale toolkit directory
INVOKED_AS = "CPUIFY_NVCC_INVOKED_AS"
#: the cache's subdirectory of stable paths (one mirror per installation of cpuify)
STABLE_DIR = "cuda-home"


def _package_parent() -> str:
    return str(Path(__file__).resolve().parent.parent.parent)


def nvcc_script() -> str:
    """bin/nvcc: this cpuify, run by this Python interpreter, whatever PYTHONPATH says later."""
    code = (f"import sys; sys.path.insert(0, {_package_parent()!r}); "
            "from cpuify.cli.main import main; sys.exit(main(['nvcc'] + sys.argv[1:]))")
    return ("#!/bin/sh\n"
            "# cpuify's nvcc (made by `cpuify cuda-home`): builds CUDA programs that run on the CPU\n"
            f'{INVOKED_AS}="$0" exec {shlex.quote(sys.executable)} -c {shlex.quote(code)} "$@"\n')


def _key(tk: Toolkit, runtime: Path) -> str:
    h = hashlib.sha256()
    st = os.stat(tk.nvcc)
    for part in (Path(__file__).read_bytes(), (RUNTIME_DIR / DRIVER_SOURCE).read_bytes(),
                 (RUNTIME_DIR / NVML_SOURCE).read_bytes(), str(nvml_header(tk)).encode(),
                 (RUNTIME_DIR / DEVICE_QUERY_SOURCE).read_bytes(),
                 str(runtime).encode(), tk.root.encode(), tk.include.encode(),
                 str(curand_include(tk)).encode(),
                 f"{st.st_size}:{st.st_mtime_ns}".encode(), sys.executable.encode(),
                 nvcc_script().encode(), c_compiler().encode()):
        h.update(part)
        h.update(b"\0")
    h.update(mathlibs.sources_digest())
    h.update(cuda_sdk.sources_digest())
    for header in sorted(RUNTIME_DIR.glob("*.h")):       # include/ links each of them
        h.update(header.name.encode() + b"\0")
    for header in sorted(RUNTIME_INCLUDE.glob("*.h")):   # and these, in place of the wheel's
        h.update(header.name.encode() + b"\0")
    h.update(str(legacy_header_dir(tk)).encode())
    return h.hexdigest()[:16]


EXPECTED = ("bin/nvcc", f"bin/{DEVICE_QUERY}", "include/cuda_runtime.h", "lib64/libcudart.so", "lib64/libcudart_static.a",
            "lib64/libcuda.so", "lib64/libcudadevrt.a", "lib/libcudart.so", "version.json",
            *(f"lib64/lib{name}{kind}" for name in mathlibs.NAMES for kind in (".so", "_static.a")),
            *cuda_sdk.expected_files(), HOME_MARKER)


NVML_EXPECTED = ("lib64/libnvidia-ml.so", "lib64/stubs/libnvidia-ml.so")


def _complete(home: Path, tk: Toolkit) -> bool:
    expected = EXPECTED + (NVML_EXPECTED if nvml_header(tk) else ())
    return all(os.path.exists(home / p) for p in expected)


def _home_path(base: Path, tk: Toolkit, runtime: Path) -> Path:
    return base / f"{cache.CUDA_HOME_PREFIX}{_key(tk, runtime)}"


def stable_cuda_home() -> Path:
    """The path `cpuify cuda-home` prints: `cuda-home/<installation key>` in the cache
    directory, a mirror of cuda_home(persistent=True) made of symbolic links, moved to the
    current toolkit directory when it points at another one.  The key is the Python
    interpreter and the directory cpuify is imported from: two installations (virtual
    environments, checkouts) have paths of their own, one installation keeps its path
    through upgrades.

    The mirror's lib64/ (and lib64/stubs/) are real directories of links to the files,
    the rest links to the toolkit directory's entries: CMake's FindCUDAToolkit resolves
    the library directory's real path before it looks for libraries, and would cache the
    toolkit directory's own name otherwise.  bin/nvcc is a copy: it runs, and moves the
    mirror, even after the toolkit directory it mirrored was evicted.  Each entry is
    replaced atomically; processes that move the mirror at the same time leave it the
    same."""
    home = cuda_home(persistent=True)
    key = hashlib.sha256(f"{sys.executable}\0{_package_parent()}".encode()).hexdigest()[:12]
    root = home.parent / STABLE_DIR / key
    target = root / _MIRROR_TARGET
    if root.is_symlink():
        root.unlink()
    try:
        if target.read_text() == home.name:
            return root
    except OSError:
        pass
    (home.parent / STABLE_DIR).mkdir(mode=0o700, exist_ok=True)
    _mirror(home, root, "")
    cache.write_private_file(target, home.name.encode())
    return root


#: the file in a stable path that names the toolkit directory it mirrors
_MIRROR_TARGET = ".cpuify-mirror-of"
#: the mirror's real directories (the others are links); bin/'s files are copies (bin/nvcc
#: then runs, and moves the mirror, even when the toolkit directory was evicted)
_MIRROR_DIRS = ("bin", "lib64", "lib64/stubs")


def _replace_link(target: str, path: Path) -> None:
    """`path` made a symbolic link to `target`, atomically."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    os.symlink(target, tmp)
    os.replace(tmp, path)


def _mirror(src: Path, dst: Path, rel: str) -> None:
    dst.mkdir(mode=0o700, exist_ok=True)
    names = set(os.listdir(src))
    for name in sorted(names):
        sub = f"{rel}/{name}" if rel else name
        entry = src / name
        if sub in _MIRROR_DIRS and entry.is_dir() and not entry.is_symlink():
            if (dst / name).is_symlink():
                (dst / name).unlink()
            _mirror(entry, dst / name, sub)
        elif rel == "bin" and entry.is_file():
            cache.write_private_file(dst / name, entry.read_bytes(),
                                     executable=os.access(entry, os.X_OK))
        elif entry.is_symlink() and not os.path.isabs(os.readlink(entry)):
            _replace_link(os.readlink(entry), dst / name)    # (lib -> lib64, the .so chains)
        elif not (dst / name).is_dir() or (dst / name).is_symlink():
            _replace_link(str(entry), dst / name)
    for name in set(os.listdir(dst)) - names - {_MIRROR_TARGET}:
        if not name.startswith("."):
            with contextlib.suppress(OSError):
                (dst / name).unlink()


def toolkit_home() -> Path:
    """The toolkit directory builds name: its stable path (stable_cuda_home), or with no
    usable cache this process's private one."""
    return stable_cuda_home() if cache.cache_enabled() else cuda_home()


def check_invoked_home(invoked_as: str) -> str | None:
    """bin/nvcc was run as `invoked_as` ($0).  Through this installation's stable path: the
    mirror is moved to the current toolkit directory first (made if need be), so that the
    headers and libraries the build names through it are this cpuify's.  From a toolkit
    directory's own name that is not the current one (a build configured before cpuify,
    its runtime or the wheels changed, and before there was a stable path): a note that
    says so and what to do.  Else None."""
    named = Path(os.path.abspath(invoked_as)).parent.parent
    try:
        if (named / _MIRROR_TARGET).exists():
            stable_cuda_home()
            return None
        home = named.resolve()
        if not (home / HOME_MARKER).exists() or not cache.cache_enabled():
            return None
        current = cuda_home(persistent=True)
    except (CpuifyError, OSError):
        return None
    if home == current:
        return None
    return (f"cpuify nvcc: note: run as {invoked_as}, from the toolkit directory {home}, which "
            "an earlier cpuify (or runtime, or NVIDIA wheels) made: a build configured with it "
            "compiles against its headers and links its runtime where its command lines name "
            "them. Configure the build again with the path `cpuify cuda-home` prints (it stays "
            "the same through upgrades); for CMake, delete the build directory's "
            "CMakeCache.txt")


def cuda_home(*, persistent: bool = False) -> Path:
    """The drop-in CUDA directory of this cpuify (built on first use, then reused), in the
    cache directory; with no usable cache (CPUIFY_NO_CACHE=1, an unusable directory) in this
    process's private directory, which goes at exit, unless `persistent` asks for one that
    outlives the process (then that is an error)."""
    if persistent and not cache.cache_enabled():
        raise CpuifyError("the toolkit directory lives in the cache directory, and there is none "
                          f"({'CPUIFY_NO_CACHE is set' if cache.disabled_by_user() else 'it is unusable'}"
                          "): unset CPUIFY_NO_CACHE or set CPUIFY_CACHE_DIR to a writable directory")
    tk = find_toolkit()
    runtime = runtime_library()
    base = cache.cache_dir().resolve()
    home = _home_path(base, tk, runtime)
    if _complete(home, tk):
        cache.use_directory(home)       # the most recently used: kept by eviction
        return home
    base.mkdir(parents=True, exist_ok=True)
    if home.exists():          # damaged (a file deleted by hand): move it aside, build again
        aside = base / f".{home.name}.broken-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.rename(home, aside)
            shutil.rmtree(aside, ignore_errors=True)
        except OSError:
            pass               # another process moved it first
    tmp = Path(tempfile.mkdtemp(dir=base, prefix=f".{home.name}.tmp-"))
    try:
        _build(tmp, home, tk, runtime)
        _make_private(tmp)
        try:
            os.rename(tmp, home)
        except OSError:
            if not _complete(home, tk):     # lost a race to a process that built it: use theirs
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cache.use_directory(home)
    return home


def _make_private(root: Path) -> None:
    """As everything in the cache (cpuify.cache): directories and executables 0700, other
    files 0600, whatever the umask (symlinks have no modes of their own)."""
    for d, dirs, files in os.walk(root):
        os.chmod(d, 0o700)
        for name in files:
            path = os.path.join(d, name)
            st = os.lstat(path)
            if not os.path.islink(path):
                os.chmod(path, 0o700 if st.st_mode & 0o100 else 0o600)


def _build(tmp: Path, final: Path, tk: Toolkit, runtime: Path) -> None:
    cc = c_compiler()
    for d in ("bin", "include", "lib64/stubs"):
        (tmp / d).mkdir(parents=True)
    nvcc = tmp / "bin" / "nvcc"
    nvcc.write_text(nvcc_script())
    nvcc.chmod(0o755)

    # headers: the wheels' (what cpuify nvcc compiles against) and the runtime's
    for name in sorted(os.listdir(tk.include)):
        os.symlink(os.path.join(tk.include, name), tmp / "include" / name)
    for header in sorted(RUNTIME_DIR.glob("*.h")):
        if not (tmp / "include" / header.name).exists():
            os.symlink(header, tmp / "include" / header.name)
    # cuRAND's headers (host and device API): the nvidia-curand wheel's, or ones that say to
    # install it
    curand = curand_include(tk)
    if curand != tk.include:
        for header in (sorted(Path(curand).glob("curand*.h")) if curand else sorted(NO_CURAND_INCLUDE.glob("*.h"))):
            if not (tmp / "include" / header.name).exists():
                os.symlink(header, tmp / "include" / header.name)
    # cpuify's own headers (profiler API, NVTX v2 names, the legacy layer) take the place of
    # the wheel's, and driver_types.h is the legacy layer's (cudaDeviceProp with the fields
    # CUDA 13 removed, in its reserved space): host files compiled by the host compiler
    # with -I$(CUDA_HOME)/include see the struct cpuify nvcc's sources see
    overlays = [*sorted(RUNTIME_INCLUDE.glob("*.h")), legacy_header_dir(tk) / "driver_types.h"]
    for header in overlays:
        link = tmp / "include" / header.name
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(header, link)
    # host files compiled by the host compiler (g++ -I$(CUDA_HOME)/include, the usual
    # Makefile split) see the legacy layer too: cuda_runtime_api.h is the toolkit's followed
    # by cpuify_legacy.h (cudaThreadSynchronize and the other functions CUDA 13 removed)
    api = tmp / "include" / "cuda_runtime_api.h"
    original = os.path.join(tk.include, "cuda_runtime_api.h")
    if os.path.exists(original):
        api.unlink()
        api.write_text(
            "/* cpuify cuda-home: the toolkit's cuda_runtime_api.h, then cpuify's legacy layer\n"
            " * (the CUDA runtime functions CUDA 13 removed, implemented by cpuify's runtime). */\n"
            "#ifndef CPUIFY_HOME_CUDA_RUNTIME_API_H\n#define CPUIFY_HOME_CUDA_RUNTIME_API_H\n"
            f'#include "{original}"\n#include "cpuify_legacy.h"\n#endif\n')
    nvvm = os.path.join(tk.root, "nvvm")
    if os.path.isdir(nvvm):
        os.symlink(nvvm, tmp / "nvvm")

    release = toolkit_release(tk)
    major = release.split(".")[0]
    lib = tmp / "lib64"
    shutil.copyfile(runtime, lib / "libcudart_static.a")
    cudart = f"libcudart.so.{release}"
    _run([cc, "-shared", "-o", str(lib / cudart), f"-Wl,-soname,{final / 'lib64' / cudart}",
          "-Wl,--whole-archive", str(runtime), "-Wl,--no-whole-archive", "-lpthread", "-lm", "-ldl"],
         "linking cpuify's libcudart.so")
    for link in (f"libcudart.so.{major}", "libcudart.so"):
        os.symlink(cudart, lib / link)
    query = tmp / "bin" / DEVICE_QUERY
    _run([cc, "-O2", "-std=c11", *runtime_cflags(tk), str(RUNTIME_DIR / DEVICE_QUERY_SOURCE), "-o",
          str(query), str(lib / "libcudart_static.a"), "-lpthread", "-lm", "-ldl"],
         f"building bin/{DEVICE_QUERY}")

    with cache.temporary_directory(prefix="cpuify-libcuda-") as work:
        driver_o = os.path.join(work, "cuda_driver.o")
        cflags = ["-O2", "-std=c11", "-fPIC", f"-I{tk.include}"]
        _run([cc, *cflags, "-c", str(RUNTIME_DIR / DRIVER_SOURCE), "-o", driver_o],
             "compiling cpuify's CUDA driver API")
        header = os.path.join(tk.include, "cuda.h")
        text = Path(header).read_text(errors="replace")
        preprocessed = [_run([cc, "-E", "-P", *extra, f"-I{tk.include}", header], "reading cuda.h")
                        for extra in ([], ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"])]
        stubs = os.path.join(work, "cuda_driver_stubs.c")
        Path(stubs).write_text(driver_stub_source(driver_api_names(text, preprocessed),
                                                  _defined_symbols(driver_o), error_values(text)))
        _run([cc, "-O1", "-fPIC", "-c", stubs, "-o", stubs[:-2] + ".o"],
             "compiling the CUDA driver API stubs")
        _run([cc, "-shared", "-o", str(lib / "libcuda.so.1"),
              f"-Wl,-soname,{final / 'lib64' / 'libcuda.so.1'}", driver_o, stubs[:-2] + ".o"],
             "linking cpuify's libcuda.so")
        mathlibs.build(lib, final / "lib64", tk, lib / cudart, release, work)
        cuda_sdk.build(tmp, final, work)
        nvml = nvml_header(tk)
        if nvml:
            _build_nvml(lib, final / "lib64", tk, nvml, work)
            if not (tmp / "include" / "nvml.h").exists():
                os.symlink(nvml, tmp / "include" / "nvml.h")
    os.symlink("libcuda.so.1", lib / "libcuda.so")
    os.symlink("../libcuda.so.1", lib / "stubs" / "libcuda.so")
    if (lib / "libnvidia-ml.so.1").exists():
        os.symlink("libnvidia-ml.so.1", lib / "libnvidia-ml.so")
        os.symlink("../libnvidia-ml.so.1", lib / "stubs" / "libnvidia-ml.so")
    _run(["ar", "rcs", str(lib / "libcudadevrt.a")], "creating libcudadevrt.a")
    os.symlink("lib64", tmp / "lib")

    from cpuify import __version__
    versions = {
        "cuda": {"name": "CUDA SDK", "version": release},
        "cuda_cudart": {"name": "CUDA Runtime (cudart): cpuify's, on the CPU", "version": release},
        "cuda_nvcc": {"name": "CUDA NVCC: cpuify nvcc", "version": release},
        "cpuify": {"name": "cpuify", "version": __version__},
    }
    (tmp / "version.json").write_text(json.dumps(versions, indent=3) + "\n")
    (tmp / "version.txt").write_text(f"CUDA Version {release}\n")
    (tmp / HOME_MARKER).write_text(json.dumps({"cpuify": __version__, "toolkit": tk.root,
                                               "runtime": str(runtime)}) + "\n")


def _build_nvml(lib: Path, final_lib: Path, tk: Toolkit, header: str, work: str) -> None:
    """lib64/libnvidia-ml.so.1: runtime/nvml.c, and a stub for every other function nvml.h
    declares."""
    cc = c_compiler()
    nvml_o = os.path.join(work, "nvml.o")
    _run([cc, "-O2", "-std=c11", "-fPIC", f"-I{os.path.dirname(header)}", f"-I{tk.include}", "-c",
          str(RUNTIME_DIR / NVML_SOURCE), "-o", nvml_o], "compiling cpuify's NVML")
    text = Path(header).read_text(errors="replace")
    preprocessed = [_run([cc, "-E", "-P", *extra, f"-I{tk.include}", header], "reading nvml.h")
                    for extra in ([], ["-DNVML_NO_UNVERSIONED_FUNC_DEFS"])]
    stubs = os.path.join(work, "nvml_stubs.c")
    Path(stubs).write_text(nvml_stub_source(nvml_api_names(text, preprocessed),
                                            _defined_symbols(nvml_o), nvml_return_values(text)))
    _run([cc, "-O1", "-fPIC", "-c", stubs, "-o", stubs[:-2] + ".o"], "compiling the NVML stubs")
    _run([cc, "-shared", "-o", str(lib / "libnvidia-ml.so.1"),
          f"-Wl,-soname,{final_lib / 'libnvidia-ml.so.1'}", nvml_o, stubs[:-2] + ".o"],
         "linking cpuify's libnvidia-ml.so")


def is_foreign_cuda_include(directory: str, ours: str) -> bool:
    """True for a directory with a cuda_runtime.h that is not the one cpuify compiles with
    (another CUDA install's include/)."""
    header = os.path.join(directory, "cuda_runtime.h")
    if not os.path.isfile(header):
        return False
    return os.path.realpath(header) != os.path.realpath(os.path.join(ours, "cuda_runtime.h"))


def verbose_environment(home: Path) -> list[str]:
    """The variables nvcc -v prints first (CMake reads TOP, NVVMIR_LIBRARY_DIR, PATH,
    INCLUDES, SYSTEM_INCLUDES and LIBRARIES from them)."""
    return [
        "_NVVM_BRANCH_=nvvm",
        "_SPACE_= ",
        "_CUDART_=cudart",
        f"TOP={home}",
        f"NVVMIR_LIBRARY_DIR={home}/nvvm/libdevice",
        f"PATH={home}/bin:{os.environ.get('PATH', '')}",
        f'INCLUDES="-I{home}/include"  ',
        f'SYSTEM_INCLUDES="-isystem" "{home}/include/cccl"  ',
        "LIBRARIES=  " + " ".join(f'"{flag}"' for flag in library_dirs(home)),
        "CUDAFE_FLAGS=",
        "PTXAS_FLAGS=",
    ]


def library_dirs(home: Path) -> list[str]:
    return [f"-L{home}/lib64/stubs", f"-L{home}/lib64"]
