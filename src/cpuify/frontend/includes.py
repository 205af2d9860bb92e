"""Which files an NVRTC compile may read: the headers a source includes from the user's
include directories, for the compile cache's key (NVRTC has no dependency output).

The scan is conservative: every `#include` line counts, whatever the conditionals around
it, and each include is looked up in every directory of its search path (for "quoted"
names: the including file's directory, then the -I directories; for <angled> ones: the -I
directories).  The digest covers each candidate path with its contents, or its absence, so
editing, adding or removing any header that could be the one read changes the key.
Headers found only in the CUDA toolkit's directories are covered by the NVRTC version.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Sequence

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include(?:_next)?[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>|(.*))', re.MULTILINE)
MAX_FILES = 4000          # a scan this wide is not worth it: the compile is not cached

UNCACHEABLE = None


def search_options(options: Sequence[object]) -> tuple[list[str], list[str]]:
    """(include directories, pre-included files) named by NVRTC options, in order."""
    dirs: list[str] = []
    pre: list[str] = []
    opts: list[str] = []
    for o in options:            # CuPy style pairs ("-I", "dir") too
        if isinstance(o, (tuple, list)):
            opts.extend(str(x) for x in o)
        else:
            opts.append(o.decode() if isinstance(o, bytes) else str(o))
    i = 0
    while i < len(opts):
        o = opts[i]
        value: str | None = None
        for flag, into in (("-I", dirs), ("--include-path", dirs), ("-include", pre),
                           ("--pre-include", pre)):
            if o == flag and i + 1 < len(opts):
                value = opts[i + 1]
                i += 1
            elif o.startswith(flag + "="):
                value = o[len(flag) + 1:]
            elif flag == "-I" and o.startswith("-I") and len(o) > 2:
                value = o[2:]
            if value is not None:
                into.append(value)
                break
        i += 1
    return [os.path.abspath(d) for d in dirs], pre


def dependency_digest(source: str, filename: str, options: Sequence[object]) -> str | None:
    """Digest of every user header the compile of `source` may read ("" when it includes
    nothing from the user's directories); None (UNCACHEABLE) when that cannot be known
    (a computed `#include MACRO`, or an include graph of more than MAX_FILES files)."""
    dirs, pre = search_options(options)
    if "include" not in source and not pre:
        return ""
    top_dir = os.path.dirname(os.path.abspath(filename))
    h = hashlib.sha256()
    seen: set[str] = set()
    # (text of the including file, its directory)
    work: list[tuple[str, str]] = [(source, top_dir)]
    for name in pre:
        if not _visit(h, seen, [os.path.join(top_dir, name)] + [os.path.join(d, name) for d in dirs],
                      work):
            return UNCACHEABLE
    while work:
        text, here = work.pop()
        for m in _INCLUDE.finditer(text):
            quoted, angled, other = m.groups()
            if other is not None:
                if other.strip().startswith(("//", "/*")) or not other.strip():
                    continue
                return UNCACHEABLE          # #include MACRO: the file is not known here
            name = quoted or angled
            if os.path.isabs(name):
                candidates = [name]
            else:
                candidates = ([os.path.join(here, name)] if quoted else []) + \
                             [os.path.join(d, name) for d in dirs]
            if not _visit(h, seen, candidates, work):
                return UNCACHEABLE
    return h.hexdigest() if seen else ""


def _visit(h: hashlib._Hash, seen: set[str], candidates: list[str],
           work: list[tuple[str, str]]) -> bool:
    for c in candidates:
        c = os.path.normpath(c)
        if c in seen:
            continue
        seen.add(c)
        if len(seen) > MAX_FILES:
            return False
        try:
            with open(c, "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            h.update(f"{c}\0-\1".encode())
            continue
        except OSError:
            h.update(f"{c}\0?\1".encode())
            continue
        h.update(f"{c}\0".encode())
        h.update(hashlib.sha256(data).digest())
        h.update(b"\1")
        work.append((data.decode("utf-8", "replace"), os.path.dirname(c)))
    return True
