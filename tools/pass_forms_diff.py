"""Does a change to the pass pipeline's forms change the generated code?  The raw LLVM IR
(before LLVM's optimization) of the benchmark suite's kernels, the examples' and the
tests/e2e kernels, from two checkouts, compared byte for byte; and how many lowerings and
raises the pass manager made per kernel (PipelineResult.transitions) in each.

    python tools/pass_forms_diff.py run /work/main /work/wt-x [--out /tmp/pass-forms]
    PYTHONPATH=TREE/src python tools/pass_forms_diff.py dump DIR [--passes a,b,...]
    python tools/pass_forms_diff.py compare DIR_BEFORE DIR_AFTER

`dump` writes, for each module, NAME.BLOCK.ll (the code generator's text for the module
generic, and specialized for each --blocks shape) and NAME.transitions (per kernel: the
conversions of the default pipeline, or of --passes), with the cpuify found on PYTHONPATH;
PTX is compiled once with NVRTC and kept in --ptx-dir.  The kernels: the suite's workloads,
and every string constant holding a `__global__` in tests/e2e and the EXTRA test files.  `compare` lists the files that
differ and totals the transitions; `run` does both for two checkouts.  Exit status 1 when
any text differs (a change meant to keep the generated code must list none)."""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: test files whose kernels exercise one pass each (the differential test's, the passes'
#: own), besides tests/e2e
EXTRA = ("test_pass_differential.py", "test_passes.py", "test_gridsync_loops.py",
         "test_thread_index_outermost.py", "test_structured_licm.py")


def sources(root: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """(name, CUDA source, NVRTC options): the suite's workloads, the examples with a CUDA
    source string, and every string constant of tests/e2e that holds a `__global__`."""
    sys.path.insert(0, str(root))
    out: list[tuple[str, str, tuple[str, ...]]] = []
    for p in sorted((root / "benchmarks/suite/workloads").glob("*.py")):
        if p.stem != "__init__":
            w = importlib.import_module(f"benchmarks.suite.workloads.{p.stem}").WORKLOAD
            out.append((f"suite_{p.stem}", w.cuda_source, tuple(w.cuda_options)))
    tests = sorted((root / "tests/e2e").glob("test_*.py")) + [root / "tests" / f for f in EXTRA]
    for p in tests:
        k = 0
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    "__global__" in node.value:
                out.append((f"{p.stem[len('test_'):]}_{k}", node.value, ()))
                k += 1
    return out


def _ptx(name: str, source: str, options: tuple[str, ...], ptx_dir: Path) -> str | None:
    path = ptx_dir / f"{name}.ptx"
    bad = ptx_dir / f"{name}.failed"
    if bad.exists():
        return None
    if not path.exists():
        from cpuify.frontend.nvrtc import compile_to_ptx
        try:
            path.write_text(compile_to_ptx(source, options=list(options)).ptx)
        except Exception as exc:             # (templates and error tests of tests/e2e)
            bad.write_text(str(exc))
            return None
    return path.read_text()


def dump(out: Path, ptx_dir: Path, passes: str | None, blocks: list[str], only: str | None) -> int:
    from cpuify import compiler
    from cpuify.codegen import jit
    from cpuify.codegen.llvm_gen import ModuleCodegen
    from cpuify.errors import CpuifyError
    from cpuify.frontend.ptx_parser import parse_ptx
    from cpuify.transforms.pass_manager import PipelineOptions
    out.mkdir(parents=True, exist_ok=True)
    ptx_dir.mkdir(parents=True, exist_ok=True)
    seen: list[list[tuple[str, str]]] = []
    real = compiler.run_pipeline

    def recording(kernel, options=None, out=None):  # type: ignore[no-untyped-def]
        result = real(kernel, options, out)
        seen.append(list(result.transitions))
        return result

    compiler.run_pipeline = recording  # type: ignore[assignment]
    pipeline = PipelineOptions.parse([f"--passes={passes}"] if passes else [])[0]
    for name, source, options in sources(ROOT):
        if only and not any(o in name for o in only.split(",")):
            continue
        ptx = _ptx(name, source, options, ptx_dir)
        if ptx is None:
            continue
        module = parse_ptx(ptx)
        lines: list[str] = []
        for shape in blocks:
            block = None if shape == "generic" else tuple(int(x) for x in shape.split("x"))
            gen = ModuleCodegen(module, *jit.triple_and_layout())
            try:
                for entry in module.entries:
                    seen.clear()
                    lifted, _ = compiler.lift_and_optimize(module, entry, pipeline, block)
                    gen.add_kernel(lifted, block)
                    conv = " ".join(f"{k}@{p or 'end'}" for t in seen for k, p in t)
                    lines.append(f"{shape} {entry.name}: {conv}")
                text = gen.llvm_text()
            except CpuifyError as exc:
                text = f"ERROR {exc}\n"
            (out / f"{name}.{shape}.ll").write_text(text)
        (out / f"{name}.transitions").write_text("\n".join(lines) + "\n")
        print(name, flush=True)
    return 0


def compare(before: Path, after: Path) -> int:
    differ = same = 0
    for f in sorted(before.glob("*.ll")):
        g = after / f.name
        if not g.exists() or g.read_text() != f.read_text():
            differ += 1
            print(f"DIFFERS: diff {f} {g}")
        else:
            same += 1
    totals = []
    for d in (before, after):
        kernels = lowers = raises = 0
        for f in d.glob("*.transitions"):
            for line in f.read_text().splitlines():
                if not line.strip():
                    continue
                kernels += 1
                conv = line.split(":", 1)[1].split()
                lowers += sum(c.startswith("lower@") for c in conv)
                raises += sum(c.startswith("raise@") for c in conv)
        totals.append((kernels, lowers, raises))
        print(f"{d}: {kernels} kernel compiles, {lowers} lowerings, {raises} raises "
              f"({(lowers + raises) / max(kernels, 1):.2f} conversions per kernel)")
    print(f"{same} of {same + differ} LLVM texts identical")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    r = sub.add_parser("run")
    r.add_argument("before", type=Path)
    r.add_argument("after", type=Path)
    r.add_argument("--out", type=Path, default=Path("/tmp/pass-forms"))
    for p in (d, r):
        p.add_argument("--ptx-dir", type=Path, default=Path("/tmp/pass-forms-ptx"))
        p.add_argument("--passes", default=None, help="a pipeline instead of the default one")
        p.add_argument("--blocks", default="generic,128x1x1,16x16x1",
                       help="block shapes the code is generated for (generic: none)")
        p.add_argument("--only", default=None, help="modules whose name contains one of these (comma-separated)")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.cmd == "dump":
        return dump(args.out, args.ptx_dir, args.passes, args.blocks.split(","), args.only)
    if args.cmd == "compare":
        return compare(args.before, args.after)
    for side, tree in (("before", args.before), ("after", args.after)):
        argv = [sys.executable, __file__, "dump", str(args.out / side), "--ptx-dir",
                str(args.ptx_dir), "--blocks", args.blocks]
        argv += ["--passes", args.passes] if args.passes and side == "after" else []
        argv += ["--only", args.only] if args.only else []
        subprocess.run(argv, check=True, env=dict(os.environ, PYTHONPATH=str(tree / "src")))
    return compare(args.out / "before", args.out / "after")


if __name__ == "__main__":
    sys.exit(main())
