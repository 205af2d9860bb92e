"""Locate NVIDIA's nvcc and CUDA headers from the PyPI wheels (`nvidia-cuda-nvcc`,
`nvidia-nvvm`, `nvidia-cuda-runtime`, `nvidia-cuda-crt`, `nvidia-cuda-cccl`).

A system CUDA is used only when `CPUIFY_CUDA_HOME` names it explicitly: cpuify never picks
up whatever nvcc happens to be on PATH (it would produce host code for a different CUDA
version than the headers the runtime is built against)."""

from __future__ import annotations

import functools
import glob
import os
import re
from dataclasses import dataclass

from cpuify.errors import CompileError

# a file in the directories `cpuify cuda-home` makes: their bin/nvcc is cpuify's own driver,
# never the toolkit cpuify nvcc runs
HOME_MARKER = ".cpuify-cuda-home"

INSTALL_HINT = "pip install nvidia-cuda-nvcc nvidia-nvvm nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl"


@dataclass(frozen=True)
class Toolkit:
    root: str          # directory holding bin/nvcc, include/, nvvm/
    nvcc: str
    include: str       # cuda_runtime_api.h, crt/host_runtime.h

    def version(self) -> str:
        """e.g. '13.5' (from cuda_runtime_api.h's CUDART_VERSION)."""
        text = open(os.path.join(self.include, "cuda_runtime_api.h"), errors="replace").read()
        m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", text)
        if not m:
            return "unknown"
        v = int(m.group(1))
        return f"{v // 1000}.{v % 1000 // 10}"


def _candidates() -> list[str]:
    roots: list[str] = []
    home = os.environ.get("CPUIFY_CUDA_HOME")
    if home:
        roots.append(home)
    try:
        import nvidia  # type: ignore[import-not-found]  # namespace package of the wheels
        for p in list(getattr(nvidia, "__path__", []) or []):
            cu = sorted(glob.glob(os.path.join(p, "cu[0-9]*")),
                        key=lambda d: int(re.sub(r"\D", "", os.path.basename(d)) or 0), reverse=True)
            roots += cu
            roots.append(os.path.join(p, "cuda_nvcc"))   # CUDA 12 wheel layout
    except ImportError:
        pass
    return roots


@functools.lru_cache(maxsize=1)
def find_toolkit() -> Toolkit:
    for root in _candidates():
        if os.path.exists(os.path.join(root, HOME_MARKER)):
            continue
        nvcc = os.path.join(root, "bin", "nvcc")
        if not os.access(nvcc, os.X_OK):
            continue
        include = os.path.join(root, "include")
        if not os.path.isfile(os.path.join(include, "cuda_runtime_api.h")):
            # CUDA 12 wheels spread headers over several packages
            alt = os.path.join(os.path.dirname(root), "cuda_runtime", "include")
            if os.path.isfile(os.path.join(alt, "cuda_runtime_api.h")):
                include = alt
            else:
                continue
        return Toolkit(root, nvcc, include)
    raise CompileError("cannot find nvcc: cpuify nvcc uses NVIDIA's nvcc from PyPI to split host "
                       f"and device code.  Install the wheels: `{INSTALL_HINT}` (or set "
                       "CPUIFY_CUDA_HOME to a CUDA toolkit directory)")
