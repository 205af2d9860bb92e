"""Figures of `cpuify nvcc` programs (issue 3), printed as a table:

  - uncached build time of a ~300-line program with three kernels (bench_programs/app300.cu);
    the runtime library is built once beforehand, as libcudart is installed once
  - launch overhead of an empty kernel from C host code (bench_programs/launch.cu)
  - cudaMemcpy of 256 MiB host->device and device->host against memcpy, same process

    python tools/bench_programs.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent / "bench_programs"
CPUIFY = [sys.executable, "-m", "cpuify.cli.main", "nvcc"]


def build(src: Path, out: Path, *, uncached: bool) -> float:
    env = dict(os.environ)
    if uncached:
        env["CPUIFY_NO_CACHE"] = "1"
    t0 = time.perf_counter()
    r = subprocess.run([*CPUIFY, "-O2", str(src), "-o", str(out)], env=env, capture_output=True, text=True)
    t = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"build of {src} failed:\n{r.stderr}")
    return t


def main() -> None:
    from cpuify.nvcc.rtlib import runtime_library
    runtime_library()
    with tempfile.TemporaryDirectory() as tmp:
        app = Path(tmp) / "app300"
        builds = [build(HERE / "app300.cu", app, uncached=True) for _ in range(3)]
        cached = build(HERE / "app300.cu", app, uncached=False)
        build(HERE / "app300.cu", app, uncached=False)
        cached = min(cached, build(HERE / "app300.cu", app, uncached=False))
        r = subprocess.run([str(app)], capture_output=True, text=True)
        assert r.stdout.strip().endswith("PASSED"), r.stdout + r.stderr
        launch = Path(tmp) / "launch"
        build(HERE / "launch.cu", launch, uncached=False)
        out = subprocess.run([str(launch)], capture_output=True, text=True, check=True).stdout
    lines = len((HERE / "app300.cu").read_text().splitlines())
    launch_us = float(re.search(r"launch_us ([\d.]+)", out).group(1))       # type: ignore[union-attr]
    pool_us = float(re.search(r"launch_pool_us ([\d.]+)", out).group(1))   # type: ignore[union-attr]
    m = re.search(r"memcpy_GBps ([\d.]+) h2d_GBps ([\d.]+) d2h_GBps ([\d.]+)", out)
    assert m
    mem, h2d, d2h = (float(x) for x in m.groups())
    print("| figure | result | target |")
    print("|---|---|---|")
    print(f"| uncached build of a {lines}-line, 3-kernel program (median of 3) | "
          f"{sorted(builds)[1]:.2f} s (cached: {cached:.2f} s) | < 10 s |")
    print(f"| launch of an empty kernel from C host code, 1 block / 64 blocks of 256 threads | "
          f"{launch_us:.2f} µs / {pool_us:.2f} µs | < 5 µs |")
    print(f"| cudaMemcpy 256 MiB host→device / device→host | {h2d:.1f} / {d2h:.1f} GB/s = "
          f"{h2d / mem:.0%} / {d2h / mem:.0%} of memcpy ({mem:.1f} GB/s) | ≥ 80% |")


if __name__ == "__main__":
    main()
