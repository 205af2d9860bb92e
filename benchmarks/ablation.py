"""Ablation of the pass pipeline on the benchmark suite: the suite's cpuify-vs-OpenMP ratio
with every pass on, then with each pass of the default pipeline off in turn
(CPUIFY_DISABLE_PASSES), and with no passes at all.

    python -m benchmarks.ablation [--only NAME ...] [--json out.json]

Each configuration is one run of `python -m benchmarks --peers cpuify,omp` (its OpenMP
twin timed in the same process, so ratios survive this machine's drift); a pass that does
not fire on a workload leaves its code unchanged, so its column there is noise.

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
            ratios[w["name"]] = omp["ratio"]
    return ratios


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
    configs: list[tuple[str, dict[str, str]]] = [("all passes", {})]
    configs += [(f"no {p}", {"CPUIFY_DISABLE_PASSES": p}) for p in default_pipeline()]
    configs.append(("no passes", {"CPUIFY_PASSES": ""}))
    results = {}
    for label, env in configs:
        results[label] = run_suite(env, args.only, root)
        print(f"{label:40s} geomean vs OpenMP 2t {geomean(list(results[label].values())):.3f}",
              flush=True)
    names = sorted(results["all passes"])
    print("\nworkload".ljust(22) + "".join(f"{label[:12]:>14}" for label in results))
    for n in names:
        print(n.ljust(21) + "".join(f"{results[label].get(n, float('nan')):>14.3f}"
                                    for label in results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
