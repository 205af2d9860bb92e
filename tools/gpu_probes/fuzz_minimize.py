"""On the GPU machine: minimize fuzz kernels whose GPU results differ from cpuify's interpreter.
python3 fuzz_minimize.py OUT.jsonl SEED I1,I2,... [--fake]   (PYTHONPATH=src:tools)

The GPU side runs through CuPy, which compiles with -ftz=true appended (so the interpreter
side compiles with it too), or with GPU_VIA=nvcc as a whole program built by nvcc without
it (slower: one nvcc build per variant).  --fake runs cpuify in place of the GPU (to try
the script without one)."""
import json, os, sys, time, multiprocessing as mp
import numpy as np

FAKE = "--fake" in sys.argv


VIA_NVCC = os.environ.get("GPU_VIA") == "nvcc"


def gpu_outputs(spec):
    import fuzz
    src = fuzz.PRELUDE + fuzz.render_kernel(spec)
    args = fuzz.make_args(spec)
    if VIA_NVCC:
        import subprocess, tempfile
        from pathlib import Path
        with tempfile.TemporaryDirectory() as d:
            data = Path(d) / "out.bin"
            (Path(d) / "p.cu").write_text(fuzz.render_program([spec], str(data)))
            subprocess.run(["nvcc", "-arch=sm_90", "-O1", "-o", f"{d}/p", f"{d}/p.cu"],
                           check=True, capture_output=True)
            subprocess.run([f"{d}/p"], check=True, capture_output=True, timeout=120)
            return fuzz.program_outputs(data.read_bytes(), 0, args)[0]
    if FAKE:
        import cpuify
        mod = cpuify.RawModule(code=src)
        a = fuzz._copy(args)
        mod.get_function(spec.name)(spec.grid, spec.block, tuple(a[:7]) + (np.int32(spec.p0), np.uint32(spec.p1)))
        return fuzz.outputs(a)
    import cupy as cp
    mod = cp.RawModule(code=src, options=("-arch=sm_90",))
    dev = [cp.asarray(x) if isinstance(x, np.ndarray) else x for x in args]
    mod.get_function(spec.name)(spec.grid, spec.block, tuple(dev))
    cp.cuda.runtime.deviceSynchronize()
    host = list(args)
    for k in fuzz.ARRAY_ARGS:
        host[k] = dev[k].get()
    return fuzz.outputs(host)


def interp_outputs(spec):
    import fuzz
    from cpuify.frontend.nvrtc import compile_to_ptx
    from cpuify.interp import InterpModule
    opts = () if VIA_NVCC or FAKE else ("-ftz=true",)     # as CuPy compiles the GPU side
    interp = InterpModule(compile_to_ptx(fuzz.render_module([spec]), filename="fuzz.cu",
                                         arch=fuzz.ARCH, options=opts).ptx)
    a = fuzz._copy(fuzz.make_args(spec))
    interp.launch(spec.name, spec.grid, spec.block, a)
    return fuzz.outputs(a)


def work(item):
    seed, index = item
    import fuzz
    fuzz._setup_env()
    spec = fuzz.generate(seed, index)
    deadline = time.time() + float(os.environ.get("MIN_SECONDS", "150"))
    def diff(s):
        try:
            return fuzz.compare(s, interp_outputs(s), gpu_outputs(s))
        except Exception:   # a variant that does not compile or run: not the same failure
            return None
    first = diff(spec)
    if not first:
        return {"kernel": spec.name, "status": "no difference here"}
    def failing(s):
        return time.time() < deadline and diff(s) is not None
    small = fuzz.minimize(spec, failing, lambda m: None)
    return {"kernel": spec.name, "status": "minimized" if time.time() < deadline else "partly minimized",
            "diff": diff(small) or first, "launch": [small.grid, small.block, small.p0, small.p1],
            "source": fuzz.render_kernel(small)}


def main():
    out, seed, idx = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")]
    procs = int(os.environ.get("PROCS", "14"))
    with open(out, "a") as f, mp.get_context("spawn").Pool(procs) as pool:
        for r in pool.imap_unordered(work, [(seed, i) for i in idx]):
            f.write(json.dumps(r) + "\n"); f.flush()
            print(r["kernel"], r["status"], (r.get("diff") or "")[:150], flush=True)


if __name__ == "__main__":
    main()
