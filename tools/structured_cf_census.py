"""What raise-structured-cf makes of the example and benchmark kernels, and whether it is undone.

    PYTHONPATH=src python tools/structured_cf_census.py [--ptx-dir /tmp/structured-cf-ptx] [--llvm]

For each kernel of benchmarks/suite's workloads and of examples/ (PTX compiled once with
NVRTC, or `cpuify ptx` for examples/jacobi.cu, cached in --ptx-dir): the structured ops the
default pipeline leaves (if/while/for), what stayed CFG and why, why a while is no for;
then whether raising, printing, parsing back and lowering gives the CFG the pipeline gives
without the pass (block order aside: reverse post-order).  Prints the totals; exits 1 when a
kernel's CFG differs (a change to the raise or the lowering must list none).  `--llvm` also
compares each module's raw LLVM IR (`cpuify llvm --raw`) with the pass on and off, byte for
byte.  `--dump DIR` writes each module's `cpuify explain` and raw LLVM IR (default pipeline)
to DIR/NAME.explain and DIR/NAME.ll and stops there: run it in two trees and `diff -r` the
directories to see what a change to the pipeline changed."""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cpuify.frontend.nvrtc import compile_to_ptx  # noqa: E402
from cpuify.frontend.ptx_parser import parse_ptx  # noqa: E402
from cpuify.ir.core import Operation, reverse_postorder  # noqa: E402
from cpuify.ir.parser import parse_op  # noqa: E402
from cpuify.ir.printer import print_op  # noqa: E402
from cpuify.ir.structure import block_body, block_parallel  # noqa: E402
from cpuify.ir.structured import lower_structured_control_flow  # noqa: E402
from cpuify.ir.verifier import verify  # noqa: E402
from cpuify.lifting import lift_kernel  # noqa: E402
from cpuify.transforms.pass_manager import PipelineOptions, run_pipeline  # noqa: E402

RECORDS = ("structured_cf", "cfg_left", "while_not_for")


def sources() -> list[tuple[str, str | None, tuple[str, ...]]]:
    """(name, CUDA source or None for a .cu the CLI compiles, NVRTC options)."""
    out: list[tuple[str, str | None, tuple[str, ...]]] = []
    for p in sorted((ROOT / "benchmarks/suite/workloads").glob("*.py")):
        if p.stem != "__init__":
            w = importlib.import_module(f"benchmarks.suite.workloads.{p.stem}").WORKLOAD
            out.append((p.stem, w.cuda_source, tuple(w.cuda_options)))
    out.append(("jacobi", None, ()))
    for name in ("tiled_matmul", "vector_add"):
        found = re.search(r'source = r"""(.*?)"""', (ROOT / f"examples/{name}.py").read_text(), re.S)
        assert found, name
        out.append((name, found.group(1), ()))
    return out


def ptx_of(name: str, source: str | None, options: tuple[str, ...], cache: Path) -> str:
    path = cache / f"{name}.ptx"
    if not path.exists():
        if source is None:
            done = subprocess.run([sys.executable, "-m", "cpuify.cli.main", "ptx",
                                   str(ROOT / "examples" / f"{name}.cu")],
                                  check=True, capture_output=True, text=True)
            path.write_text(done.stdout)
        else:
            path.write_text(compile_to_ptx(source, options=list(options)).ptx)
    return path.read_text()


def canonical(kernel: Operation) -> str:
    """The kernel printed with its block body in reverse post-order, without the records."""
    region = block_body(kernel)
    order = reverse_postorder(region)
    kept = set(order)
    region.blocks = order + [b for b in region.blocks if b not in kept]
    for key in RECORDS:
        block_parallel(kernel).attributes.pop(key, None)
    return print_op(kernel)


def raw_llvm(path: Path, *extra: str) -> str:
    """`cpuify llvm --raw` of a PTX file, in this process."""
    return cli_output("llvm", "--raw", str(path), *extra)


def cli_output(*argv: str) -> str:
    """What the cpuify CLI prints on stdout for `argv`, run in this process."""
    import contextlib
    import io
    from cpuify.cli.main import main as cli
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli(list(argv)) == 0, argv
    return out.getvalue()


def dump(ptx_dir: Path, out_dir: Path) -> int:
    """Each module's `cpuify explain` and raw LLVM IR, written to out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, source, options in sources():
        ptx_of(name, source, options, ptx_dir)
        path = ptx_dir / f"{name}.ptx"
        (out_dir / f"{name}.explain").write_text(cli_output("explain", str(path)))
        (out_dir / f"{name}.ll").write_text(raw_llvm(path))
        print(name, flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ptx-dir", type=Path, default=Path("/tmp/structured-cf-ptx"))
    ap.add_argument("--llvm", action="store_true",
                    help="also compare each module's raw LLVM IR with the pass on and off")
    ap.add_argument("--dump", type=Path, default=None,
                    help="write each module's explain output and raw LLVM IR to this directory")
    args = ap.parse_args()
    args.ptx_dir.mkdir(parents=True, exist_ok=True)
    if args.dump is not None:
        return dump(args.ptx_dir, args.dump)
    made: Counter[str] = Counter()
    left: Counter[str] = Counter()
    whiles: Counter[str] = Counter()
    kernels = differ = 0
    for name, source, options in sources():
        module = parse_ptx(ptx_of(name, source, options, args.ptx_dir))
        for entry in module.entries:
            kernels += 1
            raised = lift_kernel(module, entry).op
            run_pipeline(raised, PipelineOptions())
            attrs = block_parallel(raised).attributes
            counts = {str(k): int(n) for k, n in attrs.get("structured_cf", [])}
            made.update(counts)
            left.update({str(k): int(n) for k, n in attrs.get("cfg_left", [])})
            whiles.update({str(k): int(n) for k, n in attrs.get("while_not_for", [])})
            plain = lift_kernel(module, entry).op
            run_pipeline(plain, PipelineOptions(disabled=frozenset({"raise-structured-cf"})))
            back = parse_op(print_op(raised))
            verify(back)
            lower_structured_control_flow(back)
            verify(back)
            same = canonical(back) == canonical(plain)
            differ += not same
            print(f"{name}:{entry.name}: {counts.get('if', 0)} if, {counts.get('while', 0)} while, "
                  f"{counts.get('for', 0)} for" + ("" if same else "  CFG DIFFERS once lowered"))
    print(f"{kernels} kernels: {made['if']} if, {made['while']} while, {made['for']} for")
    print("left as CFG: " + (", ".join(f"{n} {w}" for w, n in sorted(left.items())) or "none"))
    print("while, not for: " + (", ".join(f"{n} {w}" for w, n in sorted(whiles.items())) or "none"))
    print(f"{kernels - differ} of {kernels} kernels: the same CFG after raise, print, parse, lower")
    llvm_differ = 0
    if args.llvm:
        names = [name for name, _, _ in sources()]
        for name in names:
            path = args.ptx_dir / f"{name}.ptx"
            same = raw_llvm(path) == raw_llvm(path, "--disable-pass=raise-structured-cf")
            llvm_differ += not same
            if not same:
                print(f"{name}: raw LLVM IR DIFFERS with the pass on and off")
        print(f"{len(names) - llvm_differ} of {len(names)} modules: raw LLVM IR byte-identical "
              "with the pass on and off")
    return 1 if differ or llvm_differ else 0


if __name__ == "__main__":
    sys.exit(main())
