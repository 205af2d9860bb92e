"""Compare the LLVM IR two checkouts of cpuify generate for the benchmark suite's kernels.

    python tools/llvm_ir_diff.py /work/main /work/wt-x [--out /tmp/llvm-ir-diff]

For each workload of benchmarks/suite (its CUDA source, compiled to PTX once with the first
checkout's NVRTC driver), `cpuify llvm --raw` (before LLVM's optimization) and `cpuify llvm`
(after) run with each checkout's sources; the files that differ are listed.  A change that
should not change code generation (a refactoring of the lowering) must list none."""

from __future__ import annotations

import argparse
import filecmp
import importlib
import os
import subprocess
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path, help="checkout whose IR is the reference")
    ap.add_argument("after", type=Path, help="checkout to compare")
    ap.add_argument("--out", type=Path, default=Path("/tmp/llvm-ir-diff"))
    ap.add_argument("--reuse-before", action="store_true",
                    help="keep the first checkout's files from an earlier run with the same "
                         "--out (for a series of comparisons against one fixed checkout)")
    args = ap.parse_args()
    sys.path.insert(0, str(args.before))
    names = sorted(p.stem for p in (args.before / "benchmarks/suite/workloads").glob("*.py")
                   if p.stem != "__init__")
    ptx_dir = args.out / "ptx"
    ptx_dir.mkdir(parents=True, exist_ok=True)
    differ = 0
    for name in names:
        w = importlib.import_module(f"benchmarks.suite.workloads.{name}").WORKLOAD
        ptx = ptx_dir / f"{name}.ptx"
        if not ptx.exists():
            cu = ptx_dir / f"{name}.cu"
            cu.write_text(w.cuda_source)
            r = _cpuify(args.before, ["ptx", *w.cuda_options, str(cu)])
            if r.returncode:
                print(f"{name}: no PTX: {r.stderr.strip()[-300:]}")
                continue
            ptx.write_text(r.stdout)
        for mode in ("raw", "opt"):
            files = []
            for side, root in (("before", args.before), ("after", args.after)):
                f = args.out / side / f"{name}.{mode}.ll"
                files.append(f)
                if side == "before" and args.reuse_before and f.exists():
                    continue
                r = _cpuify(root, ["llvm", str(ptx)] + (["--raw"] if mode == "raw" else []))
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(r.stdout if r.returncode == 0 else "FAILED\n" + r.stderr)
            if not filecmp.cmp(*files, shallow=False):
                differ += 1
                print(f"{name} ({mode}): differs: diff {files[0]} {files[1]}")
    print(f"{2 * len(names) - differ} of {2 * len(names)} identical")
    return 1 if differ else 0


def _cpuify(root: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(root / "src"))
    return subprocess.run([sys.executable, "-m", "cpuify.cli.main", *argv], env=env,
                          capture_output=True, text=True)


if __name__ == "__main__":
    sys.exit(main())
