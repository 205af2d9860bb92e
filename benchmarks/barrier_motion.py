"""The Polygeist paper's Fig. 9 (Rodinia's backprop layer, `if (tx == 0) node[ty] = ...;`
before a barrier, and the weights written back to `hidden` before the `tx == 0` threads write
`output`), through cpuify with the default pipeline, with each of the passes that change it
left out in turn, and with no passes at all, in one process: issue 15's figure "Fig. 9:
>= 1.5x faster with the passes than without".

    CPUIFY_NUM_THREADS=1 python -m benchmarks.barrier_motion [--blocks 4096] [--rounds 40]
    CPUIFY_NUM_THREADS=2 python -m benchmarks.barrier_motion ...

The calls of the builds are interleaved (this machine is shared and noisy); each round
times a batch of calls of every build, and prints per build the best round, as wall time
and as the process's CPU time (all of cpuify's workers together: with one worker, the CPU
time of one thread), and the ratio "no passes / this": the median over the rounds of the
ratio within each round (and the range).  `hidden` is restored before each round (the
kernel writes it).  The outputs of the builds are compared with each other and with NumPy."""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import cpuify
from cpuify.transforms.pass_manager import default_pipeline

SOURCE = r'''
#define H 16
#define W 16
extern "C" __global__ void fig9(const float *input, float *hidden, float *output, int hid) {
    __shared__ float node[H];
    __shared__ float weights[H][W];
    int by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
    int index = (hid + 1) * H * by + (hid + 1) * ty + tx + 1 + (hid + 1);
    if (tx == 0) node[ty] = input[H * by + ty + 1];
    __syncthreads();                     // orders nothing: barrier-motion moves it down
    weights[ty][tx] = hidden[index];
    __syncthreads();
    weights[ty][tx] = weights[ty][tx] * node[ty];
    __syncthreads();
    for (int p = 2; p <= H; p *= 2) {
        if (ty % p == 0) weights[ty][tx] += weights[ty + p / 2][tx];
        __syncthreads();
    }
    hidden[index] = weights[ty][tx];
    __syncthreads();                     // orders hidden[] before output[]: needed only
    if (tx == 0) output[by * hid + ty] = weights[tx][ty];   // when the two may overlap
}'''

#: the default pipeline with barrier-elimination's rule as the paper states it
PAPER_RULE = "--passes=" + ",".join(
    "barrier-elimination{adjacent_intervals=false}" if p == "barrier-elimination" else p
    for p in default_pipeline())

#: build -> (options, the launch-time variant for non-overlapping arrays allowed)
BUILDS = {
    "passes": ((), True),
    "no noalias variant": ((), False),
    "no store-forwarding": (("--disable-pass=store-forwarding",), True),
    "paper's barrier rule": ((PAPER_RULE,), True),
    "no barrier-motion": (("--disable-pass=barrier-motion",), True),
    "no thread-index-ranges": (("--disable-pass=thread-index-ranges",), True),
    "no passes": (("--passes=",), True),
}


def reference(inp: np.ndarray, hidden: np.ndarray, blocks: int, hid: int) -> np.ndarray:
    w = hidden.reshape(-1, hid + 1)[1:, 1:].astype(np.float64)     # rows of input units
    x = inp[1:].astype(np.float64)
    return (w * x[:, None]).reshape(blocks, 16, hid).sum(axis=1).ravel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--batch", type=int, default=20, help="calls per timed round")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    hid, blocks = 16, args.blocks
    rng = np.random.default_rng(0)
    # (node values in [0.5, 1): repeated calls neither overflow nor reach subnormals)
    inp = (0.5 + 0.5 * rng.random(16 * blocks + 1)).astype(np.float32)
    hidden0 = rng.random((hid + 1) * (16 * blocks + 1), dtype=np.float32)
    ref = reference(inp, hidden0, blocks, hid)
    grid, block = (1, blocks), (16, 16)
    fns, outs, hiddens = {}, {}, {}
    for name, (options, variant) in BUILDS.items():
        os.environ["CPUIFY_NOALIAS_VARIANTS"] = "1" if variant else "0"
        f = cpuify.RawModule(code=SOURCE, options=options).get_function("fig9")
        out = np.zeros(blocks * hid, np.float32)
        for _ in range(3):          # the generic code, then the code for 16 x 16 blocks
            hidden = hidden0.copy()
            f(grid, block, (inp, hidden, out, np.int32(hid)))
            np.testing.assert_allclose(out, ref, rtol=1e-5, err_msg=name)
        fns[name], outs[name], hiddens[name] = f, out, hidden
    os.environ.pop("CPUIFY_NOALIAS_VARIANTS")
    best = {name: [float("inf"), float("inf")] for name in BUILDS}
    ratios: dict[str, list[float]] = {name: [] for name in BUILDS}
    for _ in range(args.rounds):
        cpu_round = {}
        for name, f in fns.items():
            out, hidden = outs[name], hiddens[name]
            np.copyto(hidden, hidden0)
            t_cpu, t_wall = time.process_time(), time.perf_counter()
            for _ in range(args.batch):
                f(grid, block, (inp, hidden, out, np.int32(hid)))
            cpu = (time.process_time() - t_cpu) / args.batch
            wall = (time.perf_counter() - t_wall) / args.batch
            best[name] = [min(best[name][0], wall), min(best[name][1], cpu)]
            cpu_round[name] = cpu
        for name in BUILDS:
            ratios[name].append(cpu_round["no passes"] / cpu_round[name])
    base = best["no passes"]
    workers = os.environ.get("CPUIFY_NUM_THREADS", "all cores")
    print(f"Fig. 9 layer, {blocks} blocks of 16 x 16, CPUIFY_NUM_THREADS={workers} (best of "
          f"{args.rounds} interleaved rounds of {args.batch} calls)")
    print(f"{'build':<24} {'wall ms':>8} {'cpu ms':>8} {'no passes / this (cpu, best)':>29} "
          f"{'per round: median [min, max]':>29}")
    for name, (wall, cpu) in best.items():
        r = sorted(ratios[name])
        print(f"{name:<24} {wall * 1e3:>8.3f} {cpu * 1e3:>8.3f} {base[1] / cpu:>29.2f} "
              f"{r[len(r) // 2]:>15.2f} [{r[0]:.2f}, {r[-1]:.2f}]")
    variant_runs = {name: f.noalias_launches for name, f in fns.items()}
    print("launches that ran the variant for non-overlapping arrays: " +
          ", ".join(f"{name} {n}" for name, n in variant_runs.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"blocks": blocks, "workers": workers, "best": best, "ratios": ratios,
                       "noalias_launches": variant_runs},
                      fh, indent=1)


if __name__ == "__main__":
    main()
