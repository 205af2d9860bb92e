"""Distributed execution's figures (issue #19, docs/distributed.md), all from one script:

    python -m benchmarks.distributed [--size small|default] [--ranks 1,2,3,4,8] [--json OUT]

For every workload of benchmarks/distributed_workloads.py (CUDA kernels through the Python
API, unchanged):
  * correctness: the outputs' digest with each rank count (mpiexec -n N) against the run
    without MPI (bit-identical or not);
  * communication: bytes the engine moved before launches against the exact minimum for
    the same partitions (the stale parts of the read sets, from the access maps), and the
    bytes gathered back to rank 0;
  * overhead: one rank with the engine (CPUIFY_DISTRIBUTED=1: every launch planned from
    the access maps) against no MPI, same thread count, best of the runs;
  * strong scaling on this machine's cores: N ranks of cores/N threads each against one
    process of one thread and of all cores;
  * a model (cpuify.distributed.model: measured compute per block, the bytes each rank
    count moves from simulated trackers, MPI latency and bandwidth measured by ping-pong)
    predicting the time on 1..64 nodes of this machine's cores.
Each configuration runs in its own process (mpiexec or not), the workloads once to compile
and build their maps, then timed."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKER = str(ROOT / "benchmarks" / "distributed_workloads.py")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("CPUIFY_DISTRIBUTED", None)
    env.update(extra)
    return env


def _lines(cmd: list[str], timeout: float, **extra: str) -> dict[str, dict[str, Any]]:
    proc = subprocess.run(cmd, env=_env(**extra), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-1500:]}\n{proc.stderr[-2000:]}")
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            out[r["name"]] = r
    return out


def _link(mpiexec: str) -> dict[str, float]:
    code = ("import json; from cpuify.distributed.model import measure_link; from mpi4py import MPI\n"
            "l = measure_link()\n"
            "MPI.COMM_WORLD.Get_rank() or print(json.dumps({'latency_s': l.latency_s, 'bandwidth': l.bandwidth}))")
    proc = subprocess.run([mpiexec, "-n", "2", sys.executable, "-c", code], env=_env(CPUIFY_DISTRIBUTED="0"),
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="small", choices=["small", "default"])
    ap.add_argument("--ranks", default="1,2,3,4,8", help="rank counts (default 1,2,3,4,8)")
    ap.add_argument("--only", nargs="*", default=[], help="workloads to run (default all)")
    ap.add_argument("--repeats", type=int, default=2, help="runs per configuration (best time kept)")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", help="write every number here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from cpuify.distributed.engine import mpiexec_path
    mpiexec = mpiexec_path()
    if mpiexec is None:
        print("no mpiexec: pip install -e '.[distributed]'", file=sys.stderr)
        return 2
    cores = os.cpu_count() or 1
    counts = [int(x) for x in args.ranks.split(",")]
    base = [sys.executable, WORKER, args.size, *args.only, "--timed"]

    def best(runs: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
        out = {}
        for name in runs[0]:
            out[name] = min((r[name] for r in runs), key=lambda r: r["seconds"])
        return out

    link = _link(mpiexec)
    print(f"MPI link (ping-pong, ranks 0-1): latency {link['latency_s'] * 1e6:.2f} us, "
          f"bandwidth {link['bandwidth'] / 1e9:.2f} GB/s; {cores} cores", flush=True)
    # rounds alternate the no-MPI and one-rank runs, so both see the same machine load
    plain_runs, one_runs = [], []
    for _ in range(args.repeats):
        plain_runs.append(_lines(base, args.timeout, CPUIFY_DISTRIBUTED="0"))
        one_runs.append(_lines([mpiexec, "-n", "1", *base, "--model", json.dumps(link)],
                               args.timeout, CPUIFY_DISTRIBUTED="1"))
    plain, one = best(plain_runs), best(one_runs)
    serial = best([_lines(base, args.timeout, CPUIFY_DISTRIBUTED="0", CPUIFY_NUM_THREADS="1")
                   for _ in range(args.repeats)])
    per_n: dict[int, dict[str, dict[str, Any]]] = {1: one}
    for n in counts:
        if n == 1:
            continue
        threads = str(max(1, cores // n))
        per_n[n] = best([_lines([mpiexec, "-n", str(n), *base], args.timeout, CPUIFY_NUM_THREADS=threads)
                         for _ in range(args.repeats)])

    names = list(plain)
    rows = []
    hdr = (f"{'workload':11} {'same':5} {'noMPI':>8} {'1 thr':>8} {'1 rank':>8} {'ovh':>6} "
           + " ".join(f"{f'{n} ranks':>9}" for n in counts if n > 1)
           + f" {'moved/min':>9} {'moved MB':>9}   predicted speedup on 2,4,8,16,32,64 nodes")
    print(hdr)
    overheads = []
    for name in names:
        same = all(per_n[n][name]["digest"] == plain[name]["digest"] for n in per_n)
        ovh = one[name]["seconds"] / plain[name]["seconds"] - 1
        overheads.append(ovh)
        big = max(per_n)
        moved = per_n[big][name]["bytes_moved"]
        minimum = per_n[big][name]["bytes_minimum"]
        ratio = moved / minimum if minimum else (1.0 if moved == 0 else float("inf"))
        pred = one[name].get("predicted", {})
        speedups = [pred["1"] / pred[str(k)] for k in (2, 4, 8, 16, 32, 64)] if pred else []
        row = {"name": name, "identical": same, "no_mpi_s": plain[name]["seconds"],
               "one_thread_s": serial[name]["seconds"], "one_rank_s": one[name]["seconds"],
               "overhead": ovh, "ranks": {n: per_n[n][name] for n in per_n},
               "moved_over_minimum": ratio, "predicted_s": pred}
        rows.append(row)
        print(f"{name:11} {'yes' if same else 'NO':5} {plain[name]['seconds']:8.4f} "
              f"{serial[name]['seconds']:8.4f} {one[name]['seconds']:8.4f} {ovh * 100:5.1f}% "
              + " ".join(f"{per_n[n][name]['seconds']:9.4f}" for n in counts if n > 1)
              + f" {ratio:9.2f} {moved / 1e6:9.2f}   "
              + " ".join(f"{s:.1f}" for s in speedups), flush=True)
    print(f"median one-rank overhead: {statistics.median(overheads) * 100:.1f}%  "
          f"(bytes over minimum for the largest rank count; times in seconds, best of "
          f"{args.repeats}; N ranks use {cores}/N threads each)")
    if args.json:
        Path(args.json).write_text(json.dumps({"link": link, "cores": cores, "size": args.size,
                                               "rows": rows}, indent=1, default=str))
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
