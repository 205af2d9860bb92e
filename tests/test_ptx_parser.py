"""Unit tests of the PTX parser (cpuify.frontend.ptx_parser) on the instruction forms that
real CUDA code uses most (see /work/shared/ptx/census-full-opcodes.tsv), module-level
declarations, and the errors that parsing and lifting report."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from cpuify.errors import PTXError, UnsupportedError
from cpuify.frontend.ptx_ast import (
    Addr, CallArgs, Imm, Instruction, Label, Pair, Reg, Vec, VarDecl,
)
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.verifier import verify
from cpuify.lifting import lift_kernel

HEADER = """\
.version 8.0
.target sm_75
.address_size 64

.global .align 4 .b8 gdata[64];
.const .align 8 .b8 cdata[64];
"""

ENTRY_OPEN = """\
.visible .entry k(
\t.param .u64 k_param_0,
\t.param .u32 k_param_1
)
{
\t.reg .pred %p<8>;
\t.reg .b16 %rs<8>;
\t.reg .f32 %f<16>;
\t.reg .b32 %r<16>;
\t.reg .b64 %rd<16>;
\t.reg .f64 %fd<8>;
\t.shared .align 16 .b8 smem[1024];
"""
# the instruction under test is on this line of the generated PTX
INSTR_LINE = HEADER.count("\n") + ENTRY_OPEN.count("\n") + 1


def kernel_ptx(body: str) -> str:
    return HEADER + ENTRY_OPEN + body + "\n$L__BB0_2:\n$L__BB0_4:\n\tret;\n}\n"


def first_instruction(body: str) -> Instruction:
    m = parse_ptx(kernel_ptx(body))
    stmt = m.functions["k"].body[0]
    assert isinstance(stmt, Instruction)
    return stmt


def f32(bits: int) -> Imm:
    return Imm(struct.unpack("<f", struct.pack("<I", bits))[0], True, bits, 32)


def f64(bits: int) -> Imm:
    return Imm(struct.unpack("<d", struct.pack("<Q", bits))[0], True, bits, 64)


R = Reg


def V(*names: str) -> Vec:
    return Vec(tuple(Reg(n) for n in names))


# (full opcode as counted in the census, PTX line, expected operands, expected guard)
CASES: list[tuple[str, str, tuple, Reg | None]] = [
    ("mov.b32", "mov.b32 \t%r1, %f1;", (R("%r1"), R("%f1")), None),
    ("add.s32", "add.s32 \t%r1, %r2, -1;", (R("%r1"), R("%r2"), Imm(-1)), None),
    ("fma.rn.f32", "fma.rn.f32 \t%f1, %f2, 0f3F800000, %f3;",
     (R("%f1"), R("%f2"), f32(0x3F800000), R("%f3")), None),
    ("bra", "@%p1 bra \t$L__BB0_2;", (R("$L__BB0_2"),), R("%p1")),
    ("mov.u32", "mov.u32 \t%r1, %tid.x;", (R("%r1"), R("%tid.x")), None),
    ("add.s64", "add.s64 \t%rd1, %rd2, %rd3;", (R("%rd1"), R("%rd2"), R("%rd3")), None),
    ("mul.f32", "mul.f32 \t%f1, %f2, 0fBF000000;", (R("%f1"), R("%f2"), f32(0xBF000000)), None),
    ("and.b32", "and.b32  \t%r1, %r2, 31;", (R("%r1"), R("%r2"), Imm(31)), None),
    ("cvt.f32.f16", "cvt.f32.f16 \t%f1, %rs1;", (R("%f1"), R("%rs1")), None),
    ("add.f32", "add.f32 \t%f1, %f2, %f3;", (R("%f1"), R("%f2"), R("%f3")), None),
    ("shl.b32", "shl.b32 \t%r1, %r2, 2;", (R("%r1"), R("%r2"), Imm(2)), None),
    ("mov.f32", "mov.f32 \t%f1, 0f00000000;", (R("%f1"), f32(0)), None),
    ("selp.b32", "selp.b32 \t%r1, 1, 0, %p1;", (R("%r1"), Imm(1), Imm(0), R("%p1")), None),
    ("selp.f32", "selp.f32 \t%f1, %f2, %f3, %p2;", (R("%f1"), R("%f2"), R("%f3"), R("%p2")), None),
    ("shfl.sync.bfly.b32", "shfl.sync.bfly.b32 \t%r1|%p1, %r2, 16, 31, -1;",
     (Pair(R("%r1"), R("%p1")), R("%r2"), Imm(16), Imm(31), Imm(-1)), None),
    ("fma.rn.f64", "fma.rn.f64 \t%fd1, %fd2, %fd3, 0d3FF0000000000000;",
     (R("%fd1"), R("%fd2"), R("%fd3"), f64(0x3FF0000000000000)), None),
    ("shr.u32", "shr.u32 \t%r1, %r2, 28;", (R("%r1"), R("%r2"), Imm(28)), None),
    ("ld.global.u32", "ld.global.u32 \t%r1, [%rd1+8];", (R("%r1"), Addr("%rd1", 8)), None),
    ("sub.f32", "sub.f32 \t%f1, %f2, %f3;", (R("%f1"), R("%f2"), R("%f3")), None),
    ("bra.uni", "bra.uni \t$L__BB0_4;", (R("$L__BB0_4"),), None),
    ("st.global.u32", "st.global.u32 \t[%rd1], %r1;", (Addr("%rd1", 0), R("%r1")), None),
    ("ld.shared.u32", "ld.shared.u32 \t%r1, [%r2+128];", (R("%r1"), Addr("%r2", 128)), None),
    ("shl.b64", "shl.b64 \t%rd1, %rd2, 3;", (R("%rd1"), R("%rd2"), Imm(3)), None),
    ("setp.lt.u32", "setp.lt.u32 \t%p1, %r1, %r2;", (R("%p1"), R("%r1"), R("%r2")), None),
    ("setp.eq.s32", "setp.eq.s32 \t%p1, %r1, 0;", (R("%p1"), R("%r1"), Imm(0)), None),
    ("st.shared.u32", "st.shared.u32 \t[smem+4], %r1;", (Addr("smem", 4), R("%r1")), None),
    ("mul.f64", "mul.f64 \t%fd1, %fd2, 0d4000000000000000;",
     (R("%fd1"), R("%fd2"), f64(0x4000000000000000)), None),
    ("setp.ge.s32", "setp.ge.s32 \t%p1, %r1, %r2;", (R("%p1"), R("%r1"), R("%r2")), None),
    ("neg.f32", "neg.f32 \t%f1, %f2;", (R("%f1"), R("%f2")), None),
    ("setp.ne.s32", "setp.ne.s32 \t%p2, %r3, -7;", (R("%p2"), R("%r3"), Imm(-7)), None),
    ("ld.shared.f32", "ld.shared.f32 \t%f1, [%r1+64];", (R("%f1"), Addr("%r1", 64)), None),
    ("sub.s32", "sub.s32 \t%r1, %r2, %r3;", (R("%r1"), R("%r2"), R("%r3")), None),
    ("cvt.s64.s32", "cvt.s64.s32 \t%rd1, %r1;", (R("%rd1"), R("%r1")), None),
    ("ld.shared.v4.u32", "ld.shared.v4.u32 \t{%r1, %r2, %r3, %r4}, [%r5];",
     (V("%r1", "%r2", "%r3", "%r4"), Addr("%r5", 0)), None),
    ("ld.param.u64", "ld.param.u64 \t%rd1, [k_param_0];", (R("%rd1"), Addr("k_param_0", 0)), None),
    ("mul.wide.s32", "mul.wide.s32 \t%rd1, %r1, 4;", (R("%rd1"), R("%r1"), Imm(4)), None),
    ("mov.pred", "mov.pred \t%p1, -1;", (R("%p1"), Imm(-1)), None),
    ("sin.approx.f32", "sin.approx.f32 \t%f1, %f2;", (R("%f1"), R("%f2")), None),
    ("cos.approx.f32", "cos.approx.f32 \t%f1, %f2;", (R("%f1"), R("%f2")), None),
    ("setp.lt.f64", "setp.lt.f64 \t%p1, %fd1, 0d0000000000000000;",
     (R("%p1"), R("%fd1"), f64(0)), None),
    ("setp.lt.s32", "setp.lt.s32 \t%p1, %r1, 16;", (R("%p1"), R("%r1"), Imm(16)), None),
    ("cvta.to.global.u64", "cvta.to.global.u64 \t%rd1, %rd2;", (R("%rd1"), R("%rd2")), None),
    ("mov.f64", "mov.f64 \t%fd1, 0dBFF0000000000000;", (R("%fd1"), f64(0xBFF0000000000000)), None),
    ("st.shared.v4.u32", "st.shared.v4.u32 \t[%r1+16], {%r2, %r3, %r4, %r5};",
     (Addr("%r1", 16), V("%r2", "%r3", "%r4", "%r5")), None),
    ("ld.const.f64", "ld.const.f64 \t%fd1, [cdata+16];", (R("%fd1"), Addr("cdata", 16)), None),
    ("setp.gt.u32", "setp.gt.u32 \t%p1, %r1, 1023;", (R("%p1"), R("%r1"), Imm(1023)), None),
    ("mov.u64", "mov.u64 \t%rd1, gdata;", (R("%rd1"), R("gdata")), None),
    ("mov.b64", "mov.b64 \t%rd1, {%r1, %r2};", (R("%rd1"), V("%r1", "%r2")), None),
    ("mul.wide.u32", "mul.wide.u32 \t%rd1, %r1, 8;", (R("%rd1"), R("%r1"), Imm(8)), None),
    ("cvt.u64.u32", "cvt.u64.u32 \t%rd1, %r1;", (R("%rd1"), R("%r1")), None),
    ("mul.lo.s32", "mul.lo.s32 \t%r1, %r2, %r3;", (R("%r1"), R("%r2"), R("%r3")), None),
    ("mad.lo.s32", "mad.lo.s32 \t%r1, %r2, %r3, %r4;", (R("%r1"), R("%r2"), R("%r3"), R("%r4")), None),
    ("setp.ne.u32", "setp.ne.u32 \t%p1, %r1, 0;", (R("%p1"), R("%r1"), Imm(0)), None),
    ("vote.ballot.sync.b32", "vote.ballot.sync.b32 \t%r1, %p1, -1;",
     (R("%r1"), R("%p1"), Imm(-1)), None),
    ("shfl.sync.down.b32", "shfl.sync.down.b32 \t%r1|%p1, %r2, %r3, 31, -1;",
     (Pair(R("%r1"), R("%p1")), R("%r2"), R("%r3"), Imm(31), Imm(-1)), None),
    ("sub.f64", "sub.f64 \t%fd1, %fd2, %fd3;", (R("%fd1"), R("%fd2"), R("%fd3")), None),
    ("ld.global.f32", "ld.global.f32 \t%f1, [%rd1];", (R("%f1"), Addr("%rd1", 0)), None),
    ("setp.gt.s32", "setp.gt.s32 \t%p1, %r1, %r2;", (R("%p1"), R("%r1"), R("%r2")), None),
    ("bar.sync", "bar.sync \t0;", (Imm(0),), None),
    ("ld.global.v4.u32", "ld.global.v4.u32 \t{%r1, %r2, _, %r4}, [%rd1+16];",
     (V("%r1", "%r2", "_", "%r4"), Addr("%rd1", 16)), None),
    # beyond the 60 most frequent by count: the most widespread by number of files
    ("ret", "ret;", (), None),
    ("or.pred", "or.pred  \t%p1, %p2, %p3;", (R("%p1"), R("%p2"), R("%p3")), None),
    ("and.pred", "and.pred  \t%p1, %p2, %p3;", (R("%p1"), R("%p2"), R("%p3")), None),
    ("not.pred", "not.pred \t%p1, %p2;", (R("%p1"), R("%p2")), None),
    ("ld.param.u32", "ld.param.u32 \t%r1, [k_param_1];", (R("%r1"), Addr("k_param_1", 0)), None),
    ("st.global.f32", "@%p1 st.global.f32 \t[%rd1+-4], %f1;", (Addr("%rd1", -4), R("%f1")), R("%p1")),
    ("ld.global.f32", "ld.global.f32 \t%f1, [%rd4+-8];", (R("%f1"), Addr("%rd4", -8)), None),
    ("cvt.u32.u64", "cvt.u32.u64 \t%r1, %rd1;", (R("%r1"), R("%rd1")), None),
    ("shr.s32", "shr.s32 \t%r1, %r2, 31;", (R("%r1"), R("%r2"), Imm(31)), None),
    ("or.b32", "or.b32  \t%r1, %r2, 0x7fffffff;", (R("%r1"), R("%r2"), Imm(0x7FFFFFFF)), None),
    ("xor.b32", "xor.b32  \t%r1, %r2, -2147483648;", (R("%r1"), R("%r2"), Imm(-2147483648)), None),
    ("ld.global.nc.f32", "ld.global.nc.f32 \t%f1, [%rd1+4];", (R("%f1"), Addr("%rd1", 4)), None),
    ("ld.global.nc.u32", "ld.global.nc.u32 \t%r1, [%rd1];", (R("%r1"), Addr("%rd1", 0)), None),
    ("not.b32", "not.b32 \t%r1, %r2;", (R("%r1"), R("%r2")), None),
    ("ld.param.f32", "ld.param.f32 \t%f1, [k_param_1];", (R("%f1"), Addr("k_param_1", 0)), None),
    ("setp.ge.u32", "setp.ge.u32 \t%p1, %r1, %r2;", (R("%p1"), R("%r1"), R("%r2")), None),
    ("cvt.rn.f32.s32", "cvt.rn.f32.s32 \t%f1, %r1;", (R("%f1"), R("%r1")), None),
    ("div.rn.f32", "div.rn.f32 \t%f1, %f2, %f3;", (R("%f1"), R("%f2"), R("%f3")), None),
    ("st.shared.f32", "st.shared.f32 \t[%r1], %f1;", (Addr("%r1", 0), R("%f1")), None),
    ("setp.eq.s64", "setp.eq.s64 \t%p1, %rd1, 0;", (R("%p1"), R("%rd1"), Imm(0)), None),
    ("setp.lt.f32", "setp.lt.f32 \t%p1, %f1, 0f00000000;", (R("%p1"), R("%f1"), f32(0)), None),
    ("neg.s32", "neg.s32 \t%r1, %r2;", (R("%r1"), R("%r2")), None),
    ("max.s32", "max.s32 \t%r1, %r2, -3;", (R("%r1"), R("%r2"), Imm(-3)), None),
    ("max.f32", "max.f32 \t%f1, %f2, 0fFF800000;", (R("%f1"), R("%f2"), f32(0xFF800000)), None),
    ("selp.u32", "selp.u32 \t%r1, 1, 0, %p1;", (R("%r1"), Imm(1), Imm(0), R("%p1")), None),
    ("add.u64", "add.u64 \t%rd1, %rd2, 0;", (R("%rd1"), R("%rd2"), Imm(0)), None),
    ("st.global.u8", "st.global.u8 \t[%rd1+3], %rs1;", (Addr("%rd1", 3), R("%rs1")), None),
    ("abs.f32", "abs.f32 \t%f1, %f2;", (R("%f1"), R("%f2")), None),
    ("atom.global.add.u32", "atom.global.add.u32 \t%r1, [%rd1], 1;",
     (R("%r1"), Addr("%rd1", 0), Imm(1)), None),
    ("atom.shared.add.u32", "atom.shared.add.u32 \t%r1, [smem+8], %r2;",
     (R("%r1"), Addr("smem", 8), R("%r2")), None),
    ("bar.warp.sync", "bar.warp.sync \t-1;", (Imm(-1),), None),
    ("barrier.sync", "barrier.sync \t0;", (Imm(0),), None),
    ("shfl.sync.idx.b32", "shfl.sync.idx.b32 \t%r1|%p1, %r2, 0, 31, -1;",
     (Pair(R("%r1"), R("%p1")), R("%r2"), Imm(0), Imm(31), Imm(-1)), None),
    ("shf.l.wrap.b32", "shf.l.wrap.b32 \t%r1, %r2, %r3, 7;", (R("%r1"), R("%r2"), R("%r3"), Imm(7)), None),
    ("lop3.b32", "lop3.b32 \t%r1, %r2, %r3, %r4, 150;",
     (R("%r1"), R("%r2"), R("%r3"), R("%r4"), Imm(150)), None),
    ("ld.shared.v2.f32", "ld.shared.v2.f32 \t{%f1, %f2}, [%r1+8];", (V("%f1", "%f2"), Addr("%r1", 8)), None),
    ("st.global.v2.f32", "@!%p2 st.global.v2.f32 \t[%rd1+8], {%f1, %f2};",
     (Addr("%rd1", 8), V("%f1", "%f2")), R("%p2", True)),
    ("ex2.approx.ftz.f32", "ex2.approx.ftz.f32 \t%f1, %f2;", (R("%f1"), R("%f2")), None),
    ("rcp.rn.f64", "rcp.rn.f64 \t%fd1, %fd2;", (R("%fd1"), R("%fd2")), None),
    ("cvt.rzi.s32.f32", "cvt.rzi.s32.f32 \t%r1, %f1;", (R("%r1"), R("%f1")), None),
    ("setp.geu.f32", "setp.geu.f32 \t%p1, %f1, 0f7F800000;", (R("%p1"), R("%f1"), f32(0x7F800000)), None),
    ("mov.u16", "mov.u16 \t%rs1, 255;", (R("%rs1"), Imm(255)), None),
    ("st.local.u32", "st.local.u32 \t[%rd1], %r1;", (Addr("%rd1", 0), R("%r1")), None),
    ("@!bra", "@!%p3 bra \t$L__BB0_2;", (R("$L__BB0_2"),), R("%p3", True)),
]


@pytest.mark.parametrize("full, line, operands, guard", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_instruction_forms(full, line, operands, guard):
    instr = first_instruction("\t" + line)
    if not full.startswith("@"):
        assert instr.full_opcode == full
        assert instr.opcode == full.split(".")[0]
        assert instr.modifiers == tuple(full.split(".")[1:])
    assert instr.operands == operands
    assert instr.guard == guard
    assert instr.line == INSTR_LINE
    assert instr.text == line.strip()


@pytest.mark.parametrize("full, line, operands, guard", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_instruction_forms_lift(full, line, operands, guard):
    """Each form also lifts to IR that verifies and survives a print/parse round trip."""
    m = parse_ptx(kernel_ptx("\t" + line))
    k = lift_kernel(m, m.functions["k"])
    verify(k.op)
    text = print_op(k.op)
    assert print_op(parse_op(text)) == text
    # the op the instruction became carries its PTX line (and its modifiers)
    here = [op for op in k.op.walk() if op.attributes.get("line") == INSTR_LINE]
    words = line.rstrip(";").split()
    opcode, *mod_list = words[1 if line.startswith("@") else 0].split(".")
    mods = tuple(mod_list)
    expected = {"bra": "cf.", "ret": "upir.exit", "bar": "upir.barrier", "barrier": "upir.barrier",
                "shfl": "upir.warp_collective", "vote": "upir.warp_collective"}.get(opcode, f"ptx.{opcode}")
    if opcode == "bar" and "warp" in mods:
        expected = "upir.warp_collective"
    if opcode == "ld" and "param" in mods:
        expected = "upir.param"
    matching = [op for op in here if op.name.startswith(expected)]
    assert matching, f"no {expected} op for PTX line {INSTR_LINE}: {[op.name for op in here]}"
    if expected.startswith(("ptx.", "upir.warp", "upir.barrier")):
        assert any(tuple(op.attributes.get("mods", ())) == mods for op in matching)


CENSUS = Path("/work/shared/ptx/census-full-opcodes.tsv")


@pytest.mark.skipif(not CENSUS.exists(), reason="PTX census not available")
def test_cases_cover_the_most_frequent_census_opcodes():
    rows = [ln.split("\t") for ln in CENSUS.read_text().splitlines()[1:] if ln.strip()]
    by_count = [r[0] for r in rows[:60]]
    by_files = [r[0] for r in sorted(rows, key=lambda r: -int(r[2]))[:40]]
    covered = {c[0] for c in CASES}
    missing = [op for op in dict.fromkeys(by_count + by_files) if op not in covered]
    assert not missing, f"census opcodes without a parser test case: {missing}"


# --------------------------------------------------------------------------------------------
# operand details
# --------------------------------------------------------------------------------------------

def test_float_immediates_keep_their_bits():
    instr = first_instruction("\tmov.f32 %f1, 0f7FC00001;")
    imm = instr.operands[1]
    assert imm.is_float and imm.bits == 0x7FC00001 and imm.width == 32
    instr = first_instruction("\tmov.f64 %fd1, 0d8000000000000000;")   # -0.0
    imm = instr.operands[1]
    assert imm.bits == 1 << 63 and str(imm.value) == "-0.0" and imm.width == 64
    instr = first_instruction("\tadd.f32 %f1, %f2, -0f3F800000;")
    assert instr.operands[2] == f32(0xBF800000)


def test_integer_immediate_forms():
    instr = first_instruction("\tmov.u32 %r1, 0xFFFFFFFF;")
    assert instr.operands[1] == Imm(0xFFFFFFFF)
    instr = first_instruction("\tmov.u64 %rd1, -9223372036854775808;")
    assert instr.operands[1] == Imm(-(2**63))
    instr = first_instruction("\tmov.u32 %r1, 17U;")
    assert instr.operands[1] == Imm(17)


def test_statement_spanning_lines_and_comments():
    body = ("\tadd.s32 /* inline\n comment */ %r1,\n\t\t%r2, // trailing\n\t\t%r3;\n"
            "\tsub.s32 %r4, %r1, %r2;")
    m = parse_ptx(kernel_ptx(body))
    a, b = m.functions["k"].body[:2]
    assert a.operands == (R("%r1"), R("%r2"), R("%r3")) and a.line == INSTR_LINE
    assert b.opcode == "sub" and b.line == INSTR_LINE + 4


def test_labels_and_loc_lines():
    body = ('\t.loc 1 12 5\n'
            '$L__BB0_1:\n'
            '\tadd.s32 %r1, %r1, 1;\n'
            '\t.loc 1 13 3, function_name $L__info_string0, inlined_at 1 20 7\n'
            '\t@%p1 bra $L__BB0_1;\n'
            '\t.pragma "nounroll";')
    text = HEADER + '.file 1 "/tmp/x.cu"\n.file 2 "/usr/include/y.h", 1700000000, 1234\n' + \
        ENTRY_OPEN + body + "\n\tret;\n}\n"
    m = parse_ptx(text)
    body_stmts = m.functions["k"].body
    assert isinstance(body_stmts[0], Label) and body_stmts[0].name == "$L__BB0_1"
    assert [s.opcode for s in body_stmts[1:]] == ["add", "bra", "ret"]
    assert body_stmts[0].line == INSTR_LINE + 3     # two .file lines, then .loc
    k = lift_kernel(m, m.functions["k"])
    verify(k.op)


def test_register_declarations():
    m = parse_ptx(kernel_ptx("\tret;"))
    regs = m.functions["k"].regs
    assert regs["%p0"] == "pred" and regs["%p7"] == "pred" and "%p8" not in regs
    assert regs["%rd15"] == "b64" and regs["%fd3"] == "f64" and regs["%rs2"] == "b16"
    (smem,) = m.functions["k"].locals
    assert (smem.space, smem.type, smem.name, smem.align, smem.dims) == ("shared", "b8", "smem", 16, (1024,))


# --------------------------------------------------------------------------------------------
# module-level forms
# --------------------------------------------------------------------------------------------

MODULE = r'''
//
// Generated by NVIDIA NVVM Compiler
//
.version 8.0
.target sm_75
.address_size 64

/* a block comment
   spanning lines */
.extern .func  (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
.global .align 4 .b8 g[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
.const .align 8 .f64 c[2] = {0d3FF0000000000000, 0d4000000000000000};
.const .align 4 .f32 cf[3] = {0f3F800000, 0fBF000000, 0f00000000};
.global .align 4 .u32 scalar = 42;
.global .align 4 .s32 negs[2] = {-1, -2147483648};
.global .align 8 .u64 ptrs[2] = {generic(g), g+4};
.extern .shared .align 16 .b8 dyn[];
.global .align 1 .b8 $str[4] = {104, 105, 10, 0};
.visible .global .align 16 .v4 .f32 vecs[2];

.func  (.param .b32 func_retval0, .param .b32 func_retval1) _Z4pairi(
	.param .b32 _Z4pairi_param_0
)
{
	.reg .b32 	%r<4>;
	ld.param.b32 	%r1, [_Z4pairi_param_0];
	add.s32 	%r2, %r1, 1;
	st.param.b32 	[func_retval0+0], %r1;
	st.param.b32 	[func_retval1+0], %r2;
	ret;
}

	// .weak	_Z2mmILi16EEvPf
.weak .entry _Z2mmILi16EEvPf(
	.param .u64 .ptr .global .align 4 _Z2mmILi16EEvPf_param_0
)
.maxntid 256, 1, 1
.minnctapersm 2
{
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<4>;
	.loc 1 10 3
	ld.param.u64 	%rd1, [_Z2mmILi16EEvPf_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r1, %tid.x;
	{ // callseq 0, 0
	.reg .b32 temp_param_reg;
	.param .b32 param0;
	st.param.b32 	[param0+0], %r1;
	.param .b32 retval0;
	.param .b32 retval1;
	call.uni (retval0, retval1),
	_Z4pairi,
	(
	param0
	);
	ld.param.b32 	%r2, [retval0+0];
	ld.param.b32 	%r3, [retval1+0];
	{
	// nested braces inside a callseq
	add.s32 	%r4, %r2, %r3;
	}
	} // callseq 0
	st.global.u32 	[%rd2], %r4;
	ret;
}

.visible .entry plain(
	.param .align 8 .b8 plain_param_0[16],
	.param .f32 plain_param_1
)
.reqntid 128
{
	ret;
}
'''


@pytest.fixture(scope="module")
def mod():
    return parse_ptx(MODULE)


def _var(mod, name: str) -> VarDecl:
    (v,) = [v for v in mod.variables if v.name == name]
    return v


def test_module_header(mod):
    assert mod.version == "8.0" and mod.target == ("sm_75",) and mod.address_size == 64


def test_global_byte_array_initializer(mod):
    g = _var(mod, "g")
    assert (g.space, g.type, g.align, g.dims, g.linkage) == ("global", "b8", 4, (16,), "")
    assert g.init == list(range(1, 17))
    assert g.size == 16


def test_const_f64_initializer(mod):
    c = _var(mod, "c")
    assert (c.space, c.type, c.align, c.dims) == ("const", "f64", 8, (2,))
    assert c.init == [1.0, 2.0] and all(isinstance(x, float) for x in c.init)
    cf = _var(mod, "cf")
    assert cf.init == [1.0, -0.5, 0.0]


def test_scalar_negative_and_symbolic_initializers(mod):
    assert _var(mod, "scalar").init == [42] and _var(mod, "scalar").dims == ()
    assert _var(mod, "negs").init == [-1, -2147483648]
    assert _var(mod, "ptrs").init == ["g", "g+4"]
    assert _var(mod, "$str").init == [104, 105, 10, 0]


def test_extern_shared_unsized(mod):
    d = _var(mod, "dyn")
    assert (d.space, d.linkage, d.align, d.dims, d.size) == ("shared", "extern", 16, (None,), 0)


def test_vector_variable(mod):
    v = _var(mod, "vecs")
    assert (v.vector, v.type, v.linkage, v.elem_size, v.size) == (4, "f32", "visible", 16, 32)


def test_extern_func_declaration(mod):
    f = mod.functions["vprintf"]
    assert f.body is None and f.kind == "func" and f.linkage == "extern"
    assert [(r.name, r.type) for r in f.returns] == [("func_retval0", "b32")]
    assert [p.name for p in f.params] == ["vprintf_param_0", "vprintf_param_1"]


def test_func_with_return_params(mod):
    f = mod.functions["_Z4pairi"]
    assert f.kind == "func" and f.body is not None
    assert [(r.name, r.type) for r in f.returns] == [("func_retval0", "b32"), ("func_retval1", "b32")]
    assert [(p.name, p.type) for p in f.params] == [("_Z4pairi_param_0", "b32")]
    assert [s.opcode for s in f.body] == ["ld", "add", "st", "st", "ret"]
    assert f not in mod.entries


def test_weak_entry_with_directives(mod):
    f = mod.functions["_Z2mmILi16EEvPf"]
    assert f.kind == "entry" and f.linkage == "weak"
    assert f.directives == {"maxntid": (256, 1, 1), "minnctapersm": (2,)}
    (p,) = f.params
    assert (p.type, p.align, p.ptr_space) == ("u64", 4, "global")
    assert {e.name for e in mod.entries} == {"_Z2mmILi16EEvPf", "plain"}


def test_struct_param_and_reqntid(mod):
    f = mod.functions["plain"]
    assert f.directives == {"reqntid": (128,)}
    p0, p1 = f.params
    assert (p0.type, p0.align, p0.dims, p0.size) == ("b8", 8, (16,), 16)
    assert (p1.type, p1.size) == ("f32", 4)


def test_callseq_braces_and_call_operands(mod):
    f = mod.functions["_Z2mmILi16EEvPf"]
    ops = [s.opcode for s in f.body]
    assert ops == ["ld", "cvta", "mov", "st", "call", "ld", "ld", "add", "st", "ret"]
    call = f.body[4]
    assert call.modifiers == ("uni",)
    assert call.operands == (CallArgs(("retval0", "retval1")), R("_Z4pairi"), CallArgs(("param0",)))
    assert {v.name for v in f.locals if v.space == "param"} == {"param0", "retval0", "retval1"}
    assert f.regs["temp_param_reg"] == "b32"


def test_call_with_two_results_lifts(mod):
    k = lift_kernel(mod, mod.functions["_Z2mmILi16EEvPf"])
    verify(k.op)
    adds = [op for op in k.op.walk() if op.name == "ptx.add"]
    assert len(adds) == 2     # callee's add and the caller's
    # the caller adds the callee's two results: r1 and r1 + 1
    caller_add = adds[-1]
    callee_add = adds[0]
    assert caller_add.operands[1] is callee_add.results[0]
    assert caller_add.operands[0] is callee_add.operands[0]


def test_real_nvrtc_module_parses():
    from cpuify.frontend.nvrtc import compile_to_ptx
    src = r'''
    __constant__ double coef[2] = {1.0, 2.0};
    __device__ int counter[4] = {1, 2, 3, 4};
    extern __shared__ float dyn[];
    template <int N> __global__ void scale(float* p) {
        dyn[threadIdx.x] = p[threadIdx.x] * N * (float)coef[threadIdx.x & 1];
        __syncthreads();
        p[threadIdx.x] = dyn[(threadIdx.x + 1) % blockDim.x] + counter[0];
    }
    template __global__ void scale<3>(float*);
    extern "C" __global__ void __launch_bounds__(128) lb(float* p) { p[threadIdx.x] = 1.0f; }
    '''
    m = parse_ptx(compile_to_ptx(src).ptx)
    # NVVM emits initialized variables as byte arrays, dropping trailing zero bytes
    coef = _var(m, "coef")
    assert (coef.space, coef.type, coef.dims) == ("const", "b8", (16,))
    assert struct.unpack("<2d", bytes(coef.init)) == (1.0, 2.0)
    counter = _var(m, "counter")
    assert counter.size == 16 and len(counter.init) <= 16
    assert struct.unpack("<4i", bytes(counter.init).ljust(16, b"\0")) == (1, 2, 3, 4)
    assert _var(m, "dyn").dims == (None,) and _var(m, "dyn").linkage == "extern"
    (tmpl,) = [e for e in m.entries if e.name.startswith("_Z5scale")]
    assert tmpl.linkage == "weak"
    assert m.functions["lb"].directives.get("maxntid") == (128, 1, 1)
    for e in m.entries:
        verify(lift_kernel(m, e).op)


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------

def test_garbage_character_names_the_line():
    with pytest.raises(PTXError) as exc:
        parse_ptx(kernel_ptx("\tadd.s32 %r1, %r2, #3;"))
    assert exc.value.line == INSTR_LINE
    assert f"PTX line {INSTR_LINE}" in str(exc.value)
    assert "'#'" in str(exc.value)


def test_garbage_token_in_statement_names_the_line():
    body = "\tadd.s32 %r1, %r2, %r3;\n\tsub.s32 %r1 %r2, %r3;"
    with pytest.raises(PTXError) as exc:
        parse_ptx(kernel_ptx(body))
    assert exc.value.line == INSTR_LINE + 1
    assert f"PTX line {INSTR_LINE + 1}" in str(exc.value)
    assert "kernel 'k'" in str(exc.value)
    assert "sub.s32 %r1 %r2, %r3;" in str(exc.value)     # the source line is quoted


def test_garbage_at_module_scope_names_the_line():
    text = HEADER + "\n\nfoo bar;\n"
    with pytest.raises(PTXError) as exc:
        parse_ptx(text)
    assert exc.value.line == HEADER.count("\n") + 3
    assert "module scope" in str(exc.value)


def test_unterminated_body():
    with pytest.raises(PTXError, match="unexpected end|unterminated"):
        parse_ptx(HEADER + ENTRY_OPEN + "\tadd.s32 %r1, %r2, %r3;\n")


def test_bad_address_operand():
    with pytest.raises(PTXError) as exc:
        parse_ptx(kernel_ptx("\tld.global.u32 %r1, [%rd1*4];"))
    assert exc.value.line == INSTR_LINE


def _lift_error(body: str, cls=UnsupportedError):
    m = parse_ptx(kernel_ptx(body))
    with pytest.raises(cls) as exc:
        lift_kernel(m, m.functions["k"])
    return exc.value


def test_unknown_opcode_is_unsupported_when_lifted():
    m = parse_ptx(kernel_ptx("\tadd.s32 %r1, %r2, %r3;\n\tfrobnicate.b32 %r1, %r2;"))
    assert m.functions["k"].body[1].opcode == "frobnicate"     # the parser accepts it
    err = _lift_error("\tadd.s32 %r1, %r2, %r3;\n\tfrobnicate.b32 %r1, %r2;")
    msg = str(err)
    assert "frobnicate" in msg and "kernel 'k'" in msg and f"PTX line {INSTR_LINE + 1}" in msg
    assert err.line == INSTR_LINE + 1 and err.kernel == "k"


def test_unsupported_modifier_is_named():
    err = _lift_error("\tadd.s32.foo %r1, %r2, %r3;")
    assert "'.foo'" in str(err) and err.line == INSTR_LINE and err.kernel == "k"


def test_texture_fetch_lifts_to_one_op():
    body = "\ttex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}];"
    m = parse_ptx(kernel_ptx(body))
    kernel = lift_kernel(m, m.functions["k"])
    texs = [op for op in kernel.op.walk() if op.name == "ptx.tex"]
    assert len(texs) == 1
    # the handle, then four coordinates (the two missing ones are zero constants)
    assert len(texs[0].operands) == 5 and len(texs[0].results) == 4
    assert [r.type for r in texs[0].results] == ["f32"] * 4


@pytest.mark.parametrize("body, words", [
    # a texture reference by name (pre-CUDA 12 PTX) or a handle outside [handle, {coords}]
    ("\ttex.1d.v4.f32.s32 {%f1, %f2, %f3, %f4}, %rd1;", "[handle, {coordinates}]"),
    ("\ttex.cube.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6, %f5, %f6}];", "cube"),
    ("\ttex.2d.v4.f16.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}];", "f32, s32 or u32"),
    ("\tsust.p.2d.b32.trap [%rd1, {%r1, %r2}], {%r3};", "'.p'"),
])
def test_texture_forms_cpuify_does_not_sample_are_refused(body: str, words: str):
    err = _lift_error(body)
    assert words in str(err) and err.line == INSTR_LINE and err.kernel == "k"


@pytest.mark.parametrize("body, word", [
    ("\tmma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 {%r1,%r2,%r3,%r4}, {%r5,%r6,%r7,%r8}, {%r9,%r10}, {%r1,%r2,%r3,%r4};",
     "m16n8k64 is not supported"),
    ("\tcp.async.bulk.commit_group;", "bulk (TMA)"),
    ("\tcp.async.cg.shared.global [%r1], [%rd1], 8;", "16 with .cg"),
    ("\tbar.red.popc.u32 %r1, 1, 64, %p1;", "thread count"),
    ("\trcp.approx.f16x2 %r1, %r2;", "half/bfloat16 operation"),
    ("\tmin.xorsign.abs.bf16x2 %r1, %r2, %r3;", "xorsign"),
])
def test_other_refusals_name_the_feature(body, word):
    err = _lift_error(body)
    assert word in str(err) and err.line == INSTR_LINE


def test_wmma_fragment_with_the_wrong_register_count():
    err = _lift_error("\twmma.load.a.sync.aligned.row.m16n16k16.f16 {%r1}, [%rd1], %r2;", PTXError)
    assert "expected 8 registers" in str(err) and err.line == INSTR_LINE


def test_branch_to_undefined_label():
    err = _lift_error("\t@%p1 bra $L__nowhere;", PTXError)
    assert "$L__nowhere" in str(err) and "undefined label" in str(err)
    assert err.line == INSTR_LINE and err.kernel == "k"


def test_undeclared_register():
    err = _lift_error("\tadd.s32 %r1, %zz9, 1;", PTXError)
    assert "%zz9" in str(err) and err.line == INSTR_LINE


RECURSIVE = HEADER + r'''
.func  (.param .b32 func_retval0) fact(
	.param .b32 fact_param_0
)
{
	.reg .b32 	%r<4>;
	ld.param.b32 	%r1, [fact_param_0];
	{ // callseq 0, 0
	.param .b32 param0;
	st.param.b32 	[param0+0], %r1;
	.param .b32 retval0;
	call.uni (retval0), fact, (param0);
	ld.param.b32 	%r2, [retval0+0];
	} // callseq 0
	st.param.b32 	[func_retval0+0], %r2;
	ret;
}
.visible .entry k(.param .u32 k_param_0)
{
	.reg .b32 	%r<3>;
	ld.param.u32 	%r1, [k_param_0];
	{ // callseq 1, 0
	.param .b32 param0;
	st.param.b32 	[param0+0], %r1;
	.param .b32 retval0;
	call.uni (retval0), fact, (param0);
	ld.param.b32 	%r2, [retval0+0];
	} // callseq 1
	ret;
}
'''


def test_recursion_runs_on_a_call_stack():
    # the recursive cycle is emitted once: the call pushes a frame and jumps, a frame that
    # outgrows the stack traps with a stack overflow
    m = parse_ptx(RECURSIVE)
    lifted = lift_kernel(m, m.functions["k"])
    verify(lifted.op)
    text = print_op(lifted.op)
    assert text.count('"upir.call_stack"') == 1
    assert "stack_overflow = true" in text


def test_mutual_recursion_runs_on_a_call_stack():
    text = HEADER + r'''
.func f();
.func g()
{
	call.uni f;
	ret;
}
.func f()
{
	call.uni g;
	ret;
}
.visible .entry k()
{
	call.uni f;
	ret;
}
'''
    m = parse_ptx(text)
    lifted = lift_kernel(m, m.functions["k"])
    verify(lifted.op)
    assert print_op(lifted.op).count('"upir.call_stack"') == 1


def test_barrier_inside_a_recursion_is_refused():
    text = RECURSIVE.replace("\tld.param.b32 \t%r1, [fact_param_0];",
                             "\tld.param.b32 \t%r1, [fact_param_0];\n\tbar.sync 0;")
    m = parse_ptx(text)
    with pytest.raises(UnsupportedError, match=r"'bar\.sync' in the recursive device function 'fact'") as exc:
        lift_kernel(m, m.functions["k"])
    assert exc.value.kernel == "k"
    assert text.splitlines()[exc.value.line - 1].strip().startswith("bar.sync")


def test_indirect_call_without_prototype_is_refused():
    body = ("\t{\n\t.param .b32 param0;\n\tst.param.b32 [param0+0], %r1;\n"
            "\t.param .b32 retval0;\n\tcall (retval0), %rd1, (param0);\n"
            "\tld.param.b32 %r2, [retval0+0];\n\t}")
    err = _lift_error(body)
    assert "indirect call" in str(err) and err.line == INSTR_LINE + 4


INDIRECT = HEADER + r'''
.func  (.param .b32 func_retval0) inc(.param .b32 inc_param_0)
{
	.reg .b32 %r<3>;
	ld.param.b32 %r1, [inc_param_0];
	add.s32 %r2, %r1, 77001;
	st.param.b32 [func_retval0+0], %r2;
	ret;
}
.func  (.param .b32 func_retval0) dbl(.param .b32 dbl_param_0)
{
	.reg .b32 %r<3>;
	ld.param.b32 %r1, [dbl_param_0];
	mul.lo.s32 %r2, %r1, 77002;
	st.param.b32 [func_retval0+0], %r2;
	ret;
}
.func  (.param .b64 func_retval0) wide(.param .b32 wide_param_0)
{
	.reg .b64 %rd<2>;
	mov.u64 %rd1, 77003;
	st.param.b64 [func_retval0+0], %rd1;
	ret;
}
.func  (.param .b32 func_retval0) hidden(.param .b32 hidden_param_0)
{
	.reg .b32 %r<2>;
	mov.u32 %r1, 77004;
	st.param.b32 [func_retval0+0], %r1;
	ret;
}
.global .align 8 .u64 table[3] = {inc, dbl, wide};
.visible .entry k(.param .u64 k_param_0)
{
	.reg .b32 %r<4>;
	.reg .b64 %rd<4>;
	mov.u32 %r1, %tid.x;
	mul.wide.u32 %rd1, %r1, 8;
	mov.u64 %rd2, table;
	add.s64 %rd2, %rd2, %rd1;
	ld.global.u64 %rd3, [%rd2];
	{ // callseq 0, 0
	.param .b32 param0;
	st.param.b32 [param0+0], %r1;
	.param .b32 retval0;
	prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);
	call (retval0), %rd3, (param0), prototype_0;
	ld.param.b32 %r2, [retval0+0];
	} // callseq 0
	ret;
}
'''


def test_indirect_call_dispatches_over_functions_that_fit():
    """The candidates of `call (ret), %rd, (args), prototype` are the functions whose address
    the module takes and whose signature fits: `inc` and `dbl`, not `wide` (another return
    size) nor `hidden` (its address is never taken)."""
    m = parse_ptx(INDIRECT)
    assert m.functions["k"].prototypes == {"prototype_0": ((4,), (4,))}
    addresses = m.function_addresses()
    assert set(addresses) == {"inc", "dbl", "wide"} and len(set(addresses.values())) == 3
    text = print_op(lift_kernel(m, m.functions["k"]).op)
    assert "77001" in text and "77002" in text
    assert "77003" not in text and "77004" not in text
    assert str(addresses["inc"]) in text and str(addresses["dbl"]) in text
    assert "upir.trap" in text          # a pointer to neither


def test_call_to_function_without_body():
    text = HEADER + ".extern .func ext();\n.visible .entry k()\n{\n\tcall.uni ext;\n\tret;\n}\n"
    m = parse_ptx(text)
    with pytest.raises(UnsupportedError, match="'ext'.*no body"):
        lift_kernel(m, m.functions["k"])
