"""On the GPU machine: the differential fuzzer with the GPU as the referee, end to end.

    PYTHONPATH=src:tools python3 tools/gpu_probes/gpu_fuzz.py OUT.jsonl SEED COUNT [--ftz]

Builds the fuzzer's kernels (tools/fuzz.py, batches of 40) as whole programs with the
system nvcc (sm_90), runs them, compares each kernel's outputs with cpuify's reference
interpreter on the same inputs, and minimizes every kernel that differs
(fuzz_minimize.work: GPU through CuPy vs the interpreter).  One JSON line per differing
kernel, and a summary line.  --ftz compiles both sides with -ftz=true (CuPy's mode)."""
import json, os, subprocess, sys, tempfile, multiprocessing as mp
from pathlib import Path


HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def batch(item):
    seed, first, n, ftz, work = item
    import fuzz
    from cpuify.frontend.nvrtc import compile_to_ptx
    from cpuify.interp import InterpModule
    specs = [fuzz.generate(seed, i) for i in range(first, first + n)]
    d = Path(work) / f"b{first}"
    d.mkdir(parents=True, exist_ok=True)
    data = d / "out.bin"
    (d / "p.cu").write_text(fuzz.render_program(specs, str(data)))
    flags = ["-ftz=true"] if ftz else []
    b = subprocess.run(["nvcc", "-arch=sm_90", "-O1", *flags, "-o", str(d / "p"), str(d / "p.cu")],
                       capture_output=True, text=True)
    if b.returncode:
        return [{"batch": first, "error": "build: " + b.stderr[-500:]}]
    r = subprocess.run([str(d / "p")], capture_output=True, text=True, timeout=300)
    if r.returncode:
        return [{"batch": first, "error": "run: " + r.stderr[-500:]}]
    blob, pos = data.read_bytes(), 0
    opts = ("-ftz=true",) if ftz else ()
    interp = InterpModule(compile_to_ptx(fuzz.render_module(specs), filename="fuzz.cu",
                                         arch=fuzz.ARCH, options=opts).ptx)
    out = []
    for s in specs:
        args = fuzz.make_args(s)
        got, pos = fuzz.program_outputs(blob, pos, args)
        a = fuzz._copy(args)
        try:
            interp.launch(s.name, s.grid, s.block, a)
            diff = fuzz.compare(s, fuzz.outputs(a), got)
        except Exception as e:
            diff = f"interpreter error: {e!r}"
        out.append({"kernel": s.name, "diff": diff})
    return out


def main():
    dest, seed, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ftz = "--ftz" in sys.argv
    if not ftz:
        os.environ["GPU_VIA"] = "nvcc"      # minimize against nvcc builds, as the run was
    work = tempfile.mkdtemp()
    items = [(seed, f, min(40, count - f), ftz, work) for f in range(0, count, 40)]
    procs = int(os.environ.get("PROCS", "15"))
    differing = []
    with mp.get_context("spawn").Pool(procs) as pool, open(dest, "a") as f:
        for res in pool.imap_unordered(batch, items):
            for r in res:
                if r.get("error") or r.get("diff"):
                    f.write(json.dumps(r) + "\n"); f.flush()
                    if r.get("diff"):
                        differing.append(int(r["kernel"].rsplit("_", 1)[1]))
        print(f"seed {seed}: {len(differing)} of {count} differ", flush=True)
        if differing:
            import fuzz_minimize
            for r in pool.imap_unordered(fuzz_minimize.work, [(seed, i) for i in differing]):
                f.write(json.dumps(r) + "\n"); f.flush()
                print(r["kernel"], r["status"], (r.get("diff") or "")[:200], flush=True)
        f.write(json.dumps({"summary": True, "seed": seed, "count": count, "ftz": ftz,
                            "differ": len(differing)}) + "\n")


if __name__ == "__main__":
    main()
