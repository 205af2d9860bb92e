"""Packed halves after lifting's expansion (lifting/halves.fold_half_packing): a chain of
f16x2 fmas (mixbench's half kernels) keeps each result's halves instead of packing it and
unpacking it again for the next fma, and unpacks a shared operand once per block; the code
computes what the packed chain computes, lane by lane (compiled, with the half fmas inline
and as calls, and interpreted, against each lane's fmas rounded here exactly)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import cpuify
from cpuify.codegen import half_float
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.lifting import lift_kernel
from test_ptx_table_cvt import _exact, _rounded
from test_ptx_table_half_fma import _expected

CHAIN = 8           # packed fmas in the chain
STORED_AFTER = 4    # the chain's value after this many fmas is stored too (its pack stays)


def _kernel() -> str:
    """out[3i] = x after CHAIN steps of x = fma.rn.f16x2(x, x, seed), out[3i+1] = x after
    STORED_AFTER steps; the halves of the last x added (f16) into the low half of out[3i+2]."""
    lines = [".version 7.8", ".target sm_80", ".address_size 64", "",
             ".visible .entry hchain(.param .u64 pin, .param .u64 pout, .param .b32 pseed, "
             ".param .u32 pn)", "{",
             "    .reg .pred %p<2>;", "    .reg .b16 %h<4>;", "    .reg .b32 %r<40>;",
             "    .reg .b64 %a<8>;",
             "    ld.param.u64 %a1, [pin];", "    ld.param.u64 %a2, [pout];",
             "    ld.param.b32 %r30, [pseed];", "    ld.param.u32 %r31, [pn];",
             "    mov.u32 %r32, %tid.x;", "    mov.u32 %r33, %ctaid.x;", "    mov.u32 %r34, %ntid.x;",
             "    mad.lo.s32 %r32, %r33, %r34, %r32;",
             "    setp.ge.u32 %p1, %r32, %r31;", "    @%p1 bra DONE;",
             "    cvta.to.global.u64 %a1, %a1;", "    cvta.to.global.u64 %a2, %a2;",
             "    mul.wide.u32 %a3, %r32, 4;", "    add.s64 %a4, %a1, %a3;",
             "    mul.wide.u32 %a5, %r32, 12;", "    add.s64 %a6, %a2, %a5;",
             "    ld.global.b32 %r0, [%a4];"]
    for k in range(CHAIN):
        lines.append(f"    fma.rn.f16x2 %r{k + 1}, %r{k}, %r{k}, %r30;")
        if k + 1 == STORED_AFTER:
            lines.append(f"    st.global.b32 [%a6+4], %r{k + 1};")
    lines += [f"    st.global.b32 [%a6], %r{CHAIN};",
              f"    mov.b32 {{%h1, %h2}}, %r{CHAIN};", "    add.rn.f16 %h3, %h1, %h2;",
              "    st.global.b16 [%a6+8], %h3;", "    st.global.b16 [%a6+10], %h1;",
              "DONE:", "    ret;", "}", ""]
    return "\n".join(lines)


def _lane_chain(x: int, seed: int) -> list[int]:
    """One half's values after 0..CHAIN fmas x = x * x + seed, each rounded once."""
    out = [x]
    for _ in range(CHAIN):
        r = _expected(out[-1], out[-1], seed, "f16", False)
        assert r is not None        # (the inputs keep the chain finite)
        out.append(r)
    return out


def _packing_ops(kernel_op) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    """(unpacks, packs, f16 fmas) of a lifted kernel."""
    unpacks = packs = fmas = 0
    for op in kernel_op.walk():
        if op.name == "ptx.mov" and op.attributes.get("mods") == ["b32"]:
            unpacks += len(op.operands) == 1 and len(op.results) == 2
            packs += len(op.operands) == 2 and len(op.results) == 1
        fmas += op.name == "ptx.fma" and "f16" in op.attributes.get("mods", [])
    return unpacks, packs, fmas


def test_chain_of_packed_fmas_lifts_without_repacking():
    module = parse_ptx(_kernel())
    op = lift_kernel(module, module.functions["hchain"]).op
    # the loaded value and the seed are unpacked once each (before: three unpacks per fma
    # and the explicit mov's); the two stored values keep their packs
    assert _packing_ops(op) == (2, 2, 2 * CHAIN)


@pytest.mark.parametrize("how", ["inline", "calls", "interpreted"])
def test_chain_of_packed_fmas_matches_exact_lanes(how, monkeypatch):
    if how == "calls":      # the shared, not inlined half fma of kernels with many of them
        monkeypatch.setattr(half_float, "FMA_HALF_INLINE_LIMIT", 0)
        monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    rng = np.random.default_rng(15)
    n = 300
    # |x| <= 1 and -0.5 <= seed <= 0 keep x * x + seed within [-0.5, 1]
    halves = np.concatenate([rng.uniform(-1, 1, 2 * n - 4), [1.0, -1.0, 0.0, -0.0]])
    packed = halves.astype(np.float16).view(np.uint32)
    seed_halves = np.array([-0.3125, -0.0478], np.float16)
    seed = seed_halves.view(np.uint32)[0]
    out = np.zeros(3 * n, np.uint32)
    args = (packed, out, np.uint32(seed), np.uint32(n))
    grid, block = ((n + 63) // 64,), (64,)
    ptx = _kernel()
    if how == "interpreted":
        interpret_kernel(ptx, "hchain", grid, block, args)
    else:
        cpuify.RawModule(ptx=ptx).get_function("hchain")(grid, block, args)
    seed_bits = [int(b) for b in seed_halves.view(np.uint16)]
    bits = packed.view(np.uint16).reshape(n, 2)
    got = out.reshape(n, 3)
    for i in range(n):
        lanes = [_lane_chain(int(bits[i, k]), seed_bits[k]) for k in (0, 1)]
        final = lanes[0][CHAIN] | lanes[1][CHAIN] << 16
        middle = lanes[0][STORED_AFTER] | lanes[1][STORED_AFTER] << 16
        total = _rounded(Fraction(_exact(lanes[0][CHAIN], "f16")) + _exact(lanes[1][CHAIN], "f16"),
                         "f16", "rn")
        assert (int(got[i, 0]), int(got[i, 1])) == (final, middle), (how, i)
        assert int(got[i, 2]) == total | lanes[0][CHAIN] << 16, (how, i)
