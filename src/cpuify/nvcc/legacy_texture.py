"""Legacy CUDA texture references (`texture<T, dim, mode>` variables and the
`cudaBindTexture*`/`cudaUnbindTexture` functions, removed from CUDA 12's headers): the driver
pre-includes runtime/include/cpuify_texture_compat.h, which models them on texture objects,
when a source file or a header it includes from its own directories uses them.  CPUIFY_TEXTURE_COMPAT=1
forces the header in, =0 leaves it out."""

from __future__ import annotations

import os
import re
from pathlib import Path

HEADER = Path(__file__).resolve().parent.parent / "runtime" / "include" / "cpuify_texture_compat.h"

_USES = re.compile(r"\btexture\s*<|\bcuda(?:Bind|Unbind)Texture\w*\s*\(")
_INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)', re.M)


def uses_texture_references(src: str, include_dirs: list[str], *, limit: int = 200) -> bool:
    """Whether `src` or a file it includes declares or binds texture references: quoted
    includes are looked up next to the including file and in `include_dirs`, angle-bracket
    ones in `include_dirs` only (never the system's or the toolkit's headers)."""
    seen: set[str] = set()
    todo = [os.path.abspath(src)]
    while todo and len(seen) < limit:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        if _USES.search(text):
            return True
        for quoted, angled in _INCLUDE.findall(text):
            name = quoted or angled
            for d in ([os.path.dirname(path)] if quoted else []) + include_dirs:
                cand = os.path.join(d, name)
                if os.path.isfile(cand):
                    todo.append(os.path.abspath(cand))
                    break
    return False


def pre_include(src: str, host_opts: list[str]) -> list[str]:
    """nvcc options that pre-include the compatibility header when `src` needs it."""
    forced = os.environ.get("CPUIFY_TEXTURE_COMPAT", "")
    if forced == "0":
        return []
    dirs = [o[2:] for o in host_opts if o.startswith("-I") and len(o) > 2]
    if forced == "1" or uses_texture_references(src, dirs):
        return ["-include", str(HEADER)]
    return []
