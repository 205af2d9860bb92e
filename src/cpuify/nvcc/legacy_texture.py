"""Legacy CUDA texture and surface references (`texture<T, dim, mode>` and `surface<void, dim>`
variables, the `cudaBindTexture*`/`cudaUnbindTexture`/`cudaBindSurfaceToArray` functions,
removed from CUDA 12's headers): the driver
pre-includes runtime/include/cpuify_texture_compat.h, which models them on texture objects,
when a source file or a header it includes from its own directories uses them.  CPUIFY_TEXTURE_COMPAT=1
forces the header in, =0 leaves it out."""

from __future__ import annotations

import os
import re
from pathlib import Path

from cpuify.nvcc.legacy_source import project_files

HEADER = Path(__file__).resolve().parent.parent / "runtime" / "include" / "cpuify_texture_compat.h"

_USES = re.compile(r"\b(?:texture|surface)\s*<|\bcuda(?:Bind|Unbind)(?:Texture|Surface)\w*\s*\(")


def uses_texture_references(src: str, include_dirs: list[str], *, limit: int = 200) -> bool:
    """Whether `src` or a file it includes from its own directories (`project_files`) declares
    or binds texture references."""
    return any(_USES.search(text) for _, text in project_files(src, include_dirs, limit=limit))


def pre_include(src: str, host_opts: list[str]) -> list[str]:
    """nvcc options that pre-include the compatibility header when `src` needs it."""
    forced = os.environ.get("CPUIFY_TEXTURE_COMPAT", "")
    if forced == "0":
        return []
    dirs = [o[2:] for o in host_opts if o.startswith("-I") and len(o) > 2]
    if forced == "1" or uses_texture_references(src, dirs):
        return ["-include", str(HEADER)]
    return []
