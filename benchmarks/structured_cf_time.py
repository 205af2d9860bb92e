#!/usr/bin/env python3
"""Cost of raise-structured-cf (and of the lowering back) against kernel size.

    python -m benchmarks.structured_cf_time [--sizes 1000,2000,4000,8000,16000]
                                            [--chain-sizes 1000,2000,4000] [--full-compile]
    python -m benchmarks.structured_cf_time --transitions 1000,2000,4000 [--repeats 3]

Two shapes, CPU seconds of this process (time.process_time: the machine may be shared):

(The cyclic garbage collector is off while a stage is timed, --gc keeps it on.)

* `loops`: a generated block body (MLIR text, parsed; no NVRTC) of N units, each a rotated
  loop (nvcc's do-while shape) holding a barrier, an if/else and an inner counted loop
  with an if: 9 blocks per unit.  Times: the raise, the lowering, and for scale the
  verifier on the same IR; the growth factor per doubling of N.
  `--breaks`: each outer loop also leaves to a block of its own and each inner loop breaks
  to its exit (loops with several exits, 11 blocks per unit).
* `chain`: benchmarks/compile_time.py's generated CUDA kernel of N statements (every 8th
  under an if), through NVRTC, lifted and run through the default pipeline: the raise's
  time against the passes before it and, with --full-compile, against the whole compile
  of the kernel (lift, passes, code generation, LLVM: cpuify.compiler.compile_ptx).

* `--transitions`: the chain kernel through the default pipeline, where raise-structured-cf
  runs early and the pass manager lowers and raises between passes of different forms,
  against the same passes with the raise last (no transitions), alternated.

A measurement tool: prints a table, asserts nothing."""

from __future__ import annotations

import argparse
import gc
import os
import time

from cpuify.ir.parser import parse_op
from cpuify.ir.structure import block_body
from cpuify.ir.structured import lower_structured_control_flow
from cpuify.ir.verifier import verify
from cpuify.transforms.structured_cf import raise_structured_control_flow

GC_DURING = False


def loops_kernel(units: int, breaks: bool = False) -> str:
    """A kernel op whose block body is `units` loops in sequence (see the module doc);
    `breaks`: the outer loop also leaves to a block of its own and the inner loop breaks to
    its exit (loops with several exits, 11 blocks per unit)."""
    out = ['"upir.kernel"() ({', '"upir.grid_parallel"() ({', '"upir.block_parallel"() ({',
           '  %n = "upir.param"() {offset = 0 : i64, type = "u32"} : () -> i32',
           '  %t = "upir.special"() {reg = "%tid.x"} : () -> i32',
           '  %zero = "upir.const"() {value = 0 : i64} : () -> i32',
           '  %one = "upir.const"() {value = 1 : i64} : () -> i32',
           '  "cf.br"(%zero) [^u0] : (i32) -> ()']
    br2 = '<{operandSegmentSizes = array<i32: 1, 0, 0>}>'
    for u in range(units):
        out += [
            f'^u{u}(%a{u}: i32):',
            f'  "cf.br"(%zero, %a{u}) [^h{u}] : (i32, i32) -> ()',
            f'^h{u}(%i{u}: i32, %s{u}: i32):',
            '  "upir.barrier"() {mods = ["sync"]} : () -> ()',
            f'  %c{u} = "ptx.setp"(%i{u}, %t) {{mods = ["lt", "s32"]}} : (i32, i32) -> i1',
            f'  "cf.cond_br"(%c{u}) [^t{u}, ^e{u}] {br2} : (i1) -> ()',
            f'^t{u}:',
            f'  %x{u} = "ptx.add"(%s{u}, %i{u}) {{mods = ["s32"]}} : (i32, i32) -> i32',
            f'  "cf.br"(%x{u}) [^j{u}] : (i32) -> ()',
            f'^e{u}:',
            f'  %y{u} = "ptx.sub"(%s{u}, %one) {{mods = ["s32"]}} : (i32, i32) -> i32',
            f'  "cf.br"(%y{u}) [^j{u}] : (i32) -> ()',
            f'^j{u}(%m{u}: i32):',
        ]
        if breaks:
            out += [
                f'  %b{u} = "ptx.setp"(%m{u}, %t) {{mods = ["eq", "s32"]}} : (i32, i32) -> i1',
                f'  "cf.cond_br"(%b{u}) [^bk{u}, ^jj{u}] {br2} : (i1) -> ()',
                f'^bk{u}:',
                f'  "cf.br"(%m{u}) [^u{u + 1}] : (i32) -> ()',
                f'^jj{u}:',
            ]
        out += [
            f'  "cf.br"(%zero, %m{u}) [^ih{u}] : (i32, i32) -> ()',
            f'^ih{u}(%k{u}: i32, %v{u}: i32):',
            f'  %d{u} = "ptx.setp"(%k{u}, %n) {{mods = ["lt", "s32"]}} : (i32, i32) -> i1',
            f'  "cf.cond_br"(%d{u}) [^ib{u}, ^ix{u}] {br2} : (i1) -> ()',
            f'^ib{u}:',
        ]
        if breaks:
            out += [
                f'  %bi{u} = "ptx.setp"(%k{u}, %t) {{mods = ["gt", "s32"]}} : (i32, i32) -> i1',
                f'  "cf.cond_br"(%bi{u}) [^ix{u}, ^ic{u}] {br2} : (i1) -> ()',
                f'^ic{u}:',
            ]
        out += [
            f'  %o{u} = "ptx.and"(%k{u}, %one) {{mods = ["b32"]}} : (i32, i32) -> i32',
            f'  %p{u} = "ptx.setp"(%o{u}, %zero) {{mods = ["eq", "s32"]}} : (i32, i32) -> i1',
            f'  "cf.cond_br"(%p{u}, %v{u}) [^it{u}, ^ij{u}] '
            '<{operandSegmentSizes = array<i32: 1, 0, 1>}> : (i1, i32) -> ()',
            f'^it{u}:',
            f'  %w{u} = "ptx.add"(%v{u}, %k{u}) {{mods = ["s32"]}} : (i32, i32) -> i32',
            f'  "cf.br"(%w{u}) [^ij{u}] : (i32) -> ()',
            f'^ij{u}(%q{u}: i32):',
            f'  %kn{u} = "ptx.add"(%k{u}, %one) {{mods = ["s32"]}} : (i32, i32) -> i32',
            f'  "cf.br"(%kn{u}, %q{u}) [^ih{u}] : (i32, i32) -> ()',
            f'^ix{u}:',
            f'  %in{u} = "ptx.add"(%i{u}, %one) {{mods = ["s32"]}} : (i32, i32) -> i32',
            f'  %f{u} = "ptx.setp"(%in{u}, %n) {{mods = ["lt", "s32"]}} : (i32, i32) -> i1',
            f'  "cf.cond_br"(%f{u}, %in{u}, %v{u}, %v{u}) [^h{u}, ^u{u + 1}] '
            '<{operandSegmentSizes = array<i32: 1, 2, 1>}> : (i1, i32, i32, i32) -> ()',
        ]
    out += [f'^u{units}(%last: i32):', '  "upir.exit"() : () -> ()',
            '}) : () -> ()', '"upir.yield"() : () -> ()', '}) : () -> ()',
            '"upir.yield"() : () -> ()',
            '}) {sym_name = "k", param_size = 4 : i64, params = [["n", "u32", 0 : i64, 4 : i64, '
            '4 : i64, []]], directives = []} : () -> ()']
    return "\n".join(out) + "\n"


def _cpu(fn) -> float:  # type: ignore[no-untyped-def]
    """CPU seconds of fn(), with CPython's cyclic garbage collector off while it runs (its
    full collections scan the whole heap: a cost that grows with everything the process
    holds, not with what the pass does; --gc keeps it on)."""
    collect = GC_DURING
    gc.collect()
    if not collect:
        gc.disable()
    try:
        t0 = time.process_time()
        fn()
        return time.process_time() - t0
    finally:
        gc.enable()


def measure_loops(sizes: list[int], breaks: bool = False) -> None:
    print(f"loops{' with breaks' if breaks else ''}: N units ({11 if breaks else 9} blocks "
          "each), CPU seconds")
    print(f"{'N':>7} {'blocks':>7} {'raise':>8} {'x':>5} {'lower':>8} {'verify':>8} raised")
    prev = None
    for n in sizes:
        op = parse_op(loops_kernel(n, breaks))
        blocks = len(block_body(op).blocks)
        verify_s = _cpu(lambda: verify(op))
        report = []
        raise_s = _cpu(lambda: report.append(raise_structured_control_flow(block_body(op))))
        lower_s = _cpu(lambda: lower_structured_control_flow(op))
        growth = f"{raise_s / prev:5.2f}" if prev else "    -"
        prev = raise_s
        r = report[0]
        print(f"{n:>7} {blocks:>7} {raise_s:8.3f} {growth} {lower_s:8.3f} {verify_s:8.3f} "
              f"{dict(r.raised)} left {dict(r.left)}")


def measure_chain(sizes: list[int], full: bool) -> None:
    from benchmarks.compile_time import cuda_source, gen_statements
    from cpuify.frontend.nvrtc import compile_to_ptx
    from cpuify.frontend.ptx_parser import parse_ptx
    from cpuify.lifting import lift_kernel
    from cpuify.transforms.pass_manager import PipelineOptions, default_pipeline, run_pipeline
    print("chain: compile_time.py's kernel of N statements, CPU seconds")
    print(f"{'N':>7} {'lift':>8} {'passes':>8} {'raise':>8} {'share':>7} {'lower':>8}"
          + (f" {'compile':>8} {'share':>7}" if full else ""))
    others = tuple(p for p in default_pipeline() if p != "raise-structured-cf")
    for n in sizes:
        ptx = compile_to_ptx(cuda_source(gen_statements(n))).ptx
        module = parse_ptx(ptx)
        box: list = []
        lift_s = _cpu(lambda: box.append(lift_kernel(module, module.entries[0]).op))
        op = box[0]
        passes_s = _cpu(lambda: run_pipeline(op, PipelineOptions(passes=others)))
        raise_s = _cpu(lambda: raise_structured_control_flow(block_body(op)))
        lower_s = _cpu(lambda: lower_structured_control_flow(op))
        line = (f"{n:>7} {lift_s:8.3f} {passes_s:8.3f} {raise_s:8.3f} "
                f"{100 * raise_s / (lift_s + passes_s + raise_s):6.2f}% {lower_s:8.3f}")
        if full:
            from cpuify.compiler import compile_ptx
            os.environ["CPUIFY_NO_CACHE"] = "1"
            # (CPU of this process and of the children it waited for: LLVM may run in one)
            t0 = os.times()
            compile_ptx(ptx)
            t1 = os.times()
            total = sum(t1[:4]) - sum(t0[:4])
            line += f" {total:8.2f} {100 * (raise_s + lower_s) / total:6.2f}%"
        print(line)


def measure_transitions(sizes: list[int], repeats: int) -> None:
    """The default pipeline (raise-structured-cf early, the pass manager lowering and raising
    at the transitions between forms) against the same passes with the raise last (the
    pipeline before the structured form was its working form: no transitions), on the chain
    kernel, alternated `repeats` times in this process; the best CPU time of each."""
    from benchmarks.compile_time import cuda_source, gen_statements
    from cpuify.frontend.nvrtc import compile_to_ptx
    from cpuify.frontend.ptx_parser import parse_ptx
    from cpuify.lifting import lift_kernel
    from cpuify.transforms.pass_manager import RAISE, PipelineOptions, default_pipeline, run_pipeline
    new = tuple(default_pipeline())
    old = tuple(p for p in new if p != RAISE) + (RAISE,)
    print("transitions: the chain kernel of N statements, the default pipeline (raise early) "
          "vs the raise last, CPU seconds (best of the alternated runs)")
    print(f"{'N':>7} {'raise last':>10} {'default':>8} {'ratio':>6} transitions")
    for n in sizes:
        module = parse_ptx(compile_to_ptx(cuda_source(gen_statements(n))).ptx)
        best = {old: float("inf"), new: float("inf")}
        made: list = []
        for _ in range(repeats):
            for passes in (old, new):
                op = lift_kernel(module, module.entries[0]).op
                box: list = []
                t = _cpu(lambda: box.append(run_pipeline(op, PipelineOptions(passes=passes))))
                best[passes] = min(best[passes], t)
                if passes is new:
                    made = box[0].transitions
        kinds = ", ".join(f"{k} for {p or 'the end'}" for k, p in made) or "none"
        print(f"{n:>7} {best[old]:10.3f} {best[new]:8.3f} {best[new] / best[old]:6.3f} {kinds}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,2000,4000,8000,16000")
    ap.add_argument("--chain-sizes", default="1000,2000,4000")
    ap.add_argument("--full-compile", action="store_true")
    ap.add_argument("--breaks", action="store_true",
                    help="the loops shape with breaks (loops with several exits)")
    ap.add_argument("--gc", action="store_true", help="keep the garbage collector on while timing")
    ap.add_argument("--transitions", default="",
                    help="chain sizes: the default pipeline against the raise last (the cost "
                         "of the pass manager's lowering and raising between forms), alone")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    global GC_DURING
    GC_DURING = args.gc
    if args.transitions:
        measure_transitions([int(x) for x in args.transitions.split(",") if x], args.repeats)
        return 0
    measure_loops([int(x) for x in args.sizes.split(",") if x], args.breaks)
    if args.chain_sizes:
        measure_chain([int(x) for x in args.chain_sizes.split(",") if x], args.full_compile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
