"""GPU ground truth for tests/test_cooperative_groups.py: runs its kernels with CuPy on the GPU
on fixed inputs and saves inputs and outputs (gpu_cg.npz in $OUT); compare.py runs cpuify on
the same inputs.  The kernel sources are read from the test file (not imported: no cpuify here)."""
import ast, os, sys, glob
import numpy as np
import cupy as cp

here = os.path.dirname(os.path.abspath(__file__))
test_file = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "tests",
                                                                "test_cooperative_groups.py")
tree = ast.parse(open(test_file).read())
S = {n.targets[0].id: n.value.value for n in tree.body
     if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
     and isinstance(n.targets[0], ast.Name)}
sys.path.insert(0, here)
from cases import CASES   # (the same list compare.py uses)

incs = [d for d in glob.glob("/usr/local/cuda*/include") + glob.glob(os.path.join(
    os.path.dirname(cp.__file__), "..", "nvidia", "*", "include")) if os.path.isdir(d)]
opts = ["-std=c++17"] + [f"-I{d}" for d in incs]
mods = {}
out = {}
for case in CASES:
    key = (case["src"], case["arch"])
    try:
        if key not in mods:
            o = list(opts) + (["--gpu-architecture=compute_80"] if case["arch"] else [])
            mods[key] = cp.RawModule(code=S["HEADERS"] + S[case["src"]], options=tuple(o))
        args = case["make"]()
        dev = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        mods[key].get_function(case["kernel"])(case["grid"], case["block"], tuple(dev))
        cp.cuda.Device().synchronize()
        for k, (a, d) in enumerate(zip(args, dev)):
            if isinstance(a, np.ndarray):
                out[f"{case['name']}_in{k}"] = a
                out[f"{case['name']}_out{k}"] = cp.asnumpy(d)
        print("ran", case["name"], flush=True)
    except Exception as e:   # a failing case must not lose the others
        print("FAILED", case["name"], type(e).__name__, str(e)[:300], flush=True)
np.savez(os.path.join(os.environ.get("OUT", "."), "gpu_cg.npz"), **out)
