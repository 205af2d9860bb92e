"""`cpuify` command line: build and run CUDA programs, look at what the compiler does.

    cpuify nvcc  [nvcc options] files a drop-in for nvcc (make NVCC="cpuify nvcc")
    cpuify run   app.cu [nvcc options] [-- args]   build (cached) and run a program
    cpuify cache info|clear           the compile cache: where, what, how big; empty it
    cpuify cuda-home                  a CUDA-toolkit-shaped directory (bin/nvcc, include/,
                                      lib64/libcudart.so ...) for build systems:
                                      make CUDA_PATH=$(cpuify cuda-home),
                                      cmake -DCMAKE_CUDA_COMPILER=$(cpuify cuda-home)/bin/nvcc
    cpuify ptx   kernel.cu            PTX from NVRTC
    cpuify ir    kernel.cu|.ptx|.mlir the parallel IR (MLIR generic syntax) of each kernel
                                      after the passes (--mlir: one self-contained module)
    cpuify llvm  kernel.cu|.ptx|.mlir optimized LLVM IR (--raw: before optimization)
    cpuify explain kernel.cu|.ptx|.mlir  what each pass changed, sync points, values kept
                                      per thread / recomputed
                                      (--block 16,16: decisions of the specialized code)
    cpuify explain --partition kernel.cu|.ptx  per pointer parameter, the bytes each block
                                      reads/writes/updates (access maps for splitting a
                                      launch over MPI ranks) and a split dimension
                                      (--grid 64,64 --block 16,16 --scalar n=1024: for
                                      that launch)
    ir, llvm and explain take --passes=a,b{option=value}, --disable-pass, --print-ir-after,
    --verify-each, --warp-lockstep (docs/usage.md, "Passes", "Warp semantics")
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import warnings
from pathlib import Path

from cpuify import cache
from cpuify.errors import CacheWarning, CpuifyError


def _ptx_of(path: str, options: list[str]) -> str:
    text = Path(path).read_text()
    if path.endswith((".ptx", ".mlir")):
        return text
    from cpuify.errors import CompileError
    from cpuify.frontend.nvrtc import compile_to_ptx
    try:
        return compile_to_ptx(text, filename=Path(path).name, options=options).ptx
    except CompileError as first:
        # a whole program (host code, C++ standard headers): NVIDIA's nvcc, which
        # preprocesses with the host compiler, gives its kernels' PTX
        from cpuify.frontend import nvcc_ptx
        try:
            return nvcc_ptx.compile_to_ptx(text, filename=Path(path).name, options=options).ptx
        except CompileError:
            raise first from None


def _lift_all(ptx: str, only: str | None, pipeline=None, block=None,  # type: ignore[no-untyped-def]
              block_run=(1, 1)):
    """(module, lifted kernel, what each pass changed) for each kernel, after the pass
    pipeline (none when `pipeline` is None); `block_run`: the run of blocks a launch asks
    fuse-block-runs for."""
    from cpuify.compiler import lift_and_optimize, optimize_kernel
    from cpuify.frontend.ptx_parser import parse_ptx
    from cpuify.transforms.pass_manager import PipelineOptions
    if ptx.lstrip().startswith('"'):
        # an MLIR file (cpuify ir --mlir): the IR itself, its module-scope variables with it
        from cpuify.ir.parser import parse_module
        from cpuify.ir.structure import ModuleView
        view = ModuleView.from_ops(parse_module(ptx))
        for kernel in view.kernels:
            if only is None or kernel.name == only:
                optimized, result = optimize_kernel(
                    kernel.op, pipeline or PipelineOptions(passes=()), block, (), block_run)
                yield view, optimized, result.counts
        return
    module = parse_ptx(ptx)
    for entry in module.entries:
        if only is None or entry.name == only:
            lifted, result = lift_and_optimize(module, entry, pipeline or PipelineOptions(passes=()),
                                               block, (), block_run)
            yield module, lifted, result.counts


def main(argv: list[str] | None = None) -> int:
    """The command line.  SIGTERM ends it with status 143 after removing its temporary
    files; tools it runs (nvcc, the host compiler) keep theirs in a private TMPDIR that
    goes with them."""
    try:
        previous = signal.signal(signal.SIGTERM, cache.on_sigterm)
    except ValueError:             # not the main thread (an embedding program)
        previous = None
    saved_show = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if issubclass(category, CacheWarning):
            text = str(message)
            print(text if text.startswith("cpuify") else f"cpuify: warning: {text}",
                  file=sys.stderr)
        else:
            saved_show(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        with cache.private_tmpdir():
            return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        print("cpuify: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:          # `cpuify ... | head`: the reader is gone
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        warnings.showwarning = saved_show
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str]) -> int:
    # nvcc's and the program's options are not ours to parse: hand them over untouched
    if argv and argv[0] == "nvcc":
        from cpuify.nvcc.driver import nvcc_main
        return nvcc_main(argv[1:])
    if argv and argv[0] == "cache":
        return _cache_command(argv[1:])
    if argv and argv[0] == "run" and len(argv) > 1 and argv[1] not in ("-h", "--help"):
        from cpuify.nvcc.driver import run_main
        rest = argv[1:]
        prog_args = rest[rest.index("--") + 1:] if "--" in rest else []
        build = rest[:rest.index("--")] if "--" in rest else rest
        sources = [a for a in build if a.endswith(".cu")]
        if len(sources) != 1:
            print("cpuify run: error: give exactly one .cu file (cpuify run app.cu [nvcc options] "
                  "[-- args])", file=sys.stderr)
            return 2
        return run_main(sources[0], prog_args, [a for a in build if a != sources[0]])
    parser = argparse.ArgumentParser(prog="cpuify", description="CUDA on multi-core CPUs: build "
                                     "and run CUDA programs, inspect how cpuify compiles a kernel.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("nvcc", help="nvcc-compatible compiler driver: builds executables/objects that "
                   "run on the CPU (cpuify nvcc --help)", add_help=False)
    p_run = sub.add_parser("run", help="build (cached) and run a CUDA program: "
                           "cpuify run app.cu [nvcc options] [-- program arguments]")
    p_run.add_argument("file", help="the program's .cu source")
    p_run.add_argument("options", nargs="*", help="nvcc options, then -- and the program's arguments")
    sub.add_parser("cache", help="the compile cache: `cpuify cache info` (location, entries, "
                   "size, limit) and `cpuify cache clear` (cpuify cache --help)", add_help=False)
    sub.add_parser("cuda-home", help="print a directory laid out like a CUDA toolkit (bin/nvcc, "
                   "include/, lib64/ with cpuify's libcudart.so, libcudart_static.a, libcuda.so), "
                   "made on first use: make CUDA_PATH=$(cpuify cuda-home), PATH=$(cpuify "
                   "cuda-home)/bin:$PATH make, cmake -DCMAKE_CUDA_COMPILER=$(cpuify "
                   "cuda-home)/bin/nvcc")
    sub.add_parser("cuda-sdk", help="print a directory laid out like NVIDIA's GPU Computing SDK "
                   "of 2008-2012 (C/common/common.mk, C/common/inc/cutil.h, C/lib/libcutil), "
                   "part of cuda-home, for SDK-era Makefiles: make "
                   "NVIDIA_COMPUTE_SDK_LOCATION=$(cpuify cuda-sdk) "
                   "CUDA_INSTALL_PATH=$(cpuify cuda-home)")
    for name, help_ in (("ptx", "print the PTX NVRTC produces"),
                        ("ir", "print the parallel IR of each kernel"),
                        ("llvm", "print the LLVM IR (optimized unless --raw)"),
                        ("explain", "show sync points and how values cross them")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("file", help="a .cu CUDA source, a .ptx file, or an .mlir file (cpuify ir --mlir)")
        p.add_argument("-D", dest="defines", action="append", default=[], help="macro for NVRTC")
        p.add_argument("-I", dest="includes", action="append", default=[], help="include dir")
        p.add_argument("--kernel", help="only this kernel (mangled or extern \"C\" name)")
        if name in ("llvm", "explain"):
            p.add_argument("--block", type=_block_shape, metavar="X[,Y[,Z]]",
                           help="the code specialized for this block shape (what a kernel "
                                "launched twice with it runs)")
        if name == "explain":
            p.add_argument("--partition", action="store_true",
                           help="the access maps of each kernel (per pointer parameter: the "
                                "bytes a block reads, writes, updates atomically) and the grid "
                                "dimension a launch would be split along over MPI ranks")
            p.add_argument("--grid", type=_grid_shape, metavar="X[,Y[,Z]]",
                           help="with --partition and --block: the launch to choose the split "
                                "dimension for; with --block alone: the launch whose run of "
                                "blocks fused into one (fuse-block-runs) explain shows")
            p.add_argument("--scalar", action="append", default=[], metavar="NAME=VALUE",
                           help="with --partition --grid: an integer kernel parameter's value "
                                "(PTX parameter name, as --partition lists them)")
        if name == "llvm":
            p.add_argument("--raw", action="store_true", help="before LLVM optimization")
        if name == "ir":
            p.add_argument("--mlir", action="store_true",
                           help="one MLIR file: the kernels inside a builtin.module (what "
                                "MLIR tools and xDSL read, dialects upir/ptx unregistered)")
        if name != "ptx":
            _add_pipeline_flags(p)
    args = parser.parse_args(argv)
    if args.command in ("cuda-home", "cuda-sdk"):
        from cpuify.nvcc.cuda_home import stable_cuda_home
        try:
            home = stable_cuda_home()
            print(home / "sdk" if args.command == "cuda-sdk" else home)
        except (CpuifyError, OSError) as exc:
            print(f"cpuify {args.command}: error: {exc}", file=sys.stderr)
            return 1
        return 0
    options = [f"-D{d}" for d in args.defines] + [f"-I{i}" for i in args.includes]
    try:
        pipeline = _pipeline_of(args) if args.command != "ptx" else None
        ptx = _ptx_of(args.file, options)
        if args.command == "ptx":
            sys.stdout.write(ptx)
        elif args.command == "ir":
            from cpuify.ir.printer import print_module, print_ops
            lifted_all = list(_lift_all(ptx, args.kernel, pipeline))
            kernels = [lifted.op for _, lifted, _ in lifted_all]
            if args.mlir:
                # with the module-scope variables: the file compiles on its own
                from cpuify.ir.structure import variable_op
                ptx_module = lifted_all[0][0] if lifted_all else None
                variables = [variable_op(v, ptx_module.function_addresses())
                             for v in ptx_module.variables
                             if v.space in ("global", "const", "shared")] if ptx_module else []
                sys.stdout.write(print_module(variables + kernels))
            else:
                sys.stdout.write(print_ops(kernels))
        elif args.command == "llvm":
            from cpuify.codegen import jit
            from cpuify.codegen.llvm_gen import ModuleCodegen
            gen = None
            for module, lifted, _ in _lift_all(ptx, args.kernel, pipeline, args.block):
                if gen is None:
                    gen = ModuleCodegen(module, *jit.triple_and_layout())
                gen.add_kernel(lifted, args.block)
            if gen is not None:
                text = gen.llvm_text()
                sys.stdout.write(text if args.raw else str(jit.optimize(text)))
        elif args.partition:
            _explain_partition(ptx, args.kernel, args.grid, args.block, args.scalar)
        else:
            _explain(ptx, args.kernel, args.block, pipeline, args.grid)
    except CpuifyError as exc:
        print(f"cpuify: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"cpuify: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _cache_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="cpuify cache", description="The on-disk cache of compiled kernels, programs "
        "(cpuify run), runtime libraries and the toolkit directories of `cpuify cuda-home`: "
        "$CPUIFY_CACHE_DIR (default ~/.cache/cpuify), limited to $CPUIFY_CACHE_MAX_BYTES "
        "(default 2G; least recently used entries are evicted, old toolkit directories whole, "
        "never the one used last).  CPUIFY_NO_CACHE=1 turns it off.")
    parser.add_argument("action", choices=("info", "clear"),
                        help="info: location, state, entries, size and limit; "
                             "clear: remove every entry")
    args = parser.parse_args(argv)
    if args.action == "info":
        i = cache.info()
        print(f"location: {i['location']}")
        print(f"state:    {i['state']}")
        print(f"entries:  {i['entries']}")
        for kind, n in sorted(i["kinds"].items()):
            print(f"  {kind}: {n} ({_size_text(i['kind_bytes'][kind])})")
        print(f"size:     {_size_text(i['total_bytes'])}")
        print(f"limit:    {_size_text(i['limit_bytes'])} (CPUIFY_CACHE_MAX_BYTES)")
        return 0
    try:
        freed = cache.clear()
    except (ValueError, OSError) as exc:
        print(f"cpuify cache: error: {exc}", file=sys.stderr)
        return 1
    print(f"removed {_size_text(freed)} from {cache.location()}")
    return 0


def _add_pipeline_flags(p: argparse.ArgumentParser) -> None:
    from cpuify.transforms.pass_manager import default_pipeline
    names = ", ".join(default_pipeline())
    p.add_argument("--passes", metavar="A,B,...",
                   help=f"run these passes, in this order (default: {names}; "
                        "--passes= runs none: the IR as lifted)")
    p.add_argument("--disable-pass", action="append", default=[], metavar="NAME",
                   help="leave this pass out of the pipeline (repeatable)")
    p.add_argument("--print-ir-after", action="append", default=[], metavar="NAME|all",
                   help="print the IR to stderr after this pass (or after each)")
    p.add_argument("--verify-each", action="store_true", help="verify the IR after each pass")
    p.add_argument("--warp-lockstep", action="store_true",
                   help="lockstep steps at every shared/generic access of every kernel (legacy "
                        "warp-synchronous code without volatile; also CPUIFY_WARP_LOCKSTEP=1)")


def _pipeline_of(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from cpuify.compiler import pipeline_options
    opts = []
    if args.passes is not None:
        opts.append(f"--passes={args.passes}")
    opts += [f"--disable-pass={n}" for n in args.disable_pass]
    opts += [f"--print-ir-after={n}" for n in args.print_ir_after]
    if args.verify_each:
        opts.append("--verify-each")
    if args.warp_lockstep:
        opts.append("--warp-lockstep")
    return pipeline_options(opts)[0]


def _block_shape(text: str) -> tuple[int, int, int]:
    try:
        dims = [int(x) for x in text.split(",")]
    except ValueError:
        dims = []
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims) or dims[0] * (dims[1:2] or [1])[0] * \
            (dims[2:3] or [1])[0] > 1024:
        raise argparse.ArgumentTypeError(f"'{text}' is no block shape: X[,Y[,Z]], "
                                         "at most 1024 threads")
    return (dims + [1, 1])[0], (dims + [1, 1])[1], (dims + [1, 1])[2]


def _grid_shape(text: str) -> tuple[int, int, int]:
    try:
        dims = [int(x) for x in text.split(",")]
    except ValueError:
        dims = []
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"'{text}' is no grid shape: X[,Y[,Z]]")
    return (dims + [1, 1])[0], (dims + [1, 1])[1], (dims + [1, 1])[2]


def _explain_partition(ptx: str, only: str | None, grid: tuple[int, int, int] | None,
                       block: tuple[int, int, int] | None, scalar_args: list[str]) -> None:
    """`cpuify explain --partition`: each kernel's access maps and a split dimension."""
    from cpuify.analysis.access_maps import kernel_access
    from cpuify.frontend.ptx_parser import parse_ptx
    scalars: dict[str, int] = {}
    for text in scalar_args:
        name, eq, value = text.partition("=")
        try:
            scalars[name.strip()] = int(value, 0)
        except ValueError:
            eq = ""
        if not eq:
            raise CpuifyError(f"--scalar '{text}': expected NAME=INTEGER")
    if block is not None and grid is None:
        raise CpuifyError("--block with --partition needs --grid too (the launch to split)")
    if ptx.lstrip().startswith('"'):
        raise CpuifyError("--partition reads CUDA or PTX (the access maps are built from the "
                          "IR as lifted, before the passes), not an .mlir file")
    names = [e.name for e in parse_ptx(ptx).entries if only is None or e.name == only]
    if only is not None and not names:
        raise CpuifyError(f"no kernel '{only}' in the file")
    for name in names:
        ka = kernel_access(ptx, name)
        print(ka.describe())
        if not ka.distributable:
            print("  split: none (runs whole on one rank)")
            continue
        if grid is not None:
            block3 = block or (1, 1, 1)
            missing = [n for n, _ in ka.scalar_params if n not in scalars]
            if missing:
                print(f"  split: give --scalar for {', '.join(missing)} to choose one for "
                      f"grid {grid}")
                continue
            dims = ka.disjoint_write_dims(scalars, grid, block3)
            if dims:
                best = max(dims, key=lambda d: (grid["xyz".index(d)], "xyz".index(d)))
                print(f"  split: {best} (grid {grid}, block {block3}: blocks differing in "
                      f"{', '.join(dims)} write disjoint bytes; {best} has the most blocks)")
            else:
                print(f"  split: none for grid {grid}, block {block3} (blocks of every "
                      "dimension may write the same bytes)")
            continue
        d = ka.heuristic_split()
        if d is None:
            print("  split: none found from the maps alone (writes do not depend on one "
                  "block index; try --grid/--block/--scalar)")
        else:
            print(f"  split: {d} (every write's index depends on blockIdx.{d}; "
                  "--grid/--block/--scalar check it for a launch)")


def _explain(ptx: str, only: str | None, block: tuple[int, int, int] | None = None,
             pipeline=None, grid: tuple[int, int, int] | None = None) -> None:  # type: ignore[no-untyped-def]
    from cpuify.api.block_runs import choose_block_run, run_grid
    from cpuify.codegen.llvm_gen import KernelCodegen, ModuleCodegen
    from cpuify.ir.structure import launch_prologue
    from cpuify.transforms.pass_manager import DESCRIPTIONS
    from cpuify.transforms.structured_cf import structure_summary
    # the run of blocks the Python API asks for when it launches `grid` (fuse-block-runs)
    asked = choose_block_run(block, grid) if block is not None and grid is not None else (1, 1)
    for module, lifted, counts in _lift_all(ptx, only, pipeline, block, asked):
        # (raise-structured-cf's if/while/for: read before code generation lowers them)
        structure = structure_summary(lifted.op)
        # the sync points code generation plans, after the pass pipeline
        kc = KernelCodegen(ModuleCodegen(module), lifted, block)
        region = kc.region
        nops = sum(len(b.ops) for b in region.blocks)
        print(f"kernel {lifted.name}: {len(region.blocks)} blocks, {nops} ops, "
              f"{len(lifted.params)} params ({lifted.param_size} bytes)")
        print("  passes: " + (", ".join(f"{name} {n}" for name, n in counts.items()) or "none"))
        for name, n in counts.items():
            if n:
                print(f"  {name}: {n} {DESCRIPTIONS[name]}")
        for line in structure + _loop_order_notes(lifted.op):
            print("  " + line)
        if asked == (1, 1) and lifted.op.attributes.get("block_runs_possible"):
            print("  blocks may run fused, a run of them as one block (fuse-block-runs: "
                  "--grid shows the run a launch of that grid asks for)")
        if asked != (1, 1):
            fused = lifted.op.attributes.get("block_run")
            if fused:
                runs = run_grid(grid, (fused[0], fused[1]))  # type: ignore[arg-type]
                print(f"  blocks fused for the grid {grid}: runs of {fused[0]} x {fused[1]} "
                      f"blocks as one block of {kc.block_dims[0]} x {kc.block_dims[1]} x "
                      f"{kc.block_dims[2]} threads, {runs[0]} x {runs[1]} x {runs[2]} runs")
            else:
                why = lifted.op.attributes.get("block_run_refused") or "fuse-block-runs is off"
                print(f"  blocks not fused (runs of {asked[0]} x {asked[1]} asked for): {why}")
        _explain_noalias(module, lifted, counts, block, pipeline)
        if any(v.name.startswith("__cpuify_hoisted_") for v in lifted.shared_vars):
            print("  block-invariant prefix run by thread 0 of each block, its values handed "
                  "to the others in shared memory behind a barrier")
        prologue = launch_prologue(lifted.op)
        if prologue is not None:
            nblocks = len(prologue.regions[0].blocks)
            print(f"  launch prologue: {nblocks} blocks of invariant code run once per launch, "
                  f"{lifted.op.attributes.get('launch_bytes', 0)} bytes of values handed to the grid")
        if not kc.syncs:
            print("  no sync points: one thread loop (flat collapsing)")
        else:
            # a uniform value's slot is an array too: each thread stores its own element (a
            # vector store), the next segment reads one copy
            pad = kc.slot_bytes - kc.kept_slot_bytes - kc.uniform_slot_bytes
            print(f"  {kc.slot_bytes} bytes of slots per thread for the values kept across sync "
                  f"points: {kc.kept_slot_bytes} for values kept per thread, "
                  f"{kc.uniform_slot_bytes} for uniform values (one copy per block is read, "
                  "each thread stores its own)" + (f", {pad} of alignment" if pad else ""))
        if kc.prefix_runs:
            print("  once whole warps have exited and the live threads are the block's first "
                  "ones, the segments after sync points run them as one loop (no state checks; "
                  "static shuffles read their buffers)")
        for sp in kc.syncs:
            if sp.op.name == "upir.barrier":
                what = "soft barrier" if sp.op.attributes.get("soft") else "barrier"
            elif sp.op.name == "upir.spin_wait":
                what = "yield point (a spin-wait loop's back edge: the thread lets the others run)"
            else:
                what = sp.op.attributes.get("kind", "barrier")
                if sp.index in kc.static_shuffles:
                    what += f" (static: read from buffer {kc.static_shuffles[sp.index][3]}, no exchange)"
            kept = [v for v in sp.live if v not in kc.uniform]
            one = [v for v in sp.live if v in kc.uniform]
            print(f"  sync {sp.index}: {what} at PTX line {sp.op.attributes.get('line')}: "
                  f"{len(kept)} value(s) kept per thread, {len(one)} uniform (one copy per block), "
                  f"{len(sp.remat)} recomputed, {len(sp.derived)} induction variable(s)")
        for r in range(len(kc.syncs) + 1):
            notes = _segment_notes(kc, r)
            if notes:
                start = "the kernel's start" if r == 0 else f"sync {r}"
                print(f"  segment from {start}: " + "; ".join(notes))
        print("  " + _vectorization_text(module, lifted, block))


def _loop_order_notes(kernel) -> list[str]:  # type: ignore[no-untyped-def]
    """The loop order interchange-uniform-loops chose for each block-uniform loop, and why."""
    from cpuify.transforms.interchange import LOOP_ACCESSES, LOOP_ORDER, PER_THREAD
    from cpuify.transforms.reroll import REROLLED
    from cpuify.transforms.sum_split import SUM_SPLIT, TERMS
    notes = []
    for op in kernel.walk():
        if op.attributes.get(REROLLED):
            notes.append(f"loop at PTX line {op.attributes.get('line')}: re-rolled by reroll-loops "
                         "(nvcc's unrolled copies and remainder loop of a step-1 loop over memory "
                         "contiguous within each thread: one loop, the same iterations in order)")
        if op.attributes.get(SUM_SPLIT) == TERMS:
            notes.append(f"loop at PTX line {op.attributes.get('line')}: split by split-in-order-sums "
                         "(an in-order float sum of values it stores, contiguous within a thread): "
                         "the elementwise work stays in each thread, its own loop innermost; the "
                         "sum reads the stored terms back (each thread adds its own terms in "
                         "order), when a run-time check finds the threads' stores apart (else a "
                         "loop without the stores recomputes them)")
        if op.name == "upir.in_order_sum":
            notes.append(f"sum at PTX line {op.attributes.get('line')}: read back by one "
                         "upir.in_order_sum per thread between soft barriers (vectorized across "
                         "threads: each thread's terms loaded as a row, 16 rows transposed in "
                         "registers, added in order)")
        order = op.attributes.get(LOOP_ORDER)
        if order is None:
            continue
        why = op.attributes.get(LOOP_ACCESSES, "")
        if order == PER_THREAD:
            what = ("kept in each thread, its own loop innermost (contiguous within a thread, "
                    "strided across threads; min/max reductions only)")
        elif "in-order" in why:
            what = ("interchanged, the thread loop innermost (a float sum carried: its "
                    "additions stay in order, so only the threads can be vector lanes)")
        elif "strided" not in why and "not analysed" not in why:
            what = ("interchanged, the thread loop innermost (a column per thread: consecutive "
                    "across threads, a cache line per iteration in each thread)")
        else:
            what = "interchanged, the thread loop innermost"
        notes.append(f"loop at PTX line {op.attributes.get('line')}: {what}; accesses: {why}")
    return notes


def _explain_noalias(module, lifted, counts, block, pipeline) -> None:  # type: ignore[no-untyped-def]
    """The launch-time pointer specialization of a kernel: which pointer parameters'
    non-overlap would remove barriers, and how many (the variant a launch runs when its
    arrays show it, built with the kernel's `noalias_params`)."""
    from cpuify.compiler import BARRIER_PASSES, lift_and_optimize
    candidates = [int(x) for x in lifted.op.attributes.get("noalias_candidates", ())]
    if not candidates or block is None or not hasattr(module, "functions"):
        return
    from cpuify.transforms.pass_manager import PipelineOptions
    _, variant = lift_and_optimize(module, module.functions[lifted.name],
                                   pipeline or PipelineOptions(passes=()), block, candidates)
    gain = sum(variant.counts.get(p, 0) - counts.get(p, 0) for p in BARRIER_PASSES)
    names = [p.name for p in lifted.params if p.offset in candidates]
    if gain > 0:
        print(f"  launch-time specialization: when the arrays passed for {', '.join(names)} "
              f"overlap no other pointer argument, the launch runs a variant compiled with "
              f"noalias_params = {candidates}: {gain} more barrier(s) removed "
              "(other launches run the code above)")


def _vectorization_text(module, lifted, block) -> str:  # type: ignore[no-untyped-def]
    """The loop vectorizer's remarks on the kernel's code, summed up in a line."""
    from collections import Counter
    from cpuify.codegen import jit
    from cpuify.codegen.llvm_gen import ModuleCodegen
    gen = ModuleCodegen(module, *jit.triple_and_layout())
    gen.add_kernel(lifted, block)    # (planning above left the kernel's IR as it was)
    remarks = jit.vectorizer_remarks(gen.llvm_text())
    done: Counter[str] = Counter()
    missed: Counter[str] = Counter()
    for r in remarks:
        m = re.match(r"vectorized loop \(vectorization width: (\d+), interleaved count: (\d+)\)", r)
        if m:
            lanes, ic = m.groups()
            done[f"{lanes} lanes" + (f" x{ic} interleaved" if ic != "1" else "")] += 1
        elif r.startswith("loop not vectorized:"):
            missed[r[len("loop not vectorized:"):].strip()] += 1
    text = f"LLVM: {sum(done.values())} loop(s) vectorized"
    if done:
        text += " (" + ", ".join(f"{k}: {n}" for k, n in sorted(done.items())) + ")"
    if missed:
        text += f"; {sum(missed.values())} not: " + "; ".join(
            f"{why} ({n})" for why, n in missed.most_common())
    return text


def _ranges_text(ranges, dims) -> str:  # type: ignore[no-untyped-def]
    parts = [f"{axis} in range({lo}, {hi}{f', {step}' if step != 1 else ''})"
             for axis, (lo, hi, step), d in zip("xyz", ranges, dims) if (lo, hi, step) != (0, d, 1)]
    return " and ".join(parts) or "any index"


def _lines(ops) -> str:  # type: ignore[no-untyped-def]
    return ", ".join(str(op.attributes.get("line")) for op in ops)


def _segment_notes(kc, r: int) -> list[str]:  # type: ignore[no-untyped-def]
    """What code generation does for the segment from resume point r, in words."""
    from cpuify.codegen.speculation import idle_clamps
    notes = []
    target = kc.only_next.get(r)
    if r in kc.only_exit:
        notes.append("every thread exits (no states stored)")
    elif target is not None:
        notes.append(f"every thread stops at sync {target.index} (no states stored)")
    elif r in kc.convergent:
        notes.append("every thread takes the same path (its stop kept in a register)")
    ranges = kc.thread_range.get(r)
    if ranges is not None:
        notes.append(f"runs only the threads with {_ranges_text(ranges, kc.block_dims)}")
    for region in kc.deferred.get(r, []):
        notes.append(f"the if at PTX line {region.branch.attributes.get('line')} runs after "
                     f"the thread loop, for the threads with {_ranges_text(region.ranges, kc.block_dims)}")
    checked, per_row = idle_clamps(kc, r)
    if checked:
        notes.append(f"the clamps at PTX line(s) {_lines(checked)} are checked once per block: "
                     f"where none changes anything, a copy of the thread loop without them runs")
    if per_row:
        notes.append(f"the clamps at PTX line(s) {_lines(per_row)} follow threadIdx.y/z only: "
                     f"left to each row of threads, out of the block's check")
    if r in kc.lane_groups:
        notes.append(f"thread loop in groups of {kc.LANES} (partner indices tid & m, tid ^ m"
                     + ("; a partner closer than a group: lanes unrolled for the SLP vectorizer)"
                        if r in kc.unrolled_lane_groups else ")"))
    store = kc.aligned_rows.get(r)
    if store is not None:
        notes.append(f"rows split at the first cache line of the store at PTX line "
                     f"{store.attributes.get('line')} (the threads before it, then the rest)")
    rb = kc.range_branches.get(r)
    if rb is not None:
        if not rb.decided_convergent:
            then = ""
        elif rb.decided_exit:
            then = ", where every thread exits"
        elif rb.decided_next is not None:
            then = f", where every thread stops at sync {rb.decided_next.index} (no states stored)"
        else:
            then = ", where every thread takes the same path"
        further = "".join(f" and the branch at PTX line {br.attributes.get('line')} "
                          f"({len(terms)} comparison(s))" for br, terms, _ in rb.also)
        notes.append(f"blocks whose threads all agree on the branch at PTX line "
                     f"{rb.branch.attributes.get('line')} ({len(rb.terms)} comparison(s) with "
                     f"threadIdx.x){further} run a copy of the thread loop with "
                     f"{'them' if further else 'it'} decided{then}")
    by_row = kc.row_prefetches.get(r, [])
    if by_row:
        lines = ", ".join(str(op.attributes.get("line")) for op, _, _ in by_row)
        notes.append(f"each row of threads prefetches, after it ran, its "
                     f"{sum(len(p) for _, p, _ in by_row) // (kc.block_dims[1] * kc.block_dims[2])} "
                     f"line(s) of the accesses at PTX line(s) {lines}, "
                     f"{kc.prefetch_advance(r)} iteration(s) ahead")
    if r == kc.next_block_resume and kc.block_prefetches:
        lines = ", ".join(str(op.attributes.get("line")) for op, _, _ in kc.block_prefetches)
        notes.append(f"after its thread loop, prefetches "
                     f"{sum(len(p) for _, p, _ in kc.block_prefetches)} line(s) of the accesses "
                     f"at PTX line(s) {lines} for the next block (blockIdx.x + 1)")
    if r == 0 and kc.in_place_update:
        notes.append("no prefetches for the next block: the kernel's global stores write "
                     "the elements its global loads read (an in-place update)")
    prefetched = kc.prefetches.get(r, [])
    if prefetched:
        lines = ", ".join(str(op.attributes.get("line")) for op, _, _ in prefetched)
        sp = kc.syncs[r - 1]
        when = "of its own iteration in the next block (blockIdx.x + 1), into L2" \
            if sp.op.attributes.get("prefetch_next_block") else \
            f"{kc.prefetch_advance(r)} iterations ahead"
        notes.append(f"each pass prefetches {sum(len(p) for _, p, _ in prefetched)} line(s) of "
                     f"the accesses at PTX line(s) {lines}, {when}")
    return notes


if __name__ == "__main__":
    sys.exit(main())
