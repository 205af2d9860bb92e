"""The launches of tests/test_cooperative_groups.py that probe_cg.py runs on the GPU."""
import numpy as np

CASES = []


def case(name, src, kernel, grid, block, make, arch=None):
    CASES.append(dict(name=name, src=src, kernel=kernel, grid=grid, block=block, make=make, arch=arch))


def rng(seed):
    return np.random.default_rng(seed)


for n in (1, 2, 4, 8, 16, 32):
    case(f"tile{n}", "TILES", f"tile{n}", (2,), (64,),
         lambda n=n: (rng(n).integers(-100, 100, 128, dtype=np.int32), np.zeros(128 * 17, np.int32)))
for n in (8, 32):
    case(f"redi{n}", "REDUCE", f"redi{n}", (1,), (64,),
         lambda n=n: (rng(10 + n).integers(-50, 50, 64).astype(np.int32), np.zeros(64 * 8, np.int32)))
    for tag, dt in (("f", np.float32), ("d", np.float64)):
        case(f"red{tag}{n}", "REDUCE", f"red{tag}{n}", (1,), (64,),
             lambda n=n, dt=dt: ((rng(20 + n).standard_normal(64) * 10).astype(dt), np.zeros(64 * 8, dt)))
    case(f"redb{n}", "REDUCE", f"redb{n}", (1,), (64,),
         lambda n=n: (rng(30 + n).integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32),
                      np.zeros(192, np.uint32)))
case("coalesced", "COALESCED", "coalesced", (2,), (64,),
     lambda: (rng(40).integers(-100, 100, 128, dtype=np.int32), np.zeros(128 * 12, np.int32)))
case("partitions", "COALESCED", "partitions", (2,), (64,),
     lambda: (rng(41).integers(-100, 100, 128, dtype=np.int32), np.zeros(128 * 8, np.int32)))
case("invoke", "COALESCED", "invoke", (2,), (64,),
     lambda: (rng(42).integers(-100, 100, 128, dtype=np.int32), np.zeros(128, np.int32),
              np.zeros(1, np.int32)))
for k in ("halves", "two_sites", "subset"):
    case(f"syncwarp_{k}", "SYNCWARP", k, (1,), (64,),
         lambda: (rng(50).integers(-100, 100, 64).astype(np.int32), np.zeros(64, np.int32)))
case("named_pc", "NAMED", "producer_consumer", (1,), (128,),
     lambda: (rng(60).integers(-100, 100, 192).astype(np.int32), np.zeros(128, np.int32), np.int32(3)))
case("named_halves", "NAMED", "halves", (1,), (128,),
     lambda: (rng(61).integers(-100, 100, 128).astype(np.int32), np.zeros(128, np.int32)))


def _sizes():
    r = rng(70)
    x = r.integers(0, 256, 3 * 16 * 64, dtype=np.uint8)
    s = r.integers(0, 17, 64).astype(np.int32)
    s[:3] = (0, 16, 5)
    return x, np.zeros_like(x), s


case("cp_sizes", "CP_ASYNC", "sizes", (1,), (64,), _sizes, arch="sm_80")
case("cp_ignore", "CP_ASYNC", "ignore_src", (1,), (64,),
     lambda: (rng(71).integers(-2**31, 2**31, (64, 4), dtype=np.int64).astype(np.int32),
              np.zeros((64, 4), np.int32)), arch="sm_80")
case("cp_pipeline", "CP_ASYNC", "pipeline", (1,), (128,),
     lambda: (rng(72).standard_normal(640).astype(np.float32), np.zeros(128, np.float32), np.int32(5)),
     arch="sm_80")
case("cp_cg", "CP_ASYNC", "cg_copy", (2,), (256,),
     lambda: (rng(73).standard_normal(1024).astype(np.float32), np.zeros(512, np.float32)), arch="sm_80")


def _fns():
    r = rng(80)
    n = 512
    m = r.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    m[:32], m[32:64], m[64:96] = 0xAAAAAAAA, 0, 0xFFFFFFFF
    m[96:256] &= r.integers(0, 2**32, 160, dtype=np.uint64).astype(np.uint32)
    base = r.integers(0, 32, n).astype(np.uint32)   # (a base above 31 is undefined in PTX)
    off = r.integers(-34, 35, n).astype(np.int32)
    return m, base, off, np.zeros(n, np.uint32), np.int32(n)


case("fns", "FNS", "fns", (4,), (128,), _fns)
for n in (64, 128, 256, 512):
    case(f"mw{n}", "MULTI_WARP", f"mw{n}", (2,), (512,),
         lambda n=n: (rng(90 + n).integers(-100, 100, 1024).astype(np.int32), np.zeros(1024 * 10, np.int32)),
         arch="sm_80")
case("mw_user_memory", "MULTI_WARP", "user_memory", (1,), (256,),
     lambda: (np.arange(256, dtype=np.int32), np.zeros(256, np.int32)))
case("block_group", "BLOCK", "block_group", (2,), (16, 4), lambda: (np.zeros(2 * 64 * 8, np.int32),))
case("thread_pipeline", "PIPELINE", "thread_pipeline", (1,), (128,),
     lambda: (rng(100).standard_normal(512).astype(np.float32), np.zeros(128, np.float32), np.int32(4)),
     arch="sm_80")
case("more", "MORE", "more", (1,), (64,),
     lambda: (rng(110).standard_normal(64), np.zeros(128), np.zeros(64, np.int64), np.zeros(256, np.int32)))
