"""Ablation of the pass pipeline on the benchmark suite: the suite's cpuify-vs-OpenMP ratio
with every pass on, then with each pass of the default pipeline off in turn
(CPUIFY_DISABLE_PASSES), and with no passes at all.

    python -m benchmarks.ablation [--only NAME ...] [--json out.json]

Each configuration is one run of `python -m benchmarks --peers cpuify,omp` (its OpenMP
twin timed in the same process, so ratios survive this machine's drift); a pass that does
not fire on a workload leaves its code unchanged, so its column there is noise."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

from cpuify.transforms.pass_manager import default_pipeline


def run_suite(env_extra: dict[str, str], only: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "suite.json")
        cmd = [sys.executable, "-m", "benchmarks", "--peers", "cpuify,omp", "--no-scaling",
               "--no-plots", "--json", out]
        if only:
            cmd += ["--only", *only]
        env = dict(os.environ, **env_extra)
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
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
    args = ap.parse_args()
    configs: list[tuple[str, dict[str, str]]] = [("all passes", {})]
    configs += [(f"no {p}", {"CPUIFY_DISABLE_PASSES": p}) for p in default_pipeline()]
    configs.append(("no passes", {"CPUIFY_PASSES": ""}))
    results = {}
    for label, env in configs:
        results[label] = run_suite(env, args.only)
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
