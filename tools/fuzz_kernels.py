"""The differential fuzzer's kernels (tools/fuzz.py runs them): the kernel model, the random
generator and rendering to CUDA.

Generation is deterministic from (seed, kernel index).  The kernels are well-defined CUDA (no
data races except through atomics, no out-of-bounds access, no C++ undefined behaviour), so
any difference between the ways fuzz.py runs them is a cpuify bug."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


N_IN = 256           # words of each input array
N_GAT = 16           # global atomic words (u32)
N_GAT64 = 4          # global atomic words (u64)
N_SAT = 4            # shared atomic words (u32)
TICKET_SENTINEL = 0xDEADBEEF
ARCH = "compute_80"  # __reduce_add_sync needs sm_80


def nvrtc_options() -> tuple[str, ...]:
    """--ftz (CPUIFY_FUZZ_FTZ=1, inherited by the workers): every kernel compiled with
    -ftz=true, as CuPy compiles (f32 subnormals flush; native code may do it with the CPU's
    DAZ/FTZ switches, the interpreter in its own way)."""
    return ("-ftz=true",) if os.environ.get("CPUIFY_FUZZ_FTZ") == "1" else ()

BLOCKS = [(32, 1, 1), (64, 1, 1), (33, 1, 1), (7, 1, 1), (96, 1, 1), (16, 4, 1), (8, 4, 2),
          (5, 3, 2), (128, 1, 1), (4, 4, 4), (17, 3, 1), (1, 1, 1), (48, 1, 1), (32, 2, 1),
          (10, 10, 1), (2, 2, 8)]
GRIDS = [(1, 1, 1), (2, 1, 1), (3, 1, 1), (2, 2, 1), (1, 2, 2), (3, 1, 2), (1, 1, 1), (2, 1, 1)]
MAX_THREADS_TOTAL = 384  # the interpreter's cost grows with grid x block

TYPES = ("u32", "s32", "u64", "s64", "f32", "f64")
CTYPE = {"u32": "unsigned", "s32": "int", "u64": "unsigned long long", "s64": "long long",
         "f32": "float", "f64": "double", "h16": "__half", "h2": "__half2", "b16": "__nv_bfloat16"}

PRELUDE = r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef INT_MIN
#define INT_MIN (-2147483647 - 1)
#define INT_MAX 2147483647
#endif
#ifndef LLONG_MIN
#define LLONG_MIN (-9223372036854775807ll - 1)
#define LLONG_MAX 9223372036854775807ll
#endif
__device__ __forceinline__ unsigned fz_udiv(unsigned a, unsigned b) { return b ? a / b : a; }
__device__ __forceinline__ unsigned fz_urem(unsigned a, unsigned b) { return b ? a % b : a; }
__device__ __forceinline__ int fz_sdiv(int a, int b) { return (b == 0 || (a == INT_MIN && b == -1)) ? a : a / b; }
__device__ __forceinline__ int fz_srem(int a, int b) { return (b == 0 || (a == INT_MIN && b == -1)) ? a : a % b; }
__device__ __forceinline__ unsigned long long fz_udiv64(unsigned long long a, unsigned long long b) { return b ? a / b : a; }
__device__ __forceinline__ unsigned long long fz_urem64(unsigned long long a, unsigned long long b) { return b ? a % b : a; }
__device__ __forceinline__ long long fz_sdiv64(long long a, long long b) { return (b == 0 || (a == LLONG_MIN && b == -1)) ? a : a / b; }
// a half's bits with every NaN as 0x7FFF (the GPU's canonical NaN): NaN payloads of f16
// arithmetic differ between the CPU's readers and the GPU, as f32's do
__device__ __forceinline__ unsigned fz_hbits(__half h) { return __hisnan(h) ? 0x7FFFu : (unsigned)__half_as_ushort(h); }
__device__ __forceinline__ unsigned fz_bbits(__nv_bfloat16 h) { return __hisnan(h) ? 0x7FFFu : (unsigned)__bfloat16_as_ushort(h); }
__device__ __forceinline__ long long fz_srem64(long long a, long long b) { return (b == 0 || (a == LLONG_MIN && b == -1)) ? a : a % b; }
'''

SIGNATURE = ("const unsigned *iu, const float *ifl, const double *idb, unsigned long long *out, "
             "unsigned *gat, unsigned long long *gat64, unsigned *tick, int p0, unsigned p1, unsigned *scr")

#: the share of kernels generated in the same-thread reuse mode (Generator.reuse_statement) in
#: an ordinary run; `--reuse` (CPUIFY_FUZZ_REUSE=1) makes it every kernel
REUSE_SHARE = 0.2
#: the share of kernels given half-precision variables and statements (Generator.add_half)
#: in an ordinary run; `--half` (CPUIFY_FUZZ_HALF=1) makes it every kernel
HALF_SHARE = 0.2
H_CONSTS = ["0.0f", "-0.0f", "1.0f", "-1.5f", "0.5f", "65504.0f", "6.1035156e-05f", "5.9604645e-08f",
            "1e-6f", "100.0f", "-2048.5f", "0.33325195f", "70000.0f", "3.0e-5f"]


# --- the kernel model -----------------------------------------------------------------------------

@dataclass
class Stmt:
    """One statement: `kind` says how it renders; `bodies` are nested statement lists
    (if: then/else; for: the loop body); `text` the code (an assignment, a condition, a loop
    header, a whole unit such as a shared-memory exchange)."""
    kind: str                  # "code" | "if" | "for" | "return"
    text: str
    bodies: list[list[Stmt]] = field(default_factory=list)

    def to_json(self) -> Any:
        return [self.kind, self.text, [[s.to_json() for s in b] for b in self.bodies]]

    @staticmethod
    def from_json(j: Any) -> Stmt:
        return Stmt(j[0], j[1], [[Stmt.from_json(s) for s in b] for b in j[2]])


@dataclass
class KernelSpec:
    name: str
    seed: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    mode: str                           # "sync": barriers/shared/collectives; "free": early returns
    variables: list[tuple[str, str]]    # (name, type), in output-slot order
    inits: list[str]                    # declarations with initial values
    body: list[Stmt]
    shared: list[str]                   # shared arrays used ("u32", "f32", "f64", "sat")
    n_tickets: int
    ticket_kind: dict[int, tuple[str, int]]   # ticket slot -> ("add"|"exch", gat word)
    gat_ops: dict[int, str]             # gat word -> the one operation applied to it
    gat64_ops: dict[int, str]
    p0: int
    p1: int
    reuse_k: int = 0                    # words per thread of the reuse arrays (0: no reuse mode)

    @property
    def nthreads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def nblocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "grid": list(self.grid), "block": list(self.block),
                "mode": self.mode, "variables": [list(v) for v in self.variables], "inits": self.inits,
                "body": [s.to_json() for s in self.body], "shared": self.shared,
                "n_tickets": self.n_tickets,
                "ticket_kind": {str(k): list(v) for k, v in self.ticket_kind.items()},
                "gat_ops": {str(k): v for k, v in self.gat_ops.items()},
                "gat64_ops": {str(k): v for k, v in self.gat64_ops.items()}, "p0": self.p0, "p1": self.p1,
                "reuse_k": self.reuse_k}

    @staticmethod
    def from_json(j: dict[str, Any]) -> KernelSpec:
        return KernelSpec(j["name"], j["seed"], tuple(j["grid"]), tuple(j["block"]), j["mode"],  # type: ignore[arg-type]
                          [tuple(v) for v in j["variables"]], j["inits"],  # type: ignore[misc]
                          [Stmt.from_json(s) for s in j["body"]], j["shared"], j["n_tickets"],
                          {int(k): tuple(v) for k, v in j["ticket_kind"].items()},  # type: ignore[misc]
                          {int(k): v for k, v in j["gat_ops"].items()},
                          {int(k): v for k, v in j["gat64_ops"].items()}, j["p0"], j["p1"],
                          j.get("reuse_k", 0))


# --- generation -------------------------------------------------------------------------------------

@dataclass
class Ctx:
    converged: bool = True       # every thread of the block runs this point together
    in_loop: bool = False        # (tickets are written once per thread: never in a loop)
    breakable: bool = False      # a break/continue here keeps barriers and collectives well-defined
    depth: int = 0
    uniform_vars: tuple[str, ...] = ()    # block-uniform u32 loop counters in scope
    thread_vars: tuple[str, ...] = ()     # thread-dependent u32 loop counters in scope
    warp_converged: bool = True  # every lane of the warp runs this point together


U32_CONSTS = [0, 1, 2, 3, 7, 31, 32, 255, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x12345678,
              0xDEADBEEF, 1000, 65535, 65536]
F32_CONSTS = ["0.0f", "-0.0f", "1.0f", "-1.0f", "0.5f", "2.5f", "0.1f", "3.0e38f", "-3.4e38f", "1e-40f",
              "1.17549435e-38f", "100.0f", "16777216.0f", "0.333333343f", "-7.25f", "4294967296.0f",
              "2147483648.0f", "-2147483904.0f"]
F64_CONSTS = ["0.0", "-0.0", "1.0", "-1.0", "0.5", "0.1", "1e308", "-1.7e308", "4.9e-324", "2.5",
              "9007199254740993.0", "1e-310", "-3.75", "18446744073709551616.0", "9.2233720368547758e18"]


#: the functions of cuda_fp16.h and cuda_bf16.h the half mode calls, by type
_HALF_NAMES = {
    "h16": {"from": "__float2half", "bits": "__ushort_as_half", "hbits": "fz_hbits",
            "double": "__double2half", "uint": "__uint2half", "int": "__int2half", "to": "__half2"},
    "b16": {"from": "__float2bfloat16", "bits": "__ushort_as_bfloat16", "hbits": "fz_bbits",
            "double": "__double2bfloat16", "uint": "__uint2bfloat16", "int": "__int2bfloat16",
            "to": "__bfloat162"},
}


class _HalfMode:
    """The half-precision mode of Generator (a mixin): __half and __half2 variables, from
    input bits (NaNs, infinities and subnormals among them) and from the kernel's floats and
    integers, cuda_fp16.h's arithmetic on them (the operators, which nvcc leaves as unrounded
    mul + add for ptxas to fuse; fmas, saturation, min/max, rounding to integers), read back
    into the kernel's other variables.  No `.approx` functions (hsqrt, hexp, ...): the
    interpreter and compiled code each keep their own approximation of those."""

    def add_half(self, body: list[Stmt], inits: list[str]) -> None:
        """Adds 1-2 __half and 0-1 __half2 variables (output slots too) and 2-6 statements
        at random places of `body`, all drawn from the half stream."""
        hr, main = self.half_r, self.r
        self.r = hr
        try:
            ix = lambda: f"iu[(gt * {hr.randrange(1, 40, 2)}u + {hr.randrange(N_IN)}u) & {N_IN - 1}u]"
            fx = lambda: f"ifl[(gt * {hr.randrange(1, 40, 2)}u + {hr.randrange(N_IN)}u) & {N_IN - 1}u]"
            bits = lambda: f"__ushort_as_half((unsigned short){ix()})"
            for k in range(hr.randrange(1, 3)):
                self.variables.append((f"h{k}", "h16"))
                inits.append(f"__half h{k} = {hr.choice([bits(), f'__float2half({fx()})'])};")
            if hr.random() < 0.6:
                self.variables.append(("q0", "h2"))
                inits.append(f"__half2 q0 = __halves2half2({bits()}, __float2half({fx()}));")
            if hr.random() < 0.5:
                self.variables.append(("g0", "b16"))
                inits.append(f"__nv_bfloat16 g0 = {hr.choice([f'__ushort_as_bfloat16((unsigned short){ix()})', f'__float2bfloat16({fx()})'])};")
            lists = self.statement_lists(body)
            for _ in range(hr.randrange(2, 7)):
                where = hr.choice(lists)
                where.insert(hr.randrange(len(where) + 1), self.half_statement())
        finally:
            self.r = main

    def half_statement(self) -> Stmt:
        """A half or bfloat16 variable assigned, or such a value read into another variable."""
        r, ctx = self.r, Ctx(converged=False)
        kind = "b16" if self.var("b16") and r.random() < 0.4 else "h16"
        x = r.random()
        if x < 0.45:
            return Stmt("code", f"{self.var(kind)} = {self.expr_h16(r.randrange(1, 4), ctx, kind)};")
        if x < 0.65 and self.var("h2"):
            return Stmt("code", f"q0 = {self.expr_h2(r.randrange(1, 4), ctx)};")
        h = lambda: self.expr_h16(r.randrange(0, 3), ctx, kind)
        n = _HALF_NAMES[kind]
        back: list[tuple[str, Callable[[], str]]] = [
            ("u32", lambda: f"{n['hbits']}({h()})"),
            ("u32", lambda: f"(unsigned)({h()} {r.choice(['<', '<=', '==', '!=', '>', '>='])} {h()})"),
            ("u32", lambda: f"(unsigned)__hisnan({h()})"),
            ("u32", lambda: f"{n['to']}uint_r{r.choice('nzdu')}({h()})"),
            ("s32", lambda: f"{n['to']}int_r{r.choice('nzdu')}({h()})"),
            ("f32", lambda: f"{n['to']}float({h()})"),
            ("f64", lambda: f"(double){n['to']}float({h()})")]
        if self.var("h2"):
            back.append(("f32", lambda: f"__{r.choice(['low', 'high'])}2float(q0)"))
        t, value = r.choice([b for b in back if self.var(b[0])])
        return Stmt("code", f"{self.var(t)} {'^=' if t == 'u32' else '='} {value()};")

    def half_leaf(self, ctx: Ctx, kind: str = "h16") -> str:
        r = self.r
        n = _HALF_NAMES[kind]
        v = self.var(kind)
        if v is not None and r.random() < 0.5:
            return v
        opts = [lambda: f"{n['from']}({r.choice(H_CONSTS)})",
                lambda: f"{n['bits']}((unsigned short){self.expr('u32', 1, ctx)})"]
        if self.var("f32"):
            opts.append(lambda: f"{n['from']}_r{r.choice('nzdu')}({self.var('f32')})")
        if self.var("f64"):
            opts.append(lambda: f"{n['double']}({self.var('f64')})")
        opts.append(lambda: f"{n['uint']}_r{r.choice('nzdu')}({self.var('u32') or 'lt'})")
        if self.var("s32"):
            opts.append(lambda: f"{n['int']}_r{r.choice('nzdu')}({self.var('s32')})")
        if self.var("h2") and kind == "h16":
            opts.append(lambda: f"__{r.choice(['low', 'high'])}2half(q0)")
        return r.choice(opts)()

    def expr_h16(self, d: int, ctx: Ctx, kind: str = "h16") -> str:
        """A __half (kind h16) or __nv_bfloat16 (b16) expression: the same functions."""
        r = self.r
        if d <= 0 or r.random() < 0.25:
            return self.half_leaf(ctx, kind)
        e = lambda: self.expr_h16(d - 1, ctx, kind)
        return r.choice([
            lambda: f"({e()} {r.choice(['+', '-', '*', '/'])} {e()})",
            lambda: f"({e()} * {e()} {r.choice(['+', '-'])} {e()})",      # mul.f16 + add.f16
            lambda: f"({e()} - {e()} * {e()})",
            lambda: f"__hfma{r.choice(['', '_sat', '_relu'])}({e()}, {e()}, {e()})",
            lambda: f"__h{r.choice(['add', 'sub', 'mul'])}{r.choice(['_sat', '_rn'])}({e()}, {e()})",
            lambda: f"__h{r.choice(['min', 'max'])}{r.choice(['', '_nan'])}({e()}, {e()})",
            lambda: f"__h{r.choice(['neg', 'abs'])}({e()})",
            lambda: f"{r.choice(['hfloor', 'hceil', 'htrunc', 'hrint'])}({e()})",
            lambda: f"({e()} {r.choice(['<', '>', '==', '!='])} {e()} ? {e()} : {e()})",
        ])()

    def expr_h2(self, d: int, ctx: Ctx) -> str:
        r = self.r
        if d <= 0 or r.random() < 0.25:
            h = lambda: self.expr_h16(0, ctx)
            return r.choice([lambda: "q0", lambda: f"__halves2half2({h()}, {h()})",
                             lambda: f"__half2half2({h()})",
                             lambda: f"__floats2half2_rn({self.var('f32') or '0.5f'}, {r.choice(H_CONSTS)})"])()
        e = lambda: self.expr_h2(d - 1, ctx)
        return r.choice([
            lambda: f"({e()} {r.choice(['+', '-', '*'])} {e()})",
            lambda: f"({e()} * {e()} {r.choice(['+', '-'])} {e()})",       # mul.f16x2 + add.f16x2
            lambda: f"__hfma2{r.choice(['', '_sat'])}({e()}, {e()}, {e()})",
            lambda: f"__h{r.choice(['add2', 'sub2', 'mul2'])}{r.choice(['', '_sat'])}({e()}, {e()})",
            lambda: f"__h{r.choice(['min2', 'max2'])}({e()}, {e()})",
            lambda: f"__h{r.choice(['neg2', 'abs2'])}({e()})",
            lambda: f"__lowhigh2highlow({e()})",
        ])()


class Generator(_HalfMode):
    def __init__(self, seed: int, index: int, reuse: bool | None = None,
                 half: bool | None = None) -> None:
        self.kseed = (seed * 1_000_003 + index) & 0x7FFFFFFF
        self.r = random.Random(self.kseed)
        self.name = f"fz_{seed}_{index}"
        # the reuse mode draws from a stream of its own: a kernel without it is the kernel
        # the same seed and index gave before the mode existed
        self.reuse_r = random.Random(self.kseed ^ 0x5EED5EED)
        self.reuse = reuse if reuse is not None else os.environ.get("CPUIFY_FUZZ_REUSE") == "1"
        # so does the half mode
        self.half_r = random.Random(self.kseed ^ 0x48616C66)
        self.half = half if half is not None else os.environ.get("CPUIFY_FUZZ_HALF") == "1"

    # ---- expressions -----------------------------------------------------------------------
    def var(self, t: str) -> str | None:
        vs = [n for n, ty in self.variables if ty == t]
        return self.r.choice(vs) if vs else None

    def leaf(self, t: str, ctx: Ctx) -> str:
        r = self.r
        v = self.var(t)
        if v is not None and r.random() < 0.6:
            return v
        if t == "u32":
            c = r.random()
            if c < 0.35:
                return r.choice(["lt", "gt", "lane", "warp", "bid", "nt", "threadIdx.x", "threadIdx.y",
                                 "threadIdx.z", "blockIdx.x", "p1", "(unsigned)p0"]
                                + list(ctx.uniform_vars) + list(ctx.thread_vars))
            return f"{r.choice(U32_CONSTS)}u"
        if t == "s32":
            return r.choice(["(int)lt", "-3", "0", "1", "-1", "INT_MIN", "INT_MAX", "p0", "17", "-100000"])
        if t == "u64":
            return r.choice(["0ull", "1ull", "0xFFFFFFFFFFFFFFFFull", "0x8000000000000000ull",
                             "0x123456789ABCDEFull", "(unsigned long long)gt", "4294967296ull", "63ull"])
        if t == "s64":
            return r.choice(["0ll", "-1ll", "LLONG_MIN", "LLONG_MAX", "(long long)p0", "-4294967296ll", "12345ll"])
        if t == "f32":
            return r.choice(F32_CONSTS)
        return r.choice(F64_CONSTS)

    def expr(self, t: str, d: int, ctx: Ctx) -> str:
        if d <= 0 or self.r.random() < 0.25:
            return self.leaf(t, ctx)
        return getattr(self, "expr_" + t)(d - 1, ctx)

    def cond(self, d: int, ctx: Ctx) -> str:
        r = self.r
        t = r.choice(TYPES)
        a, b = self.expr(t, d, ctx), self.expr(t, d, ctx)
        op = r.choice(["<", "<=", "==", "!=", ">", ">="])
        c = f"({a} {op} {b})"
        return f"(!{c})" if r.random() < 0.15 else c

    def expr_u32(self, d: int, ctx: Ctx) -> str:
        r = self.r
        e = lambda t="u32": self.expr(t, d, ctx)
        if r.random() < 0.25:
            return f"({e()} {r.choice(['+', '-', '*', '&', '|', '^'])} {e()})"
        return r.choice([
            lambda: f"({e()} << ({e()} & 31u))", lambda: f"({e()} >> ({e()} & 31u))",
            lambda: f"fz_udiv({e()}, {e()})", lambda: f"fz_urem({e()}, {e()})",
            lambda: f"{r.choice(['min', 'max'])}({e()}, {e()})",
            lambda: f"(unsigned)__popc({e()})", lambda: f"(unsigned)__clz((int){e()})",
            lambda: f"__brev({e()})", lambda: f"(unsigned)__ffs((int){e()})",
            lambda: f"__byte_perm({e()}, {e()}, {e()})",
            lambda: f"__funnelshift_{r.choice('lr')}({e()}, {e()}, {e()})",
            lambda: f"__umulhi({e()}, {e()})", lambda: f"(~{e()})",
            lambda: f"(unsigned){e('s32')}", lambda: f"(unsigned){e('u64')}",
            lambda: f"__float2uint_r{r.choice('nzud')}({e('f32')})",
            lambda: f"(unsigned)__float2int_r{r.choice('nzud')}({e('f32')})",
            lambda: f"__double2uint_r{r.choice('nzud')}({e('f64')})",
            lambda: f"(unsigned){self.cond(d, ctx)}",
            lambda: f"({self.cond(d, ctx)} ? {e()} : {e()})",
            lambda: f"__usad({e()}, {e()}, {e()})",
            lambda: f"(unsigned)__popcll({e('u64')})",
            lambda: f"__{r.choice(['uhadd', 'urhadd', 'umul24'])}({e()}, {e()})",
            lambda: f"__{r.choice(['vadd4', 'vsub2', 'vmaxu4', 'vminu2', 'vcmpgtu2', 'vcmpeq4'])}({e()}, {e()})",
        ])()

    def expr_s32(self, d: int, ctx: Ctx) -> str:
        r = self.r
        e = lambda t="s32": self.expr(t, d, ctx)
        k = r.randrange(13)
        return [
            lambda: f"(int)((unsigned){e()} {r.choice(['+', '-', '*', '&', '|', '^'])} (unsigned){e()})",
            lambda: f"({e()} >> ({e('u32')} & 31u))",
            lambda: f"fz_{r.choice(['sdiv', 'srem'])}({e()}, {e()})",
            lambda: f"{r.choice(['min', 'max'])}({e()}, {e()})",
            lambda: f"__mulhi({e()}, {e()})",
            lambda: f"__float2int_r{r.choice('nzud')}({e('f32')})",
            lambda: f"__double2int_r{r.choice('nzud')}({e('f64')})",
            lambda: f"(int){e('u32')}", lambda: f"(int){e('s64')}",
            lambda: f"({self.cond(d, ctx)} ? {e()} : {e()})",
            lambda: f"(int)(0u - (unsigned){e()})",
            lambda: f"(int)__sad({e()}, {e()}, {e('u32')})",
            lambda: f"__{r.choice(['hadd', 'rhadd', 'mul24'])}({e()}, {e()})",
        ][k]()

    def expr_u64(self, d: int, ctx: Ctx) -> str:
        r = self.r
        e = lambda t="u64": self.expr(t, d, ctx)
        k = r.randrange(14)
        return [
            lambda: f"({e()} {r.choice(['+', '-', '*', '&', '|', '^'])} {e()})",
            lambda: f"({e()} << ({e('u32')} & 63u))", lambda: f"({e()} >> ({e('u32')} & 63u))",
            lambda: f"fz_{r.choice(['udiv64', 'urem64'])}({e()}, {e()})",
            lambda: f"{r.choice(['min', 'max'])}({e()}, {e()})",
            lambda: f"(unsigned long long)__clzll((long long){e()})", lambda: f"__brevll({e()})",
            lambda: f"__umul64hi({e()}, {e()})",
            lambda: f"(unsigned long long){e('u32')}", lambda: f"(unsigned long long){e('s32')}",
            lambda: f"__float2ull_r{r.choice('nzud')}({e('f32')})",
            lambda: f"__double2ull_r{r.choice('nzud')}({e('f64')})",
            lambda: f"(unsigned long long){e('s64')}",
            lambda: f"({self.cond(d, ctx)} ? {e()} : {e()})",
        ][k]()

    def expr_s64(self, d: int, ctx: Ctx) -> str:
        r = self.r
        e = lambda t="s64": self.expr(t, d, ctx)
        k = r.randrange(10)
        return [
            lambda: (f"(long long)((unsigned long long){e()} {r.choice(['+', '-', '*', '&', '|', '^'])} "
                     f"(unsigned long long){e()})"),
            lambda: f"({e()} >> ({e('u32')} & 63u))",
            lambda: f"fz_{r.choice(['sdiv64', 'srem64'])}({e()}, {e()})",
            lambda: f"{r.choice(['min', 'max'])}({e()}, {e()})",
            lambda: f"__mul64hi({e()}, {e()})",
            lambda: f"__float2ll_r{r.choice('nzud')}({e('f32')})",
            lambda: f"__double2ll_r{r.choice('nzud')}({e('f64')})",
            lambda: f"(long long){e('s32')}", lambda: f"(long long){e('u64')}",
            lambda: f"({self.cond(d, ctx)} ? {e()} : {e()})",
        ][k]()

    def expr_f32(self, d: int, ctx: Ctx) -> str:
        r = self.r
        e = lambda t="f32": self.expr(t, d, ctx)
        k = r.randrange(20)
        if k < 5:
            return f"({e()} {r.choice(['+', '-', '*', '/'])} {e()})"
        return [
            lambda: f"fmaf({e()}, {e()}, {e()})", lambda: f"sqrtf({e()})",
            lambda: f"{r.choice(['fminf', 'fmaxf'])}({e()}, {e()})", lambda: f"fabsf({e()})",
            lambda: f"(-({e()}))", lambda: f"{r.choice(['floorf', 'ceilf', 'truncf', 'rintf'])}({e()})",
            lambda: f"__f{r.choice(['add', 'sub', 'mul', 'div'])}_r{r.choice('nzud')}({e()}, {e()})",
            lambda: f"__fsqrt_r{r.choice('nzud')}({e()})", lambda: f"__frcp_r{r.choice('nzud')}({e()})",
            lambda: f"__fmaf_r{r.choice('nzud')}({e()}, {e()}, {e()})",
            lambda: f"(float){e(r.choice(['u32', 's32', 'u64', 's64', 'f64']))}",
            # (directed rounding from 64-bit integers is refused by cpuify: docs/usage.md)
            lambda: self.int_to_float(d, ctx),
            lambda: f"__double2float_r{r.choice('nzud')}({e('f64')})",
            lambda: f"__uint_as_float({e('u32')})",
            lambda: f"({self.cond(d, ctx)} ? {e()} : {e()})",
        ][k - 5]()

    def int_to_float(self, d: int, ctx: Ctx) -> str:
        name, t, modes = self.r.choice([("uint", "u32", "nzud"), ("int", "s32", "nzud"), ("ull", "u64", "n"),
                                        ("ll", "s64", "n")])
        return f"__{name}2float_r{self.r.choice(modes)}({self.expr(t, d, ctx)})"

    def expr_f64(self, d: int, ctx: Ctx) -> str:
        r = self.r
        e = lambda t="f64": self.expr(t, d, ctx)
        k = r.randrange(18)
        if k < 5:
            return f"({e()} {r.choice(['+', '-', '*', '/'])} {e()})"
        return [
            lambda: f"fma({e()}, {e()}, {e()})", lambda: f"sqrt({e()})",
            lambda: f"{r.choice(['fmin', 'fmax'])}({e()}, {e()})", lambda: f"fabs({e()})",
            lambda: f"(-({e()}))", lambda: f"{r.choice(['floor', 'ceil', 'trunc', 'rint'])}({e()})",
            lambda: f"__d{r.choice(['add', 'sub', 'mul', 'div'])}_r{r.choice('nzud')}({e()}, {e()})",
            lambda: f"__dsqrt_r{r.choice('nzud')}({e()})", lambda: f"__drcp_r{r.choice('nzud')}({e()})",
            lambda: f"__fma_rn({e()}, {e()}, {e()})",    # (fma.rz/rm/rp.f64: refused)
            lambda: f"(double){e(r.choice(['u32', 's32', 'u64', 's64', 'f32']))}",
            lambda: f"__{r.choice(['ll', 'ull'])}2double_rn({e(r.choice(['s64', 'u64']))})",
            lambda: f"__hiloint2double((int){e('u32')}, (int){e('u32')})",
        ][k - 5]()

    # ---- statements --------------------------------------------------------------------------
    def uniform_cond(self, ctx: Ctx) -> str:
        r = self.r
        opts = [f"((p0 & 3) == {r.randrange(4)})", f"(p1 > {r.randrange(10)}u)",
                f"(blockIdx.x % 2u == {r.randrange(2)}u)", f"(bid < {r.randrange(1, 4)}u)",
                f"(nt > {r.choice([16, 32, 64])}u)"]
        opts += [f"({v} {r.choice(['<', '==', '!='])} {r.randrange(3)}u)" for v in ctx.uniform_vars]
        return r.choice(opts)

    def thread_cond(self, ctx: Ctx) -> str:
        r = self.r
        if r.random() < 0.4:
            return r.choice([f"(lt % {r.randrange(2, 5)}u == 0u)", f"(lane < {r.randrange(1, 32)}u)",
                             f"(threadIdx.y == {r.randrange(2)}u)", "((gt & 5u) != 0u)",
                             "(lt >= nt / 2u)"])
        return self.cond(2, ctx)

    def assign(self, ctx: Ctx) -> Stmt:
        n, t = self.r.choice(self.variables)
        return Stmt("code", f"{n} = {self.expr(t, self.r.randrange(1, 4), ctx)};")

    def stmts(self, ctx: Ctx, n: int) -> list[Stmt]:
        return [self.stmt(ctx) for _ in range(n)]

    def stmt(self, ctx: Ctx) -> Stmt:
        r = self.r
        choices: list[tuple[float, Callable[[], Stmt]]] = [(10, lambda: self.assign(ctx))]
        if ctx.depth < 2:
            choices += [(2.0, lambda: self.if_stmt(ctx)), (1.5, lambda: self.for_stmt(ctx))]
        choices.append((1.0, lambda: self.atomic_total(ctx)))
        if not ctx.in_loop and self.n_tickets < 4 and len(self.gat_free()) > 0:
            choices.append((0.6, lambda: self.ticket(ctx)))
        if ctx.breakable:
            choices.append((0.5, lambda: Stmt("code", r.choice(["break;", "continue;"]))))
        if self.mode == "free" and ctx.depth > 0:
            choices.append((0.4, lambda: Stmt("return", "")))
        if self.local:
            choices.append((1.0, lambda: self.local_access(ctx)))
        if self.mode == "sync" and ctx.converged:
            choices += [(1.5, lambda: self.exchange()),
                        (0.5, lambda: self.shared_atomic(ctx)), (0.3, lambda: Stmt("code", "__syncthreads();")),
                        (0.3, lambda: self.block_vote(ctx))]
        if self.mode == "sync" and ctx.warp_converged:
            choices += [(1.2, lambda: self.collective(ctx)), (0.2, lambda: Stmt("code", "__syncwarp(wmask);"))]
        total = sum(w for w, _ in choices)
        x = r.random() * total
        for w, f in choices:
            x -= w
            if x <= 0:
                return f()
        return choices[0][1]()

    def warp_cond(self) -> str:
        r = self.r
        return r.choice([f"((warp & 1u) == {r.randrange(2)}u)", f"(warp < {r.randrange(1, 3)}u)",
                         "(warp * 3u % 4u < 2u)", "((warp ^ bid) & 1u)"])

    def if_stmt(self, ctx: Ctx) -> Stmt:
        r = self.r
        x = r.random()
        uniform = ctx.converged and x < 0.4
        warp_uniform = uniform or (ctx.warp_converged and self.mode == "sync" and x < 0.6)
        cond = self.uniform_cond(ctx) if uniform else self.warp_cond() if warp_uniform else self.thread_cond(ctx)
        inner = Ctx(ctx.converged and uniform, ctx.in_loop, ctx.breakable, ctx.depth + 1,
                    ctx.uniform_vars if uniform else (), ctx.thread_vars + (() if uniform else ctx.uniform_vars),
                    warp_uniform and ctx.warp_converged)
        then = self.stmts(inner, r.randrange(1, 4))
        other = self.stmts(inner, r.randrange(0, 3)) if r.random() < 0.5 else []
        return Stmt("if", cond, [then, other])

    def for_stmt(self, ctx: Ctx) -> Stmt:
        r = self.r
        self.loops += 1
        i = f"i{self.loops}"
        x = r.random()
        uniform = ctx.converged and x < 0.5
        warp_uniform = uniform or (ctx.warp_converged and self.mode == "sync" and x < 0.7)
        if uniform:
            bound = r.choice([f"{r.randrange(1, 5)}u", "((unsigned)p0 & 3u)", "(blockIdx.x % 3u + 1u)", "(p1 % 4u)"])
        elif warp_uniform:
            bound = r.choice(["(warp % 3u)", "(warp + 1u)", "((warp * 5u + bid) & 3u)"])
        else:
            bound = r.choice(["(lt % 4u)", "(lane & 3u)", f"({self.expr('u32', 1, ctx)} & 3u)",
                              "((gt * 7u) % 5u)"])
        header = f"for (unsigned {i} = 0u; {i} < {bound}; {i}++)"
        converged = ctx.converged and uniform
        warp_converged = ctx.warp_converged and warp_uniform
        inner = Ctx(converged, True, ctx.breakable or not warp_converged or self.mode == "free", ctx.depth + 1,
                    (ctx.uniform_vars + (i,)) if converged else (),
                    ctx.thread_vars + (() if converged else ctx.uniform_vars + (i,)), warp_converged)
        if self.mode == "free":
            inner.breakable = True
        return Stmt("for", header, [self.stmts(inner, r.randrange(1, 4))])

    def local_access(self, ctx: Ctx) -> Stmt:
        r = self.r
        t = r.choice(self.local)
        arr = {"u32": "la_u", "f64": "la_d"}[t]
        idx = f"({self.expr('u32', 1, ctx)} & 7u)"
        if r.random() < 0.5:
            return Stmt("code", f"{arr}[{idx}] = {self.expr(t, 2, ctx)};")
        dst = self.var(t) or "u0"
        if dict(self.variables)[dst] != t:
            return Stmt("code", f"{dst} = (unsigned){arr}[{idx}];" if t == "u32" else
                        f"{dst} = __double2uint_rz({arr}[{idx}]);")
        return Stmt("code", f"{dst} = {arr}[{idx}];")

    def gat_free(self) -> list[int]:
        return [k for k in range(N_GAT) if k not in self.gat_ops]

    def atomic_total(self, ctx: Ctx) -> Stmt:
        r = self.r
        if r.random() < 0.25:
            k = r.randrange(N_GAT64)
            op = self.gat64_ops.setdefault(k, r.choice(["Add", "Min", "Max", "And", "Or", "Xor"]))
            return Stmt("code", f"atomic{op}(&gat64[{k}], {self.expr('u64', 2, ctx)});")
        usable = [k for k, o in self.gat_ops.items() if not o.startswith("ticket")] + self.gat_free()
        if not usable:
            return self.assign(ctx)
        k = r.choice(usable)
        op = self.gat_ops.setdefault(k, r.choice(["Add", "Sub", "Min", "Max", "SMin", "SMax", "And", "Or", "Xor",
                                                  "FAdd", "CASMul"]))
        if op in ("SMin", "SMax"):
            return Stmt("code", f"atomic{op[1:]}((int *)&gat[{k}], {self.expr('s32', 2, ctx)});")
        if op == "FAdd":   # small integers in float: every order gives the same sum
            return Stmt("code", f"atomicAdd((float *)&gat[{k}], (float)({self.expr('u32', 2, ctx)} & 15u));")
        if op == "CASMul":  # a CAS loop applying a commutative operation
            return Stmt("code", f"{{ unsigned m_ = {self.expr('u32', 2, ctx)} | 1u; unsigned o_ = gat[{k}], a_; "
                                f"do {{ a_ = o_; o_ = atomicCAS(&gat[{k}], a_, a_ * m_); }} while (o_ != a_); }}")
        return Stmt("code", f"atomic{op}(&gat[{k}], {self.expr('u32', 2, ctx)});")

    def ticket(self, ctx: Ctx) -> Stmt:
        r = self.r
        k = r.choice(self.gat_free())
        j = self.n_tickets
        self.n_tickets += 1
        if r.random() < 0.5:
            self.gat_ops[k] = "ticket_add"
            self.ticket_kind[j] = ("add", k)
            return Stmt("code", f"tick[gt * NTK + {j}u] = atomicAdd(&gat[{k}], 1u);")
        self.gat_ops[k] = "ticket_exch"
        self.ticket_kind[j] = ("exch", k)
        return Stmt("code", f"tick[gt * NTK + {j}u] = atomicExch(&gat[{k}], {self.expr('u32', 2, ctx)});")

    def exchange(self) -> Stmt:
        r = self.r
        t = r.choice(["u32", "u32", "f32", "f64"])
        dst = self.var(t)
        if dst is None:
            t, dst = "u32", self.var("u32")
        arr = {"u32": "sh_u", "f32": "sh_f", "f64": "sh_d"}[t]
        if t not in self.shared:
            self.shared.append(t)
        src = self.expr(t, 2, Ctx())
        idx = r.choice([f"(lt * {r.choice([3, 5, 7, 31, 33])}u + {r.randrange(40)}u) % nt", "(lt + 1u) % nt",
                        "nt - 1u - lt", "((lt ^ 1u) < nt ? (lt ^ 1u) : lt)", "(lt + 32u) % nt"])
        load = f"{arr}[{idx}]"
        return Stmt("code", f"__syncthreads(); {arr}[lt] = {src}; __syncthreads(); {dst} = {load};")

    def shared_atomic(self, ctx: Ctx) -> Stmt:
        r = self.r
        if "sat" not in self.shared:
            self.shared.append("sat")
        j = r.randrange(N_SAT)
        op = r.choice(["Add", "Min", "Max", "And", "Or", "Xor"])
        init = r.choice(U32_CONSTS)
        dst = self.var("u32") or "u0"
        val = self.expr("u32", 2, Ctx(converged=False))
        body = f"atomic{op}(&sat[{j}], {val});"
        if r.random() < 0.5:
            body = f"if {self.thread_cond(Ctx(converged=False))} {{ {body} }}"
        return Stmt("code", f"__syncthreads(); if (lt == 0u) sat[{j}] = {init}u; __syncthreads(); {body} "
                            f"__syncthreads(); {dst} = sat[{j}];")

    def collective(self, ctx: Ctx) -> Stmt:
        r = self.r
        full = self.block_n % 32 == 0
        t = r.choice(["u32", "s32", "f32", "f64", "u64"])
        dst = self.var(t)
        if dst is None:
            t, dst = "u32", self.var("u32")
        val = self.expr(t, 2, ctx)
        kinds = ["shfl", "up", "ballot", "any", "all", "reduce"]
        if full:
            kinds += ["xor", "down", "xor", "down"]
        k = r.choice(kinds)
        if k == "shfl":
            src = f"(lane * {r.randrange(1, 34)}u + {r.randrange(32)}u) % wn"
            return Stmt("code", f"{dst} = __shfl_sync(wmask, {val}, {src});")
        if k == "up":
            return Stmt("code", f"{dst} = __shfl_up_sync(wmask, {val}, {r.choice([1, 2, 4, 8, 16, 31])}u);")
        width = r.choice(["", "", ", 16", ", 8", ", 4"])
        if k == "xor":
            return Stmt("code", f"{dst} = __shfl_xor_sync(wmask, {val}, {r.choice([1, 2, 4, 8, 16, 31])}{width});")
        if k == "down":
            return Stmt("code", f"{dst} = __shfl_down_sync(wmask, {val}, {r.choice([1, 2, 3, 8, 16])}u{width});")
        u = self.var("u32") or "u0"
        if k == "ballot":
            return Stmt("code", f"{u} = __ballot_sync(wmask, {self.thread_cond(Ctx(converged=False))});")
        if k in ("any", "all"):
            return Stmt("code", f"{u} = (unsigned)__{k}_sync(wmask, {self.thread_cond(Ctx(converged=False))});")
        return Stmt("code", f"{u} = __reduce_{r.choice(['add', 'min', 'max', 'and', 'or', 'xor'])}_sync"
                            f"(wmask, {self.expr('u32', 2, ctx)});")

    def block_vote(self, ctx: Ctx) -> Stmt:
        u = self.var("u32") or "u0"
        f = self.r.choice(["count", "and", "or"])
        return Stmt("code", f"{u} = (unsigned)__syncthreads_{f}({self.thread_cond(Ctx(converged=False))});")

    def generate(self) -> KernelSpec:
        r = self.r
        while True:
            block = r.choice(BLOCKS)
            grid = r.choice(GRIDS)
            if block[0] * block[1] * block[2] * grid[0] * grid[1] * grid[2] <= MAX_THREADS_TOTAL:
                break
        self.block_n = block[0] * block[1] * block[2]
        self.mode = r.choice(["sync", "sync", "free"])
        self.variables: list[tuple[str, str]] = []
        counts = {"u32": r.randrange(1, 4), "s32": r.randrange(0, 3), "u64": r.randrange(0, 2),
                  "s64": r.randrange(0, 2), "f32": r.randrange(0, 3), "f64": r.randrange(0, 3)}
        prefix = {"u32": "u", "s32": "s", "u64": "w", "s64": "l", "f32": "f", "f64": "d"}
        inits = []
        for t in TYPES:
            for k in range(counts[t]):
                n = f"{prefix[t]}{k}"
                self.variables.append((n, t))
                a, b = r.randrange(1, 40, 2), r.randrange(N_IN)
                ix = lambda: f"iu[(gt * {r.randrange(1, 40, 2)}u + {r.randrange(N_IN)}u) & {N_IN - 1}u]"
                init = {"u32": ix(), "s32": f"(int){ix()}",
                        "u64": f"((unsigned long long){ix()} << 32) | {ix()}",
                        "s64": f"(long long)(((unsigned long long){ix()} << 32) | {ix()})",
                        "f32": f"ifl[(gt * {a}u + {b}u) & {N_IN - 1}u]",
                        "f64": f"idb[(gt * {a}u + {b}u) & {N_IN - 1}u]"}[t]
                inits.append(f"{CTYPE[t]} {n} = {init};")
        self.loops = 0
        self.n_tickets = 0
        self.ticket_kind: dict[int, tuple[str, int]] = {}
        self.gat_ops: dict[int, str] = {}
        self.gat64_ops: dict[int, str] = {}
        self.shared: list[str] = []
        self.local = r.choice([[], [], ["u32"], ["f64"], ["u32", "f64"]])
        for t in self.local:
            arr, src = {"u32": ("la_u", "iu"), "f64": ("la_d", "idb")}[t]
            inits.append(f"{CTYPE[t]} {arr}[8]; for (unsigned q_ = 0u; q_ < 8u; q_++) "
                         f"{arr}[q_] = {src}[(gt * {r.randrange(1, 9)}u + q_ * {r.randrange(1, 40, 2)}u) & {N_IN - 1}u];")
        body = self.stmts(Ctx(), r.randrange(4, 14))
        p0, p1 = r.randrange(-8, 9), r.randrange(0, 12)
        reuse_k = 0
        if self.reuse_r.random() < REUSE_SHARE or self.reuse:
            reuse_k = self.add_reuse(body, inits)
        if self.half_r.random() < HALF_SHARE or self.half:
            self.add_half(body, inits)
        return KernelSpec(self.name, self.kseed, grid, block, self.mode, self.variables, inits, body,
                          self.shared, self.n_tickets, self.ticket_kind, self.gat_ops, self.gat64_ops,
                          p0, p1, reuse_k)

    # ---- the same-thread reuse mode ----------------------------------------------------------
    # A thread writes several words it owns in shared memory (`ru_s[lt * K + j]`, strided;
    # `ru_i[j * nt + lt]`, interleaved), in global memory (`scr`, the same two layouts) or
    # through a generic pointer to either, then reads and writes them again before the next
    # barrier, at constant and run-time j, in small loops, with values that depend on the
    # order: what a thread loop's parallel access group must not let LLVM reorder
    # (codegen.thread_order).  Every word a kernel reads was written before (the shared
    # arrays by the kernel's first lines, `scr` by the host), so any order is defined.
    def add_reuse(self, body: list[Stmt], inits: list[str]) -> int:
        """Adds the reuse arrays' declarations to `inits` and 1-3 reuse statements at random
        places of `body`; returns K, the words each thread owns per layout."""
        rr, main = self.reuse_r, self.r
        self.r = rr                 # expressions drawn from the reuse stream
        try:
            k = rr.choice([2, 3, 4, 5, 8])
            self.reuse_k = k
            kinds = rr.sample(["ss", "si", "gs", "gi", "gp"], rr.randrange(1, 4))
            if "gp" in kinds and "ss" not in kinds:
                kinds.append("ss")
            self.reuse_kinds = kinds
            for arr, kind in (("ru_s", "ss"), ("ru_i", "si")):
                if kind in kinds:
                    self.shared.append(kind)
                    a, c = rr.randrange(1, 40, 2), rr.randrange(1, 40, 2)
                    inits.append(f"for (unsigned q_ = 0u; q_ < {k}u; q_++) {self.reuse_at(kind, 'q_')} = "
                                 f"iu[(gt * {a}u + q_ * {c}u) & {N_IN - 1}u];")
            inits.append("const unsigned NTOT = nt * gridDim.x * gridDim.y * gridDim.z; (void)NTOT;")
            if "gp" in kinds:
                cond = rr.choice(["(lt & 1u)", "(p1 & 1u)", "(bid % 2u == 0u)", "(lane < 16u)", "1"])
                inits.append(f"unsigned *rp = {cond} ? &ru_s[lt * {k}u] : &scr[gt * {k}u];")
            lists = self.statement_lists(body)
            if self.mode == "sync" and rr.random() < 0.6:
                # a segment of its own: short enough for LLVM to vectorize its thread loop
                # (where a reordering would show)
                # and of cheap unsigned arithmetic only: a call, an atomic or an inner loop
                # beside the reuse code keeps LLVM from vectorizing the thread loop
                body[:0] = [Stmt("code", "__syncthreads();"), self.reuse_statement(cheap=True),
                            Stmt("code", "__syncthreads();")]
            for _ in range(rr.randrange(1, 4)):
                where = rr.choice(lists)
                stmt = self.reuse_statement()
                if rr.random() < 0.3:
                    stmt = Stmt("if", self.thread_cond(Ctx(converged=False)), [[stmt], []])
                where.insert(rr.randrange(len(where) + 1), stmt)
            return k
        finally:
            self.r = main

    @staticmethod
    def statement_lists(body: list[Stmt]) -> list[list[Stmt]]:
        out = [body]
        for s in body:
            for b in s.bodies:
                out += Generator.statement_lists(b)
        return out

    def reuse_at(self, kind: str, j: str) -> str:
        k = self.reuse_k
        return {"ss": f"ru_s[lt * {k}u + {j}]", "si": f"ru_i[{j} * nt + lt]", "gs": f"scr[gt * {k}u + {j}]",
                "gi": f"scr[NTOT * {k}u + {j} * NTOT + gt]", "gp": f"rp[{j}]"}[kind]

    def reuse_index(self, cheap: bool = False) -> str:
        r = self.r
        if r.random() < 0.55:
            return f"{r.randrange(self.reuse_k)}u"
        return f"(({self.cheap_u32() if cheap else self.expr('u32', 1, Ctx())}) % {self.reuse_k}u)"

    def cheap_u32(self) -> str:
        """An unsigned expression of the thread's index and an input word, wrapping + * ^ only."""
        r = self.r
        leaf = lambda: r.choice(["lt", "gt", f"{r.randrange(1, 1 << 16)}u",
                                 f"iu[(gt * {r.randrange(1, 40, 2)}u + {r.randrange(N_IN)}u) & {N_IN - 1}u]"])
        out = leaf()
        for _ in range(r.randrange(0, 3)):
            out = f"({out} {r.choice(['+', '*', '^'])} {leaf()})"
        return out

    def reuse_statement(self, cheap: bool = False) -> Stmt:
        """A statement of the reuse mode; `cheap`: its values and run-time indices from
        cheap_u32 only."""
        r = self.r
        k = self.reuse_k
        at = lambda j: self.reuse_at(r.choice(self.reuse_kinds), j)
        u = self.var("u32") or "u0"
        e = (lambda: self.cheap_u32()) if cheap else (lambda: self.expr("u32", 2, Ctx()))
        shape = r.choice(["burst", "burst", "fill_read", "chain", "reverse"])
        if shape == "burst":       # stores at distinct j, loads in between them
            kind = r.choice(self.reuse_kinds)
            parts = []
            for j in r.sample(range(k), r.randrange(1, k + 1)):
                parts.append(f"{self.reuse_at(kind, f'{j}u')} = {e()};")
                if r.random() < 0.6:
                    src = self.reuse_at(r.choice([kind, kind] + self.reuse_kinds), self.reuse_index(cheap))
                    parts.append(f"{u} = ({u} * {r.choice([3, 31, 33])}u) ^ {src};")
            return Stmt("code", "{ " + " ".join(parts) + " }")
        if shape == "fill_read":   # a loop of stores, then a loop of loads in another order
            kind = r.choice(self.reuse_kinds)
            n = r.choice([f"{r.randrange(1, 2 * k + 1)}u", f"{k}u", "((lt & 3u) + 1u)", "(p1 % 4u + 1u)"])
            step, first = r.randrange(1, k + 3), r.randrange(k)
            return Stmt("code", f"{{ for (unsigned q_ = 0u; q_ < {k}u; q_++) {self.reuse_at(kind, 'q_')} = "
                                f"{e()} + q_ * {r.choice([1, 7, 0x9E3779B9])}u; "
                                f"for (unsigned q_ = 0u; q_ < {n}; q_++) {u} = {u} * 33u + "
                                f"{at(f'((q_ * {step}u + {first}u) % {k}u)')}; }}")
        if shape == "chain":       # read-modify-write of one word from another
            parts = []
            for _ in range(r.randrange(2, 5)):
                parts.append(f"{at(self.reuse_index(cheap))} = {at(self.reuse_index(cheap))} * {r.choice([3, 5, 9])}u + {e()};")
            parts.append(f"{u} ^= {at(self.reuse_index(cheap))};")
            return Stmt("code", "{ " + " ".join(parts) + " }")
        kind = r.choice(self.reuse_kinds)   # reverse: each word from its mirror, some already rewritten
        a, b = self.reuse_at(kind, f"({k - 1}u - q_)"), self.reuse_at(kind, "q_")
        return Stmt("code", f"{{ for (unsigned q_ = 0u; q_ < {k}u; q_++) {{ {a} = {b} + {a} * 3u; "
                            f"{u} += {b}; }} }}")


def generate(seed: int, index: int, reuse: bool | None = None, half: bool | None = None
             ) -> KernelSpec:
    """Kernel `index` of `seed`; `reuse`: every kernel in the same-thread reuse mode (None:
    CPUIFY_FUZZ_REUSE=1 says, else a share REUSE_SHARE of them); `half` the same for the
    half-precision mode (CPUIFY_FUZZ_HALF, HALF_SHARE)."""
    return Generator(seed, index, reuse, half).generate()


# --- rendering -------------------------------------------------------------------------------------

def render_kernel(spec: KernelSpec) -> str:
    nv = len(spec.variables)
    sink = " ".join(f"out[gt * {nv}u + {k}u] = {_slot(n, t)};" for k, (n, t) in enumerate(spec.variables))
    lines = [f'extern "C" __global__ void {spec.name}({SIGNATURE}) {{',
             "  const unsigned lt = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);",
             "  const unsigned nt = blockDim.x * blockDim.y * blockDim.z;",
             "  const unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);",
             "  const unsigned gt = bid * nt + lt;",
             "  const unsigned lane = lt & 31u, warp = lt >> 5;",
             "  const unsigned wn = nt - warp * 32u >= 32u ? 32u : nt - warp * 32u;   // lanes of this warp",
             "  const unsigned wmask = wn == 32u ? 0xFFFFFFFFu : (1u << wn) - 1u;",
             f"  const unsigned NTK = {max(spec.n_tickets, 1)}u;",
             "  (void)lane; (void)wn; (void)wmask; (void)NTK; (void)p0; (void)p1;"]
    n = spec.nthreads
    for s in spec.shared:
        lines.append("  " + {"u32": f"__shared__ unsigned sh_u[{n}];", "f32": f"__shared__ float sh_f[{n}];",
                             "f64": f"__shared__ double sh_d[{n}];", "sat": f"__shared__ unsigned sat[{N_SAT}];",
                             "ss": f"__shared__ unsigned ru_s[{n * spec.reuse_k}];",
                             "si": f"__shared__ unsigned ru_i[{n * spec.reuse_k}];"}[s])
    lines += ["  " + i for i in spec.inits]

    def emit(stmts: list[Stmt], ind: str) -> None:
        for s in stmts:
            if s.kind == "code":
                lines.append(ind + s.text)
            elif s.kind == "return":
                lines.append(ind + "{ " + sink + " return; }")
            elif s.kind == "if":
                lines.append(f"{ind}if {s.text} {{")
                emit(s.bodies[0], ind + "  ")
                if s.bodies[1]:
                    lines.append(ind + "} else {")
                    emit(s.bodies[1], ind + "  ")
                lines.append(ind + "}")
            else:
                lines.append(f"{ind}{s.text} {{")
                emit(s.bodies[0], ind + "  ")
                lines.append(ind + "}")
    emit(spec.body, "  ")
    lines.append("  " + sink)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _slot(n: str, t: str) -> str:
    return {"u32": f"(unsigned long long){n}", "s32": f"(unsigned long long)(unsigned){n}",
            "u64": n, "s64": f"(unsigned long long){n}", "f32": f"(unsigned long long)__float_as_uint({n})",
            "f64": f"(unsigned long long)__double_as_longlong({n})",
            "h16": f"(unsigned long long)__half_as_ushort({n})",
            "b16": f"(unsigned long long)__bfloat16_as_ushort({n})",
            "h2": (f"((unsigned long long)__half_as_ushort(__high2half({n})) << 16 | "
                   f"(unsigned long long)__half_as_ushort(__low2half({n})))")}[t]


def render_module(specs: list[KernelSpec]) -> str:
    return PRELUDE + "\n".join(render_kernel(s) for s in specs)
