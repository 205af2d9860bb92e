"""Runs the cases of probe_cg.py with cpuify on the inputs the GPU saw and compares outputs
bit for bit: PYTHONPATH=src python tools/gpu_cg/compare.py path/to/gpu_cg.npz [case ...]"""
import ast, os, sys
import numpy as np
import cpuify
from cpuify.frontend.nvrtc import compile_to_ptx

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from cases import CASES   # noqa: E402

tree = ast.parse(open(os.path.join(here, "..", "..", "tests", "test_cooperative_groups.py")).read())
S = {n.targets[0].id: n.value.value for n in tree.body
     if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
     and isinstance(n.targets[0], ast.Name)}
gpu = np.load(sys.argv[1])
only = sys.argv[2:]
mods = {}
for case in CASES:
    name = case["name"]
    if only and name not in only:
        continue
    if f"{name}_out1" not in gpu and f"{name}_out0" not in gpu:
        print(f"{name:16s} no GPU result")
        continue
    key = (case["src"], case["arch"])
    if key not in mods:
        mods[key] = cpuify.RawModule(ptx=compile_to_ptx(S["HEADERS"] + S[case["src"]], arch=case["arch"]).ptx)
    args = list(case["make"]())
    for k, a in enumerate(args):
        if isinstance(a, np.ndarray):
            args[k] = gpu[f"{name}_in{k}"].copy()
    mods[key].get_function(case["kernel"])(case["grid"], case["block"], tuple(args))
    bad = []
    for k, a in enumerate(args):
        if isinstance(a, np.ndarray):
            g = gpu[f"{name}_out{k}"]
            if not np.array_equal(a.view(np.uint8), g.view(np.uint8)):
                idx = np.argwhere(a.reshape(-1).view(g.dtype) != g.reshape(-1))[:5].ravel()
                bad.append(f"arg {k}: {len(idx)}+ differ at {idx.tolist()} cpuify {a.reshape(-1)[idx].tolist()} gpu {g.reshape(-1)[idx].tolist()}")
    print(f"{name:16s}", "same bits as the GPU" if not bad else "DIFFERS " + "; ".join(bad))
