"""Legacy CUDA spellings that nvcc 13's front end rejects but early nvcc accepted, rewritten
in copies of the files that hold them (the legacy CUDA layer; `--cpuify-no-legacy` or
CPUIFY_LEGACY=0 turns it off).

Two spellings so far:
- `__global__` combined with `__device__` or `__host__` (CUDA 1.x/2.x code, e.g.
  `__global__ __device__ void render(...)`; nvcc 13: "illegal combination of memory
  qualifiers").  Early nvcc compiled such a function as a kernel, and so does the rewrite:
  the extra qualifier is dropped.  Found by scanning the files.
- functions without an execution space called from device code (Parboil's fft defines
  `inline float2 operator+(float2, float2)` and calls it in its kernels; nvcc 13: "calling a
  __host__ function ... from a __global__ function is not allowed").  Found from nvcc's own
  errors (`host_functions_called_from_device`), after which the build is tried once more with
  those functions' definitions in the program's files marked `__host__ __device__`.

The files of the program's own directories that a translation unit reads (`project_files`:
the source and the headers it includes from next to itself or from its `-I` directories, never
the system's or the toolkit's) are scanned; those that hold the spelling are copied, rewritten,
into a directory of the build's own, the source at the top with its includes' relative paths,
each starting with `#line 1 "<the original file>"` so that diagnostics, `__FILE__` and the
PTX's line table name the original.  The copy of the source is compiled in its place, with
`-iquote` of the original directories so that its quoted includes of files that were not
copied find the originals, as they would have next to the source."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)', re.M)

#: `__global__` next to `__device__`/`__host__` (either order, any whitespace between)
_GLOBAL_WITH = re.compile(r"\b__global__(\s+)__(?:device|host)__\b|\b__(?:device|host)__(\s+)(?=__global__\b)")


def project_files(src: str, include_dirs: list[str], *, limit: int = 200) -> Iterator[tuple[str, str]]:
    """(absolute path, text) of `src` and of the files it includes from its own directories:
    quoted includes looked up next to the including file and in `include_dirs`, angle-bracket
    ones in `include_dirs` only (never the system's or the toolkit's headers); at most `limit`
    files, each once.  Unreadable files are skipped."""
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
        yield path, text
        for quoted, angled in _INCLUDE.findall(text):
            name = quoted or angled
            for d in ([os.path.dirname(path)] if quoted else []) + include_dirs:
                cand = os.path.join(d, name)
                if os.path.isfile(cand):
                    todo.append(os.path.abspath(cand))
                    break


#: nvcc's error for a call of a function without an execution space from device code
_HOST_CALL = re.compile(r'calling a __host__ function\("([^"]*)"\) from a '
                        r'(?:__global__|__device__) function\("[^"]*"\) is not allowed')


def host_functions_called_from_device(diagnostics: str) -> set[str]:
    """The names (`operator +`, `lerp`) of the host functions nvcc's `diagnostics` say device
    code calls."""
    names = set()
    for signature in _HOST_CALL.findall(diagnostics):
        head = signature.split("(", 1)[0] if not signature.startswith("operator") else \
            re.match(r"operator\s*(?:\(\)|[^(]*)", signature).group(0)      # type: ignore[union-attr]
        head = re.sub(r"<.*", "", head).strip()       # a template's arguments
        names.add(head.rsplit("::", 1)[-1].strip())
    return {n for n in names if n}


#: nvcc's error for device code calling cudaDeviceSynchronize(), which CUDA 12 removed there
_DEVICE_SYNC = re.compile(r'calling a __host__ function\("cudaDeviceSynchronize[^"]*"\) from a '
                          r'(?:__global__|__device__) function\("([^"]*)"\)')


def removed_api_note(diagnostics: str) -> str:
    """A note to print after nvcc's errors when they come from an API that CUDA 12 removed
    from device code and cpuify cannot provide (empty otherwise)."""
    m = _DEVICE_SYNC.search(diagnostics)
    if not m:
        return ""
    return (f"cpuify nvcc: note: '{m.group(1)}' calls cudaDeviceSynchronize() in device code "
            "(a parent grid waiting for the child grids it launched: dynamic parallelism of "
            "CUDA 11 and before). CUDA 12 removed it, and cpuify does not provide it: cpuify runs "
            "child grids after their parent grid, so a parent cannot wait for them. Wait on the "
            "host instead (cudaDeviceSynchronize() after the parent's launch), or launch the work "
            "that needs the children's results as a tail launch (into cudaStreamTailLaunch).\n")


def _definition_head(name: str) -> re.Pattern[str]:
    """A definition (or declaration) of function `name` at the start of a line, with no
    execution space: group `lead` ends where `__host__ __device__` goes."""
    if name.startswith("operator"):
        spelled = r"operator\s*" + re.escape(name[len("operator"):].strip())
    else:
        spelled = re.escape(name)
    return re.compile(
        r"^(?P<lead>[ \t]*(?:template\s*<[^;{}]*>\s*)?)"
        r"(?P<spec>(?:(?!__(?:device|host|global)__)[\w:<>,*&\s])*?)"
        rf"\b{spelled}\s*\(", re.M)


def mark_device(text: str, names: set[str]) -> str:
    """`text` with `__host__ __device__` put before the definitions of the functions `names`
    that have no execution space (every overload of each name)."""
    for name in sorted(names):
        pattern = _definition_head(name)

        def mark(m: re.Match[str]) -> str:
            spec = m.group("spec")
            if not spec.strip() or re.search(r"\b(?:return|new|delete|else|case)\b|[=;]", spec):
                return m.group(0)      # a call or an expression, not a definition
            return m.group("lead") + "__host__ __device__ " + m.group(0)[len(m.group("lead")):]
        text = pattern.sub(mark, text)
    return text


def rewrite(text: str, device_functions: set[str] = frozenset()) -> str | None:  # type: ignore[assignment]
    """`text` with the legacy spellings rewritten (and the functions `device_functions`
    marked `__host__ __device__`), None when nothing changed."""
    out = mark_device(text, device_functions) if device_functions else text
    while True:      # (`__host__ __device__ __global__`: one qualifier per round)
        step = _GLOBAL_WITH.sub(_drop_qualifier, out)
        if step == out:
            return out if out != text else None
        out = step


def _drop_qualifier(m: re.Match[str]) -> str:
    """The match without its `__device__`/`__host__`, keeping its line breaks (diagnostics
    and the PTX's line table keep the original line numbers)."""
    space = m.group(1) if m.group(1) is not None else m.group(2)
    return ("__global__" if m.group(1) is not None else "") + "\n" * space.count("\n")


@dataclass
class Rewritten:
    """What compiling the rewritten copies takes: the file to compile in place of the source,
    options to add, the `-I` options to put a mirror directory in front of, and each copy's
    original (to name it in dependency files)."""
    source: str
    options: list[str] = field(default_factory=list)
    mirrors: dict[str, str] = field(default_factory=dict)
    originals: dict[str, str] = field(default_factory=dict)

    def include_options(self, host_opts: list[str]) -> list[str]:
        """`host_opts` with `-I<mirror>` in front of each `-I<dir>` whose files were copied:
        an angle-bracket include (or a quoted one not next to its includer) finds the copy
        where it found the original."""
        out: list[str] = []
        for opt in host_opts:
            if opt in self.mirrors:
                out.append(f"-I{self.mirrors[opt]}")
            out.append(opt)
        return out


def prepare(src: str, host_opts: list[str], workdir: str,
            device_functions: set[str] = frozenset()) -> Rewritten | None:  # type: ignore[assignment]
    """Rewritten copies of `src` and of its project files that need them, under `workdir`;
    None when none needs it (the source is compiled as it is).  A copy goes where its
    includer's copy looks first (next to the source's copy, by its path relative to the
    source) and into a mirror of each `-I` directory it is under."""
    include_opts = [o for o in host_opts if o.startswith("-I") and len(o) > 2]
    include_dirs = [o[2:] for o in include_opts]
    main = os.path.abspath(src)
    root = os.path.dirname(main)
    changed = {path: new for path, text in project_files(src, include_dirs)
               if (new := rewrite(text, device_functions)) is not None}
    if not changed:
        return None
    top = os.path.join(workdir, "legacy-src-2" if device_functions else "legacy-src")
    result = Rewritten(os.path.join(top, "src", os.path.basename(main)))

    def put(copy: str, original: str) -> None:
        os.makedirs(os.path.dirname(copy), exist_ok=True)
        text = changed.get(original)
        if text is None:
            text = Path(original).read_text(errors="replace")
        Path(copy).write_text(f'#line 1 "{_c_string(original)}"\n' + text)
        result.originals[copy] = original

    put(result.source, main)
    for path in sorted(p for p in changed if p != main):
        rel = os.path.relpath(path, root)
        if not rel.startswith(os.pardir):
            put(os.path.join(top, "src", rel), path)
        for k, (opt, d) in enumerate(zip(include_opts, include_dirs)):
            rel = os.path.relpath(path, os.path.abspath(d))
            if not rel.startswith(os.pardir):
                result.mirrors.setdefault(opt, os.path.join(top, f"I{k}"))
                put(os.path.join(result.mirrors[opt], rel), path)
    for d in sorted({os.path.dirname(p) for p in result.originals.values()}):
        result.options += ["-Xcompiler", "-iquote", "-Xcompiler", d]
    return result


def _c_string(path: str) -> str:
    return path.replace("\\", "\\\\").replace('"', '\\"')


def restore_names(text: str, rewritten: Rewritten) -> str:
    """`text` (a dependency file, a message) with each copy's path replaced by its original."""
    for copy, original in rewritten.originals.items():
        text = text.replace(copy, original)
    return text
