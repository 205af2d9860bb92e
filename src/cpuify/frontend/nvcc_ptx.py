"""Compile CUDA C++ to PTX with NVIDIA's nvcc (`nvcc -ptx`), the `backend='nvcc'` of the
Python API (CuPy's `RawModule(..., backend='nvcc')`).

nvcc comes from the same place as NVRTC: the `nvidia-cuda-nvcc` wheel beside the NVRTC
wheel (``nvidia/cu13/bin/nvcc``, CUDA 12: ``nvidia/cuda_nvcc/bin/nvcc``), or
``CPUIFY_CUDA_HOME``/``CUDA_HOME``.  Unlike NVRTC, nvcc preprocesses with the host C++
compiler, so kernel sources may include the C++ standard library headers."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Mapping, Sequence

from cpuify.errors import CompileError
from cpuify.frontend import nvrtc

INSTALL_HINT = "pip install nvidia-cuda-nvcc nvidia-nvvm"


def nvcc_path() -> str:
    """The nvcc executable the nvcc backend runs (CompileError if there is none)."""
    candidates: list[str] = []
    try:
        lib = nvrtc._locate().libnvrtc            # nvidia/cu13/lib/libnvrtc.so.13
        candidates.append(os.path.join(os.path.dirname(os.path.dirname(lib)), "bin", "nvcc"))
    except CompileError:
        pass
    for root in nvrtc._nvidia_roots():
        candidates.append(os.path.join(root, "cuda_nvcc", "bin", "nvcc"))
    for var in ("CPUIFY_CUDA_HOME", "CUDA_HOME"):
        home = os.environ.get(var)
        if home:
            candidates.append(os.path.join(home, "bin", "nvcc"))
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    raise CompileError("backend='nvcc' needs NVIDIA's nvcc, which is not installed: "
                       f"`{INSTALL_HINT}` (or use the default backend='nvrtc')")


def compile_to_ptx(source: str, *, filename: str = "kernel.cu", options: Sequence[str] = (),
                   headers: Mapping[str, str] | None = None,
                   timeout: float = 600.0) -> nvrtc.PTXResult:
    """`source` compiled by `nvcc -ptx` for compute_75 (unless the options name an
    architecture) with -std=c++17 (unless the options name a standard).  `headers` are
    written beside the source, so `#include "name"` and `<name>` find them.  Raises
    CompileError with nvcc's output."""
    nvcc = nvcc_path()
    opts = [str(o) for o in options]
    if not any(o.startswith(("-arch", "--gpu-architecture", "-gencode", "--generate-code"))
               for o in opts):
        opts.insert(0, f"-arch={nvrtc.DEFAULT_ARCH}")
    if not any(o.startswith(("-std", "--std")) for o in opts):
        opts.insert(0, f"-std={nvrtc.DEFAULT_STD}")
    tmp = tempfile.mkdtemp(prefix="cpuify-nvcc-")
    try:
        src = os.path.join(tmp, os.path.basename(filename) or "kernel.cu")
        if not src.endswith(".cu"):
            src += ".cu"
        with open(src, "w") as f:
            f.write(source)
        for name, text in (headers or {}).items():
            path = os.path.join(tmp, "include", name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        out = os.path.join(tmp, "kernel.ptx")
        cmd = [nvcc, "-ptx", *opts, f"-I{os.path.join(tmp, 'include')}", src, "-o", out]
        try:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise CompileError(f"nvcc did not finish compiling {filename} in {timeout:.0f} s") from None
        except OSError as exc:
            raise CompileError(f"cannot run nvcc ({nvcc}): {exc}") from None
        log = (proc.stdout + proc.stderr).replace(tmp + os.sep, "")
        if proc.returncode != 0 or not os.path.exists(out):
            raise CompileError(f"nvcc failed to compile {filename}:\n{log.rstrip()}", log=log)
        with open(out) as f:
            ptx = f.read()
        return nvrtc.PTXResult(ptx=ptx, lowered_names={}, log=log if log.strip() else "")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
