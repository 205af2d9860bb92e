"""What cpuify hands LLVM, and what LLVM spends its time on, for one compile.

    PYTHONPATH=src python tools/llvm_profile.py FILE.cu|FILE.ptx [--block X,Y,Z] [--passes=...]
    PYTHONPATH=src python tools/llvm_profile.py --fuzz SEED:COUNT [--block-shapes]

Compiles the file's kernels (CUDA through NVRTC; `--fuzz`: a batch of the differential
fuzzer's kernels, as tools/fuzz.py builds them) with the compile cache off, and prints, per
LLVM module compiled: the CPU seconds of `jit.optimize` (LLVM's O3 pipeline) and of
`jit.emit_object` (code generation), and per LLVM function its instruction count before and
after optimization (segment functions are usually inlined into their block function and
dispatcher: 0 after).  Then the passes that took the most time over all modules, for the
optimization pipeline and for code generation (LLVM's own pass timers, user+system
seconds; an analysis is listed apart from the passes that request it).

`--block X,Y,Z` (or `--block-shapes` with `--fuzz`: each kernel's own launch) also compiles
each kernel specialized for that block shape, as a second launch through the API does.
A measurement tool: it asserts nothing about the numbers."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

_INSTRUCTION = re.compile(r"^  [^ ;]")
_NAME = re.compile(r'@("[^"]+"|[-\w.$]+)\(')
#: a row of an LLVM timing report: 1 to 4 "seconds (percent)" columns, then the pass's name.
#: LLVM leaves out the System column (and User+System) when the report's total is zero there,
#: so User+System is the second-to-last column whenever there are two to four (only Wall: 0)
_TIMING = re.compile(r"^\s*((?:[\d.]+ \(\s*[\d.]+%\)\s+){1,4})(.+?)\s*$")
_COLUMN = re.compile(r"([\d.]+) \(\s*[\d.]+%\)")


def function_sizes(text: str) -> dict[str, int]:
    """LLVM function name -> number of instructions in its body (module text)."""
    out: dict[str, int] = {}
    for chunk in text.split("\ndefine ")[1:]:
        m = _NAME.search(chunk.split("\n", 1)[0])
        name = m.group(1).strip('"') if m else "?"
        body = chunk.split("\n}\n", 1)[0]
        out[name] = sum(1 for line in body.splitlines()[1:] if _INSTRUCTION.match(line))
    return out


def pass_seconds(report: str) -> Counter[str]:
    """Pass name -> user+system seconds, from one LLVM timing report (a pass's runs on
    several functions are summed; `Pass on f` and a second instance `Pass #2` count as `Pass`)."""
    out: Counter[str] = Counter()
    for line in report.splitlines():
        m = _TIMING.match(line)
        if m and not m.group(2).startswith("Total"):
            columns = _COLUMN.findall(m.group(1))
            out[re.sub(r"( on .*| #\d+)$", "", m.group(2))] += float(columns[-2]) if len(columns) > 1 else 0.0
    return out


class Recorder:
    """Wraps jit.optimize / jit.emit_object: one record per LLVM module compiled."""

    def __init__(self) -> None:
        from cpuify.codegen import jit
        self.jit = jit
        self.records: list[dict] = []
        self.opt_passes: Counter[str] = Counter()
        self.emit_passes: Counter[str] = Counter()
        self._optimize, self._emit = jit.optimize, jit.emit_object
        jit.optimize, jit.emit_object = self.optimize, self.emit_object   # type: ignore[method-assign]

    def optimize(self, text: str, **kw):  # type: ignore[no-untyped-def]
        reports: list[str] = []
        c0 = time.process_time()
        mod = self._optimize(text, pass_timings=reports, **kw)
        rec = {"optimize": time.process_time() - c0, "emit": 0.0, "level": kw.get("level", "O3"),
               "before": function_sizes(text), "after": function_sizes(str(mod))}
        self.records.append(rec)
        self.opt_passes.update(pass_seconds("".join(reports)))
        return mod

    def emit_object(self, mod, **kw):  # type: ignore[no-untyped-def]
        reports: list[str] = []
        c0 = time.process_time()
        obj = self._emit(mod, pass_timings=reports, **kw)
        if self.records:
            self.records[-1]["emit"] += time.process_time() - c0
        self.emit_passes.update(pass_seconds("".join(reports)))
        return obj


def _kind(name: str) -> str:
    return re.sub(r"\d+", "#", name)


def report(rec: Recorder, top: int, out=None) -> None:  # type: ignore[no-untyped-def]
    w = (out or sys.stdout).write
    for k, r in enumerate(rec.records):
        w(f"module {k} ({r.get('level', 'O3')}): optimize {r['optimize']:.2f} s, emit {r['emit']:.2f} s; "
          f"instructions {sum(r['before'].values())} -> {sum(r['after'].values())}\n")
        if len(rec.records) <= 4:
            for name, n in sorted(r["before"].items(), key=lambda kv: -kv[1]):
                w(f"    {n:8d} -> {r['after'].get(name, 0):7d}  {name}\n")
            for name, n in r["after"].items():
                if name not in r["before"]:     # made by LLVM (function specialization)
                    w(f"    {'new':>8s} -> {n:7d}  {name}\n")
    opt = sum(r["optimize"] for r in rec.records)
    emit = sum(r["emit"] for r in rec.records)
    before = sum(sum(r["before"].values()) for r in rec.records)
    after = sum(sum(r["after"].values()) for r in rec.records)
    w(f"total: {len(rec.records)} modules, optimize {opt:.2f} s, emit {emit:.2f} s (CPU); "
      f"LLVM instructions {before} -> {after}\n")
    kinds_before: Counter[str] = Counter()
    kinds_after: Counter[str] = Counter()
    for r in rec.records:
        for name, n in r["before"].items():
            kinds_before[_kind(name)] += n
        for name, n in r["after"].items():
            kinds_after[_kind(name)] += n
    w("by function kind (instructions before -> after optimization):\n")
    for name, n in kinds_before.most_common(top):
        w(f"    {n:8d} -> {kinds_after[name]:7d}  {name}\n")
    for title, passes, total in (("optimization", rec.opt_passes, opt),
                                 ("code generation", rec.emit_passes, emit)):
        total = total or 1.0
        # (an analysis's time is also inside the pass that asked for it)
        w(f"{title} passes (user+system s, % of its CPU time above):\n")
        for name, s in passes.most_common(top):
            w(f"    {s:7.3f}  {100 * s / total:5.1f}%  {name}\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", type=Path, help=".cu or .ptx file")
    ap.add_argument("--fuzz", metavar="SEED:COUNT", help="a batch of tools/fuzz.py's kernels instead")
    ap.add_argument("--block", help="also compile each kernel specialized for this block shape")
    ap.add_argument("--block-shapes", action="store_true",
                    help="with --fuzz: also compile each kernel specialized for its own launch")
    ap.add_argument("--passes", default=None, help="cpuify's pass pipeline (as --passes=)")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    if (args.file is None) == (args.fuzz is None):
        ap.error("give a .cu/.ptx file or --fuzz SEED:COUNT")
    os.environ["CPUIFY_NO_CACHE"] = "1"
    from cpuify.compiler import compile_ptx, compile_specialized, pipeline_options
    from cpuify.frontend.nvrtc import compile_to_ptx
    blocks: dict[str, tuple[int, int, int]] = {}
    if args.fuzz:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import fuzz  # type: ignore[import-not-found]
        seed, count = (int(x) for x in args.fuzz.split(":"))
        specs = [fuzz.generate(seed, i) for i in range(count)]
        ptx = compile_to_ptx(fuzz.render_module(specs), filename="fuzz.cu", arch=fuzz.ARCH,
                             options=fuzz.nvrtc_options()).ptx
        if args.block_shapes:
            blocks = {s.name: tuple(s.block) for s in specs}   # type: ignore[misc]
    elif args.file.suffix == ".ptx":
        ptx = args.file.read_text()
    else:
        ptx = compile_to_ptx(args.file.read_text(), filename=str(args.file)).ptx
    options = [f"--passes={args.passes}"] if args.passes is not None else []
    pipeline = pipeline_options(options)[0]
    rec = Recorder()
    c0 = time.process_time()
    compiled = compile_ptx(ptx, pipeline=pipeline)
    if args.block:
        shape = tuple(int(x) for x in args.block.split(","))
        shape = (shape + (1, 1))[:3]
        blocks = {name: shape for name in compiled.kernels}   # type: ignore[misc]
    for name, shape in blocks.items():
        if name in compiled.kernels:
            compile_specialized(ptx, name, shape, passes=pipeline.pipeline())
    print(f"CPU {time.process_time() - c0:.2f} s for {len(compiled.kernels)} kernels"
          f"{f' and {len(blocks)} specializations' if blocks else ''}")
    report(rec, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
