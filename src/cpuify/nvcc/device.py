"""Device code of whole programs: PTX -> a relocatable native object that registers itself
with the CUDA runtime on the CPU (runtime/cudart.c), PTX linking for separate compilation
(-rdc), and the device code that `-dc` objects carry.

A device object is the kernel object of cpuify's pipeline (compiler.compile_ptx, cached)
linked (`ld -r`) with a generated C file holding the module's registration table
(runtime/cpuify_cudart.h); the kernel object's symbols are then made local so that
several translation units may hold the same kernel (a template instantiated in two files)
or the same variable name."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from cpuify import cache, compiler
from cpuify.codegen.llvm_gen import dynamic_smem_offset, specialized_symbol
from cpuify.compiler import (
    CompiledModule,
    SpecializedObject,
    compile_ptx_cached,
    compile_specialized,
)
from cpuify.errors import CpuifyError, UnsupportedError
from cpuify.nvcc.rtlib import RUNTIME_DIR, c_compiler

RDC_SECTION = ".cpuify_rdc"        # device code (PTX) of a -dc object
DLINK_SECTION = ".cpuify_dlink"    # module ids an explicit -dlink object already registers
_RDC_MAGIC = b"CPUIFY-RDC 2\n"


def run_tool(cmd: list[str], what: str) -> None:
    proc = cache.run_tool(cmd)       # (ended with cpuify: no process outlives its temp dir)
    if proc.returncode != 0:
        raise CpuifyError(f"{what} failed:\n  {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")


# ------------------------------------------------------------------------------------
# fat binary identity


def fatbin_bytes(fatbin_c: str) -> bytes:
    """The fat binary nvcc embeds, from its generated `.fatbin.c` (the `.quad` lines)."""
    m = re.search(r"fatbinData:\\n\"(.*?)\);", fatbin_c, re.DOTALL)
    if m:
        quads = re.findall(r"0x([0-9a-fA-F]+)", m.group(1))
        return b"".join(struct.pack("<Q", int(q, 16)) for q in quads)
    # older nvcc: `static const unsigned long long fatbinData[] = {0x...ull, ...};`
    m = re.search(r"fatbinData\[\]\s*=\s*\{(.*?)\}", fatbin_c, re.DOTALL)
    if not m:
        raise CpuifyError("cannot find the fat binary in nvcc's .fatbin.c output")
    quads = re.findall(r"0x([0-9a-fA-F]+)", m.group(1))
    return b"".join(struct.pack("<Q", int(q, 16)) for q in quads)


def fatbin_hash(data: bytes) -> int:
    """FNV-1a 64 of the fat binary, as runtime/cudart.c computes it at registration."""
    magic, _version, hsize, fsize = struct.unpack_from("<IHHQ", data, 0)
    if magic != 0xBA55ED50:
        raise CpuifyError("nvcc's fat binary has an unknown format")
    h = 1469598103934665603
    for b in data[:hsize + fsize]:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


# ------------------------------------------------------------------------------------
# registration table


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


Variants = dict[str, list[tuple[tuple[int, int, int], SpecializedObject]]]


def registration_source(compiled: CompiledModule | None, refused: dict[str, str], *,
                        source: str, fatbin_hash_value: int, linked_ids: list[str] = (),
                        variants: Variants | None = None, arch: int = 0,
                        rtspec: tuple[str, str, str, str, str] | None = None) -> str:
    """C source of the module descriptor and its registration (a constructor, or one
    `__cudaRegisterLinkedBinary_<id>` function per module id for -rdc).  `variants`: per
    kernel, the block functions specialized for one block shape; `arch`: the PTX target
    (sm_XX), which the runtime reports as the device's compute capability; `rtspec`: what
    the runtime needs to specialize the kernels for block shapes met at run time
    (nvcc/rtspec.descriptor)."""
    out = ['#include "cpuify_cudart.h"', ""]
    if arch:
        out += ["__attribute__((constructor(101))) static void cpuify_note_arch(void) {",
                f"    cpuify_cudart_note_arch({arch});", "}", ""]
    kernels: list[str] = []
    printf = compiled is not None and "vprintf" in compiled.ptx
    names = list(compiled.kernels) if compiled else []
    for i, name in enumerate(names):
        info = compiled.kernels[name]  # type: ignore[union-attr]
        offs = ", ".join(str(p[2]) for p in info.params) or "0"
        sizes = ", ".join(str(p[3]) for p in info.params) or "0"
        out.append(f"extern int32_t cpuify_k{i}(const void *, const cpuify_dims *, uint32_t, uint32_t, "
                   f"uint32_t, void *, void *) __asm__({_c_string(info.symbol)});")
        prologue = "0"
        if info.prologue_symbol:
            out.append(f"extern int32_t cpuify_p{i}(const void *, const cpuify_dims *, uint32_t, "
                       f"uint32_t, uint32_t, void *, void *) __asm__({_c_string(info.prologue_symbol)});")
            prologue = f"cpuify_p{i}"
        out.append(f"static const uint32_t cpuify_k{i}_off[] = {{{offs}}};")
        out.append(f"static const uint32_t cpuify_k{i}_size[] = {{{sizes}}};")
        req = list(info.directives.get("reqntid", ())) + [0, 0, 0]
        mx = list(info.directives.get("maxntid", ())) + [0, 0, 0]
        sc = info.scratch
        extra = sc.scratch_bytes(0)
        # CPUIFY_KERNEL_PRINTF | CPUIFY_KERNEL_SPINS | CPUIFY_KERNEL_ENVREG (cpuify_cudart.h)
        flags = (1 if printf else 0) | (2 if info.spin_waits else 0) | \
            (4 if info.reads_envreg else 0)
        shapes = (variants or {}).get(name, [])
        var_list = "0"
        for j, (block, spec) in enumerate(shapes):
            out.append(f"extern int32_t cpuify_k{i}_s{j}(const void *, const cpuify_dims *, uint32_t, "
                       f"uint32_t, uint32_t, void *, void *) "
                       f"__asm__({_c_string(specialized_symbol(name, block, spec.noalias_params))});")
            if spec.noalias_params:
                # the launch-time variant: used when the pointers at these parameter
                # offsets point into allocations no pointer at the other offsets reaches
                others = sorted(set(spec.pointer_bases) | set(spec.noalias_params))
                out.append(f"static const uint32_t cpuify_k{i}_s{j}_noalias[] = "
                           f"{{{', '.join(map(str, spec.noalias_params))}}};")
                out.append(f"static const uint32_t cpuify_k{i}_s{j}_bases[] = "
                           f"{{{', '.join(map(str, others))}}};")
        if shapes:
            rows = ", ".join(
                f"{{{{{b[0]}, {b[1]}, {b[2]}}}, cpuify_k{i}_s{j}, {spec.scratch.per_thread()}, "
                f"{spec.scratch.scratch_bytes(0)}, "
                + (f"{len(spec.noalias_params)}, cpuify_k{i}_s{j}_noalias, "
                   f"{len(set(spec.pointer_bases) | set(spec.noalias_params))}, cpuify_k{i}_s{j}_bases}}"
                   if spec.noalias_params else "0, 0, 0, 0}")
                for j, (b, spec) in enumerate(shapes))
            out.append(f"static const cpuify_kernel_variant cpuify_k{i}_var[] = {{{rows}}};")
            var_list = f"cpuify_k{i}_var"
        kernels.append(
            f"{{{_c_string(name)}, cpuify_k{i}, 0, {len(info.params)}, cpuify_k{i}_off, cpuify_k{i}_size, "
            f"{info.param_size}, {dynamic_smem_offset(info.param_size)}, {info.shared_static}, "
            f"{sc.per_thread()}, {extra}, {{{req[0]}, {req[1]}, {req[2]}}}, {{{mx[0]}, {mx[1]}, {mx[2]}}}, "
            f"{sc.local_bytes}, {flags}, {prologue}, {info.prologue_scratch}, "
            f"{info.launch_bytes}, {len(shapes)}, {var_list}}}")
    for name, why in refused.items():
        kernels.append(f"{{{_c_string(name)}, 0, {_c_string(why)}, 0, 0, 0, 0, 0, 0, 0, 0, "
                       "{0, 0, 0}, {0, 0, 0}, 0, 0, 0, 0, 0, 0, 0}")
    variables: list[str] = []
    if compiled is not None:
        for j, (name, g) in enumerate(compiled.globals.items()):
            out.append(f"extern char cpuify_v{j}[] __asm__({_c_string(name)});")
            variables.append(f"{{{_c_string(name)}, cpuify_v{j}, {g.size}, {1 if g.space == 'const' else 0}}}")
    out.append("")
    out.append(f"static const cpuify_kernel_desc kernels[] = {{{', '.join(kernels) or '{0}'}}};")
    out.append(f"static const cpuify_var_desc vars[] = {{{', '.join(variables) or '{0}'}}};")
    out.append(f"static const cpuify_module_desc module = {{CPUIFY_CUDART_ABI, {fatbin_hash_value}ull, "
               f"{_c_string(source)}, {len(kernels)}, kernels, {len(variables)}, vars}};")
    if linked_ids:
        for mid in linked_ids:
            out.append(f"void __cudaRegisterLinkedBinary{mid}(void (*cb)(void **), void *fatbin, "
                       "void *module_id, void (*dummy)(void *)) {")
            out.append("    (void)fatbin; (void)module_id; (void)dummy;")
            out.append("    cpuify_cudart_register_linked(cb, &module);")
            out.append("}")
    else:
        out.append("__attribute__((constructor(101))) static void cpuify_register(void) {")
        out.append("    cpuify_cudart_register_module(&module);")
        out.append("}")
    if rtspec is not None and compiled is not None:
        out.append("__attribute__((constructor(102))) static void cpuify_note_rtspec(void) {")
        out.append(f"    cpuify_cudart_note_rtspec(&module, {', '.join(map(_c_string, rtspec))});")
        out.append("}")
    return "\n".join(out) + "\n"


def entry_names(ptx: str) -> list[str]:
    """The kernels (`.entry` names) of a PTX module, in order."""
    return re.findall(r"\.entry\s+([\w$]+)", ptx)


def ptx_target(ptx: str) -> int:
    """The module's `.target sm_XX` as XX (0 when absent)."""
    m = re.search(r"^\s*\.target\s+sm_(\d+)", ptx, re.MULTILINE)
    return int(m.group(1)) if m else 0


def compile_device(ptx: str, source: str, llvm_level: str = "O3"
                   ) -> tuple[CompiledModule | None, dict[str, str]]:
    """Runs cpuify's pipeline on a module's PTX (cached; `llvm_level`: codegen.jit's
    LLVM_LEVELS).  Returns the compiled module (None when no kernel of it can run) and, per
    refused kernel, why."""
    try:
        compiled = compile_ptx_cached(ptx, llvm_level=llvm_level)
    except UnsupportedError as exc:
        refused = getattr(exc, "refused", None) or {name: str(exc) for name in entry_names(ptx)}
        return None, dict(refused)
    return compiled, dict(compiled.refused)


def build_jobs(threads: int | None = None) -> int:
    """How many processes compile one translation unit's device code: CPUIFY_JOBS, else
    `threads` (nvcc's `-t N`/`--threads N`; 0: the CPUs this process may run on), else the
    CPUs this process may run on (at most MAX_BUILD_JOBS); 1 compiles in this process.
    CPUIFY_JOBS comes first: it is the setting of whoever runs the build on this machine
    (`CPUIFY_JOBS=1 make -j8`), `-t` the one written into the project's build files."""
    text = os.environ.get("CPUIFY_JOBS", "").strip()
    if text:
        try:
            return max(1, int(text))
        except ValueError:
            raise CpuifyError(f"CPUIFY_JOBS={text!r}: expected a number of processes") from None
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    if threads is not None:
        return max(1, cpus if threads == 0 else threads)
    return max(1, min(cpus, MAX_BUILD_JOBS))


#: The most worker processes a device build starts by default (CPUIFY_JOBS and nvcc's -t
#: override).
MAX_BUILD_JOBS = 8

#: A device build forks workers only from this many compiles on (the generic module counts
#: one, each block-shape specialization one) and for PTX of at least this many lines: below,
#: the forks and the transfer of their results cost about what they save (PolyBench 2mm:
#: 3 compiles of 263 lines, 3.4 s of CPU serial, 3.7 s in two workers).
PARALLEL_FROM_COMPILES = 3
PARALLEL_FROM_PTX_LINES = 1000


# The PTX the forked workers of compile_device_parallel compile (set before they start, so
# it is not sent to them with each task)
_worker_ptx = ""


def _compile_shape(ptx: str, name: str, block: tuple[int, int, int], passes: tuple[str, ...]
                   ) -> tuple[list[SpecializedObject], list[str]]:
    """Kernel `name` compiled for blocks of `block` and, where a barrier would go for pointers
    that overlap no other (the runtime checks each launch's allocations), its launch-time
    pointer variant; with a note for a variant that failed to compile (the code for the
    shape then serves).  Raises when the shape itself fails."""
    spec = compile_specialized(ptx, name, block, passes)
    objects, notes = [spec], []
    if spec.noalias_candidates and os.environ.get("CPUIFY_NOALIAS_VARIANTS", "1") != "0":
        try:
            objects.append(compile_specialized(ptx, name, block, passes, spec.noalias_candidates))
        except Exception as e:  # noqa: BLE001 - the code for the shape serves
            notes.append(f"cpuify nvcc: note: kernel '{name}': compiling it for blocks of "
                         f"{block} and non-overlapping pointers failed ({type(e).__name__}: "
                         f"{e}); its launches use the code for the shape")
    return objects, notes


def _specialize_task(name: str, block: tuple[int, int, int], passes: tuple[str, ...]
                     ) -> tuple[list[SpecializedObject], list[str]] | str:
    """A worker's compile of one shape (_compile_shape), or why it failed (the generic
    block function then serves the shape)."""
    try:
        return _compile_shape(_worker_ptx, name, block, passes)
    except Exception as e:  # noqa: BLE001 - reported by the parent as a note
        return f"{type(e).__name__}: {e}"


def _generic_task(source: str, llvm_level: str) -> tuple[CompiledModule | None, dict[str, str]] | None:
    """A worker's compile of the generic module; None when it raised (the parent then
    compiles it itself, so the error reaches the user as the serial build gives it)."""
    try:
        return compile_device(_worker_ptx, source, llvm_level)
    except Exception:  # noqa: BLE001
        return None


def generic_level(ptx: str, shapes: dict[str, list[tuple[int, int, int]]] | None,
                  covered: set[str] | frozenset[str]) -> str:
    """The LLVM level (codegen.jit.LLVM_LEVELS) of a module's generic block functions:
    "fallback" when every kernel of the module has all its launches `covered` by the block
    shapes it is specialized for (launch_shapes.covered_entries), so that the generic code
    runs only for a launch the build could not foresee; "O3" otherwise, for a module that
    launches kernels from device code (their launches run the generic code), with
    CPUIFY_SPECIALIZE=0, or with CPUIFY_GENERIC_LEVEL=O3."""
    choice = os.environ.get("CPUIFY_GENERIC_LEVEL", "auto").strip() or "auto"
    if choice not in ("auto", "O3"):
        raise CpuifyError(f"CPUIFY_GENERIC_LEVEL={choice!r}: expected 'auto' (the default) or 'O3'")
    entries = entry_names(ptx)
    if choice == "O3" or specialize_off() or not entries or not shapes:
        return "O3"
    if "cudaLaunchDevice" in ptx:
        return "O3"        # kernels launched from device code run the generic code
    return "fallback" if all(e in covered and shapes.get(e) for e in entries) else "O3"


def _all_specialized(variants: Variants, shapes: dict[str, list[tuple[int, int, int]]] | None,
                     compiled: CompiledModule | None) -> bool:
    """Whether every kernel of `compiled` got code for each of its `shapes` (a failed
    specialization leaves its launches to the generic code)."""
    if compiled is None:
        return True
    for name in compiled.kernels:
        have = {block for block, _ in variants.get(name, [])}
        if not set((shapes or {}).get(name, ())) <= have:
            return False
    return True


def compile_device_parallel(ptx: str, source: str,
                            shapes: dict[str, list[tuple[int, int, int]]] | None,
                            warn=print,  # type: ignore[assignment]
                            jobs: int | None = None,
                            covered: set[str] | frozenset[str] = frozenset(),
                            ) -> tuple[CompiledModule | None, dict[str, str], Variants]:
    """compile_device and specialize together: the generic module and each (kernel, block
    shape) are independent compiles, run in `jobs` forked worker processes (build_jobs())
    when there are enough of them, so a translation unit with many kernels and launch shapes
    builds in a fraction of the wall time (the CPU time is the same).  Results are the ones
    the serial path gives: the same cached entries, byte for byte.  `covered`: the kernels
    whose every launch uses one of their `shapes` (launch_shapes.covered_entries); when that
    is all of them, the generic module is built at the fallback LLVM level (generic_level),
    and again at O3 if a specialization then fails."""
    compiled, refused, variants = _compile_device_parallel(ptx, source, shapes, warn, jobs,
                                                           generic_level(ptx, shapes, covered))
    if compiled is not None and compiled.llvm_level != "O3" and \
            not _all_specialized(variants, shapes, compiled):
        # a launch the build foresaw runs the generic code: it must be the full one
        compiled, refused = compile_device(ptx, source)
    return compiled, refused, variants


def _compile_device_parallel(ptx: str, source: str,
                             shapes: dict[str, list[tuple[int, int, int]]] | None,
                             warn, jobs: int | None,  # type: ignore[no-untyped-def]
                             level: str) -> tuple[CompiledModule | None, dict[str, str], Variants]:
    jobs = build_jobs() if jobs is None else jobs
    wanted = [] if specialize_off() else [(n, b) for n, bs in (shapes or {}).items() for b in bs]
    if jobs <= 1 or 1 + len(wanted) < PARALLEL_FROM_COMPILES or \
            ptx.count("\n") < PARALLEL_FROM_PTX_LINES:
        compiled, refused = compile_device(ptx, source, level)
        variants = specialize(compiled, shapes, warn) if compiled is not None and shapes else {}
        return compiled, refused, variants
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    # parsed once here: the workers inherit the text and its parse (compiler._parsed_ptx)
    global _worker_ptx
    _worker_ptx = ptx
    compiler._parsed_ptx(ptx)
    passes = tuple(compiler.pipeline_options()[0].pipeline())
    pool = ProcessPoolExecutor(max_workers=min(jobs, 1 + len(wanted)),
                               mp_context=multiprocessing.get_context("fork"))
    try:
        generic = pool.submit(_generic_task, source, level)      # the longest: first
        specs = [(n, b, pool.submit(_specialize_task, n, b, passes)) for n, b in wanted]
        try:
            got_generic = generic.result()
        except BrokenProcessPool:     # a worker died (killed, out of memory): build it here
            got_generic = None
        compiled, refused = got_generic if got_generic is not None else \
            compile_device(ptx, source, level)
        variants: Variants = {}
        for name, block, fut in specs:
            try:
                got = fut.result()
            except BrokenProcessPool as e:
                got = f"its worker process died: {e}"
            if compiled is None or name not in compiled.kernels:
                continue              # a refused kernel: reported once, by the generic build
            if isinstance(got, str):
                warn(f"cpuify nvcc: note: kernel '{name}': compiling it for blocks of {block} "
                     f"failed ({got}); its launches use the generic code")
                continue
            objects, notes = got
            for note in notes:
                warn(note)
            variants.setdefault(name, []).extend((block, o) for o in objects)
    finally:
        # (an error or an interrupt: the compiles not started are dropped)
        pool.shutdown(wait=True, cancel_futures=True)
        _worker_ptx = ""
    return compiled, refused, variants


def source_location(ptx: str, line: int, sources: str = "") -> tuple[str, int] | None:
    """The CUDA source file and line of PTX line `line` (1-based), from the `.loc`/`.file`
    directives nvcc writes with -lineinfo; None without them.  In code inlined from another
    file (a toolkit header) the call site in one of `sources` (the translation units) is
    preferred."""
    lines = ptx.splitlines()
    files = dict(re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', ptx, re.MULTILINE))
    wanted = {os.path.basename(s) for s in sources.split()}
    for text in reversed(lines[:max(0, min(line, len(lines)))]):
        m = re.match(r"\s*\.loc\s+(\d+)\s+(\d+)", text)
        if m:
            spots = [(m.group(1), m.group(2))]
            spots += re.findall(r"inlined_at\s+(\d+)\s+(\d+)", text)
            found = [(files[f], int(n)) for f, n in spots if f in files and int(n) > 0]
            for path, n in found:
                if os.path.basename(path) in wanted:
                    return path, n
            return found[0] if found else None
        if re.match(r"\s*\.(entry|func)\b", text):
            return None
    return None


def _shown_path(path: str) -> str:
    """`path` relative to the working directory when it lies below it."""
    rel = os.path.relpath(path) if os.path.isabs(path) else path
    return path if rel.startswith("..") else rel


def demangle(name: str) -> str:
    if not name.startswith("_Z") or not shutil.which("c++filt"):
        return name
    proc = subprocess.run(["c++filt", name], capture_output=True, text=True)
    out = proc.stdout.strip()
    return out if proc.returncode == 0 and out else name


def refusal_report(ptx: str, refused: dict[str, str], source: str, severity: str = "error") -> str:
    """One diagnostic per refused kernel: the .cu file and line (when the PTX has line
    info), the kernel, what it uses that cpuify cannot run, and the PTX line."""
    out = []
    for name, why in refused.items():
        first, _, rest = why.partition("\n")
        m = re.match(r"(?:kernel '[^']*', )?PTX line (\d+): (.*)", first)
        ptx_line = int(m.group(1)) if m else None
        what = m.group(2) if m else first
        loc = source_location(ptx, ptx_line, source) if ptx_line else None
        if loc:
            given = [w for w in source.split() if os.path.realpath(w) == os.path.realpath(loc[0])]
            where = f"{given[0] if given else _shown_path(loc[0])}:{loc[1]}"
        else:
            where = source
        text = f"{where}: {severity}: kernel '{demangle(name)}' cannot run on the CPU: {what}"
        if ptx_line:
            text += f"\n    (PTX line {ptx_line}" + (f": {rest.strip()}" if rest.strip() else "") + ")"
        out.append(text)
    return "\n".join(out)


def defer_refused(flags: set[str] | frozenset[str] = frozenset()) -> bool:
    """Whether kernels cpuify cannot run build anyway and fail when launched
    (--cpuify-defer-refused or CPUIFY_DEFER_REFUSED=1) instead of failing the build."""
    return "--cpuify-defer-refused" in flags or os.environ.get("CPUIFY_DEFER_REFUSED", "0") not in ("", "0")


class RefusedKernels(CpuifyError):
    """Kernels of a translation unit use something cpuify cannot run."""


def specialize_off() -> bool:
    """CPUIFY_SPECIALIZE=0: no block-shape specializations at build time."""
    return os.environ.get("CPUIFY_SPECIALIZE", "1") == "0"


def specialize(compiled: CompiledModule, shapes: dict[str, list[tuple[int, int, int]]],
               warn=print) -> Variants:  # type: ignore[assignment]
    """The kernels of `compiled` compiled for the block shapes the program launches them
    with (launch_shapes.kernel_shapes); a shape that fails to compile keeps the generic code
    (the generic block function is always correct).  CPUIFY_SPECIALIZE=0 turns it off."""
    if specialize_off():
        return {}
    out: Variants = {}
    for name, blocks in shapes.items():
        if name not in compiled.kernels:
            continue
        for block in blocks:
            try:
                objects, notes = _compile_shape(compiled.ptx, name, block, compiled.passes)
            except Exception as e:  # noqa: BLE001 - any failure: the generic code serves
                warn(f"cpuify nvcc: note: kernel '{name}': compiling it for blocks of {block} "
                     f"failed ({type(e).__name__}: {e}); its launches use the generic code")
                continue
            for note in notes:
                warn(note)
            out.setdefault(name, []).extend((block, o) for o in objects)
    return out


def build_device_object(ptx: str, out: str, tmp: str, *, source: str, fatbin_hash_value: int = 0,
                        linked_ids: list[str] = (), warn=print,  # type: ignore[assignment]
                        shapes: dict[str, list[tuple[int, int, int]]] | None = None,
                        defer: bool = False, distributed: bool = False,
                        jobs: int | None = None,
                        covered: set[str] | frozenset[str] = frozenset()) -> None:
    """PTX -> relocatable object `out` with the kernels and their registration; `shapes`:
    block shapes to specialize kernels for (PTX entry name -> shapes).  A kernel cpuify
    cannot run raises RefusedKernels (naming the kernel, the construct and the line); with
    `defer` it is registered as refused instead and its launches fail.  `distributed`: the
    object also carries the kernels' distribution records (nvcc/distinfo.py).  `jobs`: the
    processes the compiles run in (build_jobs() when None).  `covered`: the kernels all of
    whose launches use one of their `shapes` (see compile_device_parallel)."""
    compiled, refused, variants = compile_device_parallel(ptx, source, shapes, warn, jobs, covered)
    _build_device_object(compiled, refused, ptx, out, tmp, source=source,
                         fatbin_hash_value=fatbin_hash_value, linked_ids=linked_ids, warn=warn,
                         variants=variants, defer=defer)
    if distributed and compiled is not None:
        from cpuify.nvcc import distinfo
        blob = os.path.join(tmp, "cpuify_dist.bin")
        Path(blob).write_bytes(distinfo.encode(distinfo.kernel_records(compiled, refused), source))
        run_tool(["objcopy", f"--add-section={distinfo.DIST_SECTION}={blob}",
                  f"--set-section-flags={distinfo.DIST_SECTION}=noload,readonly", out],
                 "embedding the kernels' access maps")


def _build_device_object(compiled: CompiledModule | None, refused: dict[str, str], ptx: str, out: str,
                         tmp: str, *, source: str, fatbin_hash_value: int, linked_ids: list[str],
                         warn, variants: Variants,  # type: ignore[no-untyped-def]
                         defer: bool) -> None:
    if refused:
        if not defer:
            raise RefusedKernels(refusal_report(ptx, refused, source) +
                                 "\n(--cpuify-defer-refused or CPUIFY_DEFER_REFUSED=1 builds the "
                                 "program anyway; launching such a kernel then fails)")
        warn(refusal_report(ptx, refused, source, "warning") +
             "\n(built anyway: launching it fails with cudaErrorNotSupported)")
    reg_c = os.path.join(tmp, "cpuify_reg.c")
    rtspec_info = None
    if compiled is not None:
        from cpuify.nvcc import rtspec
        rtspec_info = rtspec.descriptor(ptx, tuple(compiler.pipeline_options()[0].pipeline()))
    Path(reg_c).write_text(registration_source(compiled, refused, source=source,
                                               fatbin_hash_value=fatbin_hash_value,
                                               linked_ids=list(linked_ids), variants=variants,
                                               arch=ptx_target(ptx), rtspec=rtspec_info))
    reg_o = reg_c[:-2] + ".o"
    run_tool([c_compiler(), "-O1", "-fPIC", "-std=c11", f"-I{RUNTIME_DIR}", "-c", reg_c, "-o", reg_o],
             "compiling the kernel registration table")
    if compiled is None:
        os.replace(reg_o, out)
        return
    kern_o = os.path.join(tmp, "cpuify_kernels.o")
    Path(kern_o).write_bytes(compiled.object_code)
    objects = [kern_o]
    for shaped in variants.values():
        for _, spec in shaped:
            objects.append(os.path.join(tmp, f"cpuify_spec_{len(objects)}.o"))
            Path(objects[-1]).write_bytes(spec.object_code)
    proc = subprocess.run(["nm", "--defined-only", "-g", *objects], capture_output=True, text=True)
    local = sorted({line.split()[-1] for line in proc.stdout.splitlines()
                    if line.strip() and not line.endswith(":")})
    run_tool(["ld", "-r", *objects, reg_o, "-o", out], "linking the device object")
    if local:
        lst = os.path.join(tmp, "cpuify_local.txt")
        Path(lst).write_text("\n".join(local) + "\n")
        run_tool(["objcopy", f"--localize-symbols={lst}", out], "localizing device symbols")


# ------------------------------------------------------------------------------------
# device code carried by -dc objects


@dataclass
class RdcModule:
    module_id: str
    source: str
    ptx: str
    # kernel name as launched (launch_shapes.base_name) -> constant block shapes its host
    # code launches it with
    shapes: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)


_RDC_MAGIC_V1 = b"CPUIFY-RDC 1\n"      # records without launch shapes (older objects)


def _shapes_line(shapes: dict[str, list[tuple[int, int, int]]]) -> str:
    return ";".join(f"{name}=" + ",".join(f"{a}x{b}x{c}" for a, b, c in dims)
                    for name, dims in sorted(shapes.items()))


def _parse_shapes_line(line: str) -> dict[str, list[tuple[int, int, int]]]:
    out: dict[str, list[tuple[int, int, int]]] = {}
    for item in filter(None, line.split(";")):
        name, _, dims = item.partition("=")
        try:
            out[name] = [tuple(int(x) for x in d.split("x")) for d in dims.split(",") if d]  # type: ignore[misc]
        except ValueError:
            continue
    return out


def rdc_record(module_id: str, source: str, ptx: str,
               shapes: dict[str, list[tuple[int, int, int]]] | None = None) -> bytes:
    body = ptx.encode()
    return (_RDC_MAGIC + f"{module_id}\n{source}\n{_shapes_line(shapes or {})}\n{len(body)}\n".encode()
            + body)


def parse_rdc_records(data: bytes) -> list[RdcModule]:
    mods: list[RdcModule] = []
    pos = 0
    while True:
        v2, v1 = data.find(_RDC_MAGIC, pos), data.find(_RDC_MAGIC_V1, pos)
        if v2 < 0 and v1 < 0:
            return mods
        has_shapes = v2 >= 0 and (v1 < 0 or v2 < v1)
        pos = (v2 + len(_RDC_MAGIC)) if has_shapes else (v1 + len(_RDC_MAGIC_V1))
        mid_end = data.index(b"\n", pos)
        src_end = data.index(b"\n", mid_end + 1)
        shapes: dict[str, list[tuple[int, int, int]]] = {}
        fields_end = src_end
        if has_shapes:
            fields_end = data.index(b"\n", src_end + 1)
            shapes = _parse_shapes_line(data[src_end + 1:fields_end].decode(errors="replace"))
        len_end = data.index(b"\n", fields_end + 1)
        n = int(data[fields_end + 1:len_end])
        mods.append(RdcModule(data[pos:mid_end].decode(), data[mid_end + 1:src_end].decode(),
                              data[len_end + 1:len_end + 1 + n].decode(), shapes))
        pos = len_end + 1 + n


def elf_sections(data: bytes) -> dict[str, bytes]:
    """Named sections of an ELF64 little-endian relocatable object (empty dict otherwise)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shstrndx >= shnum:
        return {}
    headers = []
    for i in range(shnum):
        name, typ, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        headers.append((name, typ, off, size))
    _, _, stroff, strsize = headers[shstrndx]
    strtab = data[stroff:stroff + strsize]
    out: dict[str, bytes] = {}
    for name, typ, off, size in headers:
        end = strtab.find(b"\0", name)
        sname = strtab[name:end].decode(errors="replace")
        out[sname] = b"" if typ == 8 else data[off:off + size]   # SHT_NOBITS
    return out


def archive_members(data: bytes) -> list[bytes]:
    """Member contents of a Unix `ar` archive."""
    if not data.startswith(b"!<arch>\n"):
        return []
    members: list[bytes] = []
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].strip()
        size = int(header[48:58].strip() or 0)
        body = data[pos + 60:pos + 60 + size]
        if name.startswith(b"#1/"):            # BSD long name stored before the data
            n = int(name[3:])
            body = body[n:]
        if name not in (b"/", b"//", b"/SYM64/", b"__.SYMDEF", b"__.SYMDEF SORTED"):
            members.append(body)
        pos += 60 + size + (size & 1)
    return members


def device_code_of(path: str) -> tuple[list[RdcModule], set[str]]:
    """(-dc device modules, module ids already device-linked) found in an object or archive."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return [], set()
    objs = archive_members(data) if data.startswith(b"!<arch>\n") else [data]
    mods: list[RdcModule] = []
    linked: set[str] = set()
    for obj in objs:
        secs = elf_sections(obj)
        if RDC_SECTION in secs:
            mods += parse_rdc_records(secs[RDC_SECTION])
        if DLINK_SECTION in secs:
            linked |= set(secs[DLINK_SECTION].decode(errors="replace").split())
    return mods, linked


# ------------------------------------------------------------------------------------
# PTX linking (separate compilation)

_IDENT = r"[A-Za-z_$%][\w$]*"


@dataclass
class _Item:
    text: str
    kind: str          # "var" | "func" | "entry" | "other"
    name: str
    linkage: str       # "", "visible", "extern", "weak", "common"
    has_body: bool


def _split_items(ptx: str) -> tuple[list[str], list[_Item]]:
    """Header directives (.version/.target/.address_size) and top-level statements."""
    # drop line comments (they may hold braces); keep the text otherwise intact
    text = re.sub(r"//[^\n]*", "", ptx)
    header: list[str] = []
    items: list[_Item] = []
    pos, n = 0, len(text)
    while pos < n:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n:
            break
        m = re.match(r"\.(version|target|address_size)\b[^\n]*", text[pos:])
        if m:
            header.append(m.group(0).strip())
            pos += m.end()
            continue
        m = re.match(r"\.file\b[^\n]*", text[pos:])
        if m:        # line info: no ';' ends it (link_ptx renumbers and re-emits the files)
            pos += m.end()
            continue
        start, depth = pos, 0
        while pos < n:
            c = text[pos]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    pos += 1
                    # an initializer `= {...};` ends at the ';', a body at the '}'
                    rest = text[pos:pos + 64].lstrip()
                    if rest.startswith(";"):
                        pos = text.index(";", pos) + 1
                    break
            elif c == ";" and depth == 0:
                pos += 1
                break
            pos += 1
        stmt = text[start:pos].strip()
        items.append(_classify(stmt))
    return header, items


def _classify(stmt: str) -> _Item:
    toks = stmt.split()
    linkage = ""
    i = 0
    while i < len(toks) and toks[i] in (".visible", ".extern", ".weak", ".common"):
        linkage = toks[i][1:]
        i += 1
    head = toks[i] if i < len(toks) else ""
    if head in (".func", ".entry"):
        rest = stmt.split(head, 1)[1].lstrip()
        if rest.startswith("("):      # return parameters
            depth = 0
            for k, c in enumerate(rest):
                depth += c == "("
                depth -= c == ")"
                if depth == 0:
                    rest = rest[k + 1:].lstrip()
                    break
        m = re.match(_IDENT, rest)
        return _Item(stmt, head[1:], m.group(0) if m else "", linkage, "{" in stmt)
    if head in (".global", ".const", ".shared", ".local"):
        decl = re.split(r"[=;\[]", stmt, 1)[0]
        names = re.findall(_IDENT, decl)
        return _Item(stmt, "var", names[-1] if names else "", linkage, False)
    return _Item(stmt, "other", "", linkage, False)


def link_ptx(modules: list[RdcModule]) -> str:
    """One PTX module from several (-rdc): extern declarations resolved against the other
    modules' definitions, weak (template) definitions kept once, file-local names that
    clash renamed."""
    parsed = [_split_items(m.ptx) for m in modules]
    defined: dict[str, int] = {}      # visible/weak name -> module index of its definition
    local_names: dict[str, list[int]] = {}
    for mi, (_, items) in enumerate(parsed):
        for it in items:
            if not it.name:
                continue
            is_def = it.has_body if it.kind in ("func", "entry") else it.linkage != "extern"
            if not is_def:
                continue
            if it.linkage in ("visible", "weak", "common"):
                if it.linkage == "visible" and it.name in defined and \
                        defined[it.name] != mi and not it.kind == "entry":
                    raise CpuifyError(f"device link: '{it.name}' is defined in both "
                                      f"{modules[defined[it.name]].source} and {modules[mi].source}")
                defined.setdefault(it.name, mi)
            else:
                local_names.setdefault(it.name, []).append(mi)
    # rename file-local names defined in more than one module (or shadowing a visible one)
    renames: list[dict[str, str]] = [{} for _ in modules]
    for name, mis in local_names.items():
        if len(mis) > 1 or name in defined:
            for mi in mis[1:] if name not in defined else mis:
                renames[mi][name] = f"{name}_cpuify_m{mi}"
    versions = []
    target = ".target sm_75"
    addr = ".address_size 64"
    for header, _ in parsed:
        for h in header:
            if h.startswith(".version"):
                versions.append(h)
            elif h.startswith(".target") and target == ".target sm_75":
                target = h
            elif h.startswith(".address_size"):
                addr = h

    def vkey(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", v))

    version = max(versions, key=vkey) if versions else ".version 7.5"
    var_out: list[str] = []
    func_out: list[str] = []
    seen_defs: set[str] = set()
    seen_decls: set[str] = set()
    # line info (-lineinfo): each module's `.file` numbers renumbered into one table
    file_out: list[str] = []
    file_maps: list[dict[str, str]] = []
    for m in modules:
        fmap: dict[str, str] = {}
        for num, path in re.findall(r'^\s*\.file\s+(\d+)\s+("[^"]*")', m.ptx, re.MULTILINE):
            fmap[num] = str(len(file_out) + 1)
            file_out.append(f".file\t{fmap[num]} {path}")
        file_maps.append(fmap)

    def renumber_loc(text: str, fmap: dict[str, str]) -> str:
        if not fmap or ".loc" not in text:
            return text
        return re.sub(r"(\.loc\s+|inlined_at\s+)(\d+)",
                      lambda m: m.group(1) + fmap.get(m.group(2), m.group(2)), text)

    for mi, (_, items) in enumerate(parsed):
        ren = renames[mi]
        pattern = re.compile(r"(?<![\w$%])(" + "|".join(map(re.escape, ren)) + r")(?![\w$])") if ren else None
        for it in items:
            text = pattern.sub(lambda m: ren[m.group(1)], it.text) if pattern else it.text
            text = renumber_loc(text, file_maps[mi])
            name = ren.get(it.name, it.name)
            is_def = it.has_body if it.kind in ("func", "entry") else (it.kind == "var" and it.linkage != "extern")
            if it.kind == "other":
                continue
            if is_def:
                if it.linkage in ("weak", "common", "visible") and name in seen_defs:
                    continue        # a template instantiated in several files
                seen_defs.add(name)
                (var_out if it.kind == "var" else func_out).append(text)
            else:
                # a declaration: needed only when nothing defines the name
                if it.name in defined or name in seen_decls:
                    continue
                seen_decls.add(name)
                (var_out if it.kind == "var" else func_out).append(text)
    return "\n".join([version, target, addr, ""] + var_out + [""] + func_out + [""] + file_out) + "\n"
