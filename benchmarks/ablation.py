"""Ablation of the pass pipeline on the benchmark suite: the suite's cpuify-vs-OpenMP ratio
with every pass on, then with each pass of the default pipeline off in turn
(CPUIFY_DISABLE_PASSES), and with no passes at all.

    python -m benchmarks.ablation [--only NAME ...] [--json out.json]

Each configuration is one run of `python -m benchmarks --peers cpuify,omp` (its OpenMP
twin timed in the same process, so ratios survive this machine's drift).  The "all passes"
run compiles every kernel afresh and logs which passes touched each workload's kernels
(CPUIFY_PASS_LOG: changed them, or had their form converted for them); a configuration
with a pass off reruns only those workloads.  The others would run the same code, and
their "all passes" ratio stands in ('=' in the table): a full ablation takes a fraction
of the 28 suite runs it used to.

All configurations measure one commit: the suite runs from a temporary `git worktree` of
HEAD (`--no-pin`: from this checkout, uncommitted changes included, which may change while
the ablation runs)."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

from cpuify.transforms.pass_manager import default_pipeline


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_suite(env_extra: dict[str, str], only: list[str], root: str = ROOT) -> dict[str, float]:
    """One run of the suite: workload module -> its OpenMP-2t/cpuify ratio (the workloads
    that ran, were correct and had a twin)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "suite.json")
        cmd = [sys.executable, "-m", "benchmarks", "--peers", "cpuify,omp", "--no-scaling",
               "--no-plots", "--json", out]
        if only:
            cmd += ["--only", *only]
        env = dict(os.environ, **env_extra)
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, cwd=root)
        with open(out) as f:
            data = json.load(f)
    ratios = {}
    for w in data["workloads"]:
        omp = w.get("peers", {}).get("omp", {})
        if w.get("status") == "ok" and omp.get("status") == "ok" and \
                w["peers"]["cpuify"].get("correct"):
            ratios[w["module"]] = omp["ratio"]
    return ratios


def touched_passes(log_dir: str) -> dict[str, set[str]]:
    """Workload module -> the passes that touched one of its kernels, from the
    CPUIFY_PASS_LOG files the "all passes" run wrote (one per workload)."""
    touched: dict[str, set[str]] = {}
    for name in os.listdir(log_dir):
        if name.endswith(".jsonl"):
            with open(os.path.join(log_dir, name)) as f:
                touched[name[:-6]] = {p for line in f if line.strip()
                                      for p in json.loads(line)["touched"]}
    return touched


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--json")
    ap.add_argument("--no-pin", action="store_true",
                    help="run from this checkout instead of a worktree of HEAD")
    args = ap.parse_args()
    root = ROOT
    pinned = None
    if not args.no_pin:
        pinned = tempfile.mkdtemp(prefix="cpuify-ablation-")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", pinned, "HEAD"],
                       check=True)
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=False).stdout.strip()
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=False).stdout.strip()
        print(f"measuring commit {head}" + (" (uncommitted changes are not included)" if dirty else ""),
              flush=True)
        root = pinned
    try:
        _ablate(args, root)
    finally:
        if pinned is not None:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", pinned], check=False)


def _ablate(args: argparse.Namespace, root: str) -> None:
    with tempfile.TemporaryDirectory() as log_dir, tempfile.TemporaryDirectory() as cache:
        # (an empty cache: every kernel is compiled, so every pipeline run is logged)
        full = run_suite({"CPUIFY_PASS_LOG_DIR": log_dir, "CPUIFY_CACHE_DIR": cache},
                         args.only, root)
        touched = touched_passes(log_dir)
    print(f"{'all passes':40s} geomean vs OpenMP 2t {geomean(list(full.values())):.3f}", flush=True)
    configs: list[tuple[str, dict[str, str], list[str]]] = []
    for p in default_pipeline():
        runs = sorted(w for w in full if p in touched.get(w, set()))
        configs.append((f"no {p}", {"CPUIFY_DISABLE_PASSES": p}, runs))
    configs.append(("no passes", {"CPUIFY_PASSES": ""}, sorted(full)))
    # label -> workload -> (ratio, rerun): a workload no kernel of which the pass touched has
    # the same code as with every pass on, so its "all passes" ratio stands in (not rerun);
    # a rerun workload that failed or was wrong has no entry
    results: dict[str, dict[str, tuple[float, bool]]] = {
        "all passes": {w: (r, True) for w, r in full.items()}}
    for label, env, runs in configs:
        measured = run_suite(env, runs, root) if runs else {}
        results[label] = {w: (measured[w], True) if w in runs else (r, False)
                          for w, r in full.items() if w not in runs or w in measured}
        ratios = [r for r, _ in results[label].values()]
        print(f"{label:40s} geomean vs OpenMP 2t {geomean(ratios):.3f}"
              f"  ({len(runs)} rerun: {' '.join(runs) or '-'})", flush=True)
    print("\nworkload".ljust(22) + "".join(f"{label[:12]:>14}" for label in results))
    for n in sorted(full):
        cells = []
        for label, res in results.items():
            r, rerun = res.get(n, (float("nan"), True))
            cells.append(f"{f'{r:.3f}' if rerun else '=':>14}")
        print(n.ljust(21) + "".join(cells))
    print("\n  '=': the pass touched no kernel of the workload (the same code as with every "
          "pass on: its 'all passes' ratio counts in that column's geomean)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({label: {w: {"ratio": r, "rerun": rerun} for w, (r, rerun) in res.items()}
                       for label, res in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
