"""Run-time specialization of the kernels of `cpuify nvcc` programs.

A program's kernels are specialized at build time for the block shapes its host code
launches them with, where those are constants (nvcc/launch_shapes.py).  Launches whose
shape is only known when the program runs (`k<<<grid, atoi(argv[1])>>>`, a block size
chosen from the device's properties) ran the generic block function.  Now the runtime
(runtime/cudart_rtspec.c) does what the Python API does: once a (kernel, block shape)
without build-time code has spent `CPUIFY_RUNTIME_SPECIALIZE_AFTER_MS` (default 250) of
wall time in the generic code, it starts `python -m cpuify.nvcc.rtspec` in the background
(at a lower priority, one compile at a time), which compiles the kernel for that shape into
a shared object in cpuify's cache; the launches after it finished run that code.  A later
run of the program finds the shared object there and uses it from the shape's first launch.

What the build records per module (`descriptor`): the Python interpreter and the directory
cpuify is imported from, the module's PTX (written to the cache), the pass pipeline, and
the path prefix of the module's shared objects, named by a hash of the PTX, the pipeline
and the toolchain (compiler.toolchain_key).  This process checks that hash again, so a
program built by another cpuify (or for another CPU) never loads code compiled for it.

The specialized object's references to the module's `__constant__`/`__device__` variables,
the runtime's functions (printf, textures, device-side launches) and the C library are
made weak and resolved by the runtime itself when it loads the shared object: the
variables are local symbols of the program and its runtime may be linked statically, so the
dynamic linker could not find them.  The `.meta` file lists the slots to fill (GOT and PLT
entries, data words); a relocation of another kind refuses the kernel once (a `.failed`
file the runtime reads), and its launches keep running the generic code.  Failures of the
compile itself are reported by the runtime on stderr, once per shape.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import traceback
from pathlib import Path

from cpuify import cache
from cpuify.nvcc.device import run_tool, specialize_off

#: Between the pass names of the pipeline on the command line (a pass's options hold commas)
PASS_SEPARATOR = ";"


def module_hash(ptx: str, passes: tuple[str, ...], toolchain: str) -> str:
    h = hashlib.sha256()
    for part in (ptx, PASS_SEPARATOR.join(passes), toolchain):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def descriptor(ptx: str, passes: tuple[str, ...]) -> tuple[str, str, str, str, str] | None:
    """(python, cpuify's import directory, PTX file, shared-object path prefix, passes
    joined by PASS_SEPARATOR) for a module built now, its PTX written to the cache; None when run-time
    specialization is off for this build (CPUIFY_SPECIALIZE=0, CPUIFY_RUNTIME_SPECIALIZE=0,
    no persistent cache)."""
    from cpuify.compiler import toolchain_key
    if specialize_off() or os.environ.get("CPUIFY_RUNTIME_SPECIALIZE", "1") == "0" or \
            not cache.cache_enabled():
        return None
    key = module_hash(ptx, passes, toolchain_key())
    d = cache.cache_dir("rtspec")
    ptx_path = d / f"{key}.ptx"
    if not ptx_path.exists():
        cache.write_private_file(ptx_path, ptx.encode())
    import cpuify
    where = str(Path(cpuify.__file__).resolve().parent.parent)
    return sys.executable, where, str(ptx_path), str(d / key), PASS_SEPARATOR.join(passes)


def _write(path: Path, text: str) -> None:
    cache.write_private_file(path, text.encode())


def _stem(prefix: str, index: int, block: tuple[int, int, int]) -> Path:
    """`<prefix>_k<index>_<x>x<y>x<z>`: the files of one kernel and shape, less their suffix
    (the runtime names them the same way: cudart_rtspec.c entry_path)."""
    return Path(f"{prefix}_k{index}_{block[0]}x{block[1]}x{block[2]}")


def specialize(ptx_path: str, prefix: str, kernel: str, index: int,
               block: tuple[int, int, int], passes: tuple[str, ...]) -> str:
    """Compiles kernel `kernel` (the module's `index`-th) for blocks of `block` into
    `<prefix>_k<index>_<x>x<y>x<z>.so` and writes its `.meta` ("symbol per_thread extra n",
    then n slots: "offset(hex) kind addend symbol"), or a `.failed` file ("refused: why" or
    "error: why"); returns the file written."""
    from cpuify import compiler
    from cpuify.codegen import jit
    from cpuify.codegen.llvm_gen import specialized_symbol
    from cpuify.nvcc.rtlib import c_compiler
    stem = _stem(prefix, index, block)
    failed = stem.with_suffix(".failed")
    ptx = Path(ptx_path).read_text()
    if module_hash(ptx, passes, compiler.toolchain_key()) != Path(prefix).name:
        _write(failed, "refused: the program was built by another version of cpuify or for "
                       "another CPU; rebuild it\n")
        return str(failed)
    spec = compiler.compile_specialized(ptx, kernel, block, passes)
    outside = sorted(jit.undefined_symbols(spec.object_code))
    with cache.temporary_directory(prefix="cpuify-rtspec-") as tmp:
        obj = os.path.join(tmp, "k.o")
        Path(obj).write_bytes(spec.object_code)
        if outside:
            # weak: the dynamic linker leaves their slots 0 instead of refusing the object,
            # and the runtime fills them (module variables, its own functions, libc)
            run_tool(["objcopy", *(f"--weaken-symbol={u}" for u in outside), obj],
                     f"preparing the specialization of kernel '{kernel}'")
        so = os.path.join(tmp, "k.so")
        run_tool([c_compiler(), "-shared", "-nostdlib", "-Wl,-z,now", "-Wl,-z,norelro", obj, "-o", so],
                 f"linking the specialization of kernel '{kernel}'")
        slots, odd = symbol_slots(so)
        if odd:
            _write(failed, f"refused: its shared object needs a relocation the runtime does not "
                           f"fill ({odd})\n")
            return str(failed)
        cache.write_private_file(stem.with_suffix(".so"), Path(so).read_bytes())     # (dlopen reads it)
    symbol = specialized_symbol(kernel, block, ())
    meta = stem.with_suffix(".meta")
    lines = [f"{symbol} {spec.scratch.per_thread()} {spec.scratch.scratch_bytes(0)} {len(slots)}"]
    lines += [f"{off:x} {kind} {addend} {name}" for off, kind, addend, name in slots]
    _write(meta, "\n".join(lines) + "\n")
    return str(meta)


#: The dynamic relocations against a symbol the runtime fills in a loaded specialization:
#: a GOT entry and a PLT slot hold the symbol's address, a data word its address + addend.
SLOT_KINDS = {"R_X86_64_GLOB_DAT": 0, "R_X86_64_JUMP_SLOT": 0, "R_X86_64_64": 1}


def symbol_slots(so: str) -> tuple[list[tuple[int, int, int, str]], str]:
    """The shared object's dynamic relocations against symbols (its undefined ones, all
    weak): (offset, 0 for the address or 1 for address + addend, addend, symbol) each, and
    the first relocation of another kind with a symbol ("" when none)."""
    out = subprocess.run(["readelf", "-rW", so], capture_output=True, text=True, check=True).stdout
    slots: list[tuple[int, int, int, str]] = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 5 or not parts[2].startswith("R_X86_64_") or \
                not all(c in "0123456789abcdef" for c in parts[0]):
            continue        # a header, or a relocation without a symbol (R_X86_64_RELATIVE)
        if parts[2] not in SLOT_KINDS:
            return slots, f"{parts[2]} against {parts[4]}"
        addend = 0
        if len(parts) >= 7 and parts[-2] in ("+", "-"):
            addend = int(parts[-1], 16) * (-1 if parts[-2] == "-" else 1)
        slots.append((int(parts[0], 16), SLOT_KINDS[parts[2]], addend, parts[4]))
    return slots, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cpuify.nvcc.rtspec",
                                 description="compile one kernel of a cpuify nvcc program for "
                                             "one block shape (started by the program's runtime)")
    ap.add_argument("--ptx", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--block", required=True)
    ap.add_argument("--passes", default="")
    args = ap.parse_args(argv)
    block = tuple(int(x) for x in args.block.split(","))
    passes = tuple(p for p in args.passes.split(PASS_SEPARATOR) if p)
    try:
        os.nice(5)          # the program's own threads come first
    except OSError:
        pass
    try:
        specialize(args.ptx, args.prefix, args.kernel, args.index, block, passes)  # type: ignore[arg-type]
    except BaseException as exc:  # noqa: BLE001 - reported to the runtime through the file
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        try:
            _write(_stem(args.prefix, args.index, block).with_suffix(".failed"),  # type: ignore[arg-type]
                   f"error: {why}\n")
        except OSError:
            pass
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
