"""The Polygeist paper's Fig. 9 (Rodinia's backprop layer, `if (tx == 0) node[ty] = ...;`
before a barrier, and the weights written back to `hidden` before the `tx == 0` threads write
`output`), through cpuify with the default pipeline, without the launch-time variant for
non-overlapping arrays, without barrier-motion, and with no passes at all, in one process.

    python -m benchmarks.barrier_motion [--blocks 4096] [--rounds 40] [--json out.json]

The calls of the builds are interleaved (this machine is shared and noisy); each round
times a batch of calls, and the best round counts, as wall time and as the process's CPU
time (all of cpuify's workers together: less sensitive to being descheduled).  `hidden` is
restored before each round (the kernel writes it).  The outputs of the builds are compared
with each other and with NumPy."""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import cpuify

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

#: build -> (options, the launch-time variant for non-overlapping arrays allowed)
BUILDS = {
    "passes": ((), True),
    "no noalias variant": ((), False),
    "no barrier-motion": (("--disable-pass=barrier-motion",), True),
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
    for _ in range(args.rounds):
        for name, f in fns.items():
            out, hidden = outs[name], hiddens[name]
            np.copyto(hidden, hidden0)
            t_cpu, t_wall = time.process_time(), time.perf_counter()
            for _ in range(args.batch):
                f(grid, block, (inp, hidden, out, np.int32(hid)))
            cpu = (time.process_time() - t_cpu) / args.batch
            wall = (time.perf_counter() - t_wall) / args.batch
            best[name] = [min(best[name][0], wall), min(best[name][1], cpu)]
    base = best["no passes"]
    print(f"Fig. 9 layer, {blocks} blocks of 16 x 16 (best of {args.rounds} rounds of "
          f"{args.batch} calls)")
    print(f"{'build':<20} {'wall ms':>9} {'cpu ms':>9} {'no passes / this (wall)':>24}")
    for name, (wall, cpu) in best.items():
        print(f"{name:<20} {wall * 1e3:>9.3f} {cpu * 1e3:>9.3f} {base[0] / wall:>24.2f}")
    variant_runs = {name: f.noalias_launches for name, f in fns.items()}
    print("launches that ran the variant for non-overlapping arrays: " +
          ", ".join(f"{name} {n}" for name, n in variant_runs.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"blocks": blocks, "best": best, "noalias_launches": variant_runs},
                      fh, indent=1)


if __name__ == "__main__":
    main()
