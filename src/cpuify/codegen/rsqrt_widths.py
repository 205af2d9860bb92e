"""rsqrtf at the width LLVM vectorized it to: the lean refinement of AVX-512's 14-bit estimate.

approx_math.rsqrt_f32 emits one scalar sequence for rsqrt.approx.f32 that is right whichever
estimate the x86 backend picks for `1 / sqrt(x)` with approximate-function flags: vrsqrt14ps
(relative error < 2^-14, subnormal inputs handled) in 16-wide vectors, rsqrtps/rsqrtss (< 1.5 *
2^-12, subnormal inputs flushed) in narrower ones and in scalar code.  It therefore scales
subnormal inputs by 2^24 (a compare, two masked multiplies) and refines with a third-order
step (five operations).  Which width a thread loop gets is known only after LLVM's loop
vectorizer ran, so this runs on the optimized module, before code generation.

Where the CPU has AVX-512 (and AVX-512VL for the 4- and 8-wide forms; scalar code uses
vrsqrt14ss), each refined estimate
of that shape is replaced by an explicit vrsqrt14 (`llvm.x86.avx512.rsqrt14.*`: 14 bits,
subnormal inputs handled unless MXCSR's DAZ is set, which happens only in kernels whose
rsqrt flushes them anyway) and one Newton-Raphson step, y + y * (1/2 - (x*y) * (y/2)): four
floating-point operations, no scaling, against ten.  Relative error of the step ~1.5 *
2^-28 plus its roundings: within 2 ulp (CUDA's bound for rsqrtf) of the correctly rounded
result, measured over every f32 by tests/test_math_approx.py.  Special values as before:
where the step is NaN (x = +-0 -> +-inf, +inf -> +0, x < 0 or NaN -> NaN) the estimate
stands.  n-body (the suite's, one thread) 106 -> 79 ms.

The shape recognized is approx_math.rsqrt_f32's after LLVM's optimization: `t = x < 2^-126`,
`s = select t, x * 2^24, x`, `y = 1.0 / sqrt(s)` (approximate), `o = select c, y, z`, and
the result `select t, o * 2^12, o`.  Anything else, or an LLVM that reshapes it, is left as it
is (correct, slower)."""

from __future__ import annotations

import re

_NAME = r"%[-\w.$]+"
_DEF = re.compile(rf"^  ({_NAME}) = (.*)$")
_TINY = "0x3810000000000000"        # 2^-126
_UP = "0x4170000000000000"          # 2^24
_DOWN = "4.096000e+03"              # 2^12
_ONE = "1.000000e+00"

#: lanes -> (intrinsic suffix, mask type), for llvm.x86.avx512.rsqrt14.ps.*
_VECTOR = {16: ("512", "i16"), 8: ("256", "i8"), 4: ("128", "i8")}


def _const(ty: str, value: str) -> str:
    return f"splat (float {value})" if ty.startswith("<") else value


def _match(defs: dict[str, str], name: str, ty: str) -> tuple[str, str] | None:
    """(x, t) when `name` is the result of the refined estimate of rsqrt(x) at type `ty`
    (`<N x float>` or `float`), t its subnormal test; else None."""
    v = re.escape(ty)
    final = re.fullmatch(rf"select (<\d+ x i1>|i1) ({_NAME}), {v} ({_NAME}), {v} ({_NAME})",
                         defs.get(name, ""))
    if not final:
        return None
    _, test, up, o = final.groups()
    if not re.fullmatch(rf"fmul (?:[a-z]+ )*{v} (?:{re.escape(o)}, {re.escape(_const(ty, _DOWN))}"
                        rf"|{re.escape(_const(ty, _DOWN))}, {re.escape(o)})", defs.get(up, "")):
        return None
    kept = re.fullmatch(rf"select (?:<\d+ x i1>|i1) {_NAME}, {v} ({_NAME}), {v} {_NAME}",
                        defs.get(o, ""))
    if not kept:
        return None
    quotient = re.fullmatch(rf"fdiv ((?:[a-z]+ )*){v} {re.escape(_const(ty, _ONE))}, ({_NAME})",
                            defs.get(kept.group(1), ""))
    if not quotient or "afn" not in quotient.group(1):
        return None
    root = re.fullmatch(rf"(?:tail )?call ((?:[a-z]+ )*){v} @llvm\.sqrt\.(?:v\d+)?f32\({v} ({_NAME})\)",
                        defs.get(quotient.group(2), ""))
    if not root or "afn" not in root.group(1):
        return None
    scaled = re.fullmatch(rf"select (?:<\d+ x i1>|i1) {re.escape(test)}, {v} ({_NAME}), {v} ({_NAME})",
                          defs.get(root.group(2), ""))
    if not scaled:
        return None
    times, x = scaled.groups()
    if not re.fullmatch(rf"fmul (?:[a-z]+ )*{v} (?:{re.escape(x)}, {re.escape(_const(ty, _UP))}"
                        rf"|{re.escape(_const(ty, _UP))}, {re.escape(x)})", defs.get(times, "")):
        return None
    if defs.get(test) != f"fcmp olt {ty} {x}, {_const(ty, _TINY)}":
        return None
    return x, test


def _lean(result: str, x: str, ty: str, tag: str) -> list[str]:
    """The lines computing `result` = rsqrt(x) from vrsqrt14 and one Newton-Raphson step."""
    lanes = int(ty[1:].split(" ")[0]) if ty.startswith("<") else 0
    fma = f"@llvm.fma.v{lanes}f32" if lanes else "@llvm.fma.f32"
    half = _const(ty, "5.000000e-01")
    c = f"<{lanes} x i1>" if lanes else "i1"
    if lanes:
        suffix, mask = _VECTOR[lanes]
        lines = [(f"  {tag}.e = call {ty} @llvm.x86.avx512.rsqrt14.ps.{suffix}({ty} {x}, "
                  f"{ty} zeroinitializer, {mask} -1)")]
    else:
        lines = [f"  {tag}.v = insertelement <4 x float> poison, float {x}, i64 0",
                 (f"  {tag}.w = call <4 x float> @llvm.x86.avx512.rsqrt14.ss(<4 x float> {tag}.v, "
                  f"<4 x float> {tag}.v, <4 x float> zeroinitializer, i8 -1)"),
                 f"  {tag}.e = extractelement <4 x float> {tag}.w, i64 0"]
    return lines + [
        f"  {tag}.h = fmul {ty} {tag}.e, {half}",
        f"  {tag}.p = fmul {ty} {x}, {tag}.e",
        f"  {tag}.n = fneg {ty} {tag}.p",
        f"  {tag}.r = call {ty} {fma}({ty} {tag}.n, {ty} {tag}.h, {ty} {half})",
        f"  {tag}.f = call {ty} {fma}({ty} {tag}.e, {ty} {tag}.r, {ty} {tag}.e)",
        f"  {tag}.u = fcmp uno {ty} {tag}.r, {_const(ty, '0.000000e+00')}",
        f"  {result} = select {c} {tag}.u, {ty} {tag}.e, {ty} {tag}.f",
    ]


def _declarations(used: set[str], text: str) -> list[str]:
    out = []
    for lanes in sorted(used):
        if lanes == "ss":
            sig = (("<4 x float> @llvm.x86.avx512.rsqrt14.ss(<4 x float>, <4 x float>, "
                    "<4 x float>, i8)"), "float @llvm.fma.f32(float, float, float)")
        else:
            n = int(lanes)
            ty = f"<{n} x float>"
            suffix, mask = _VECTOR[n]
            sig = (f"{ty} @llvm.x86.avx512.rsqrt14.ps.{suffix}({ty}, {ty}, {mask})",
                   f"{ty} @llvm.fma.v{n}f32({ty}, {ty}, {ty})")
        for s in sig:
            name = s.split("@", 1)[1].split("(", 1)[0]
            if not re.search(rf"^declare [^\n]*@{re.escape(name)}\(", text, re.MULTILINE) and \
                    f"declare {s}" not in out:
                out.append(f"declare {s}")
    return out


def lean_rsqrt_estimates(text: str, *, vector_lengths: bool) -> str | None:
    """The optimized module `text` with every refined rsqrt estimate (module doc) recomputed
    from vrsqrt14 and one Newton-Raphson step; None when there is none.  The module must be
    for a CPU with AVX-512F; `vector_lengths`: it has AVX-512VL too (4- and 8-wide forms)."""
    if _TINY not in text or "@llvm.sqrt." not in text:
        return None
    widths = {"<16 x float>"} | ({"<8 x float>", "<4 x float>"} if vector_lengths else set())
    lines = text.split("\n")
    out: list[str] = []
    used: set[str] = set()
    count = 0
    defs: dict[str, str] = {}
    for i, line in enumerate(lines):
        if line.startswith("define "):
            # (names are per function: collect this one's definitions first)
            defs = {}
            for body in lines[i + 1:]:
                if body.startswith("}"):
                    break
                m = _DEF.match(body)
                if m:
                    defs[m.group(1)] = m.group(2)
        m = _DEF.match(line)
        if m and m.group(2).startswith("select ") and _DOWN in defs.get(
                m.group(2).rsplit(", ", 2)[-2].split(" ")[-1], ""):
            ty = m.group(2).split(", ", 2)[1].rsplit(" ", 1)[0]
            if ty in widths or ty == "float":
                found = _match(defs, m.group(1), ty)
                if found:
                    count += 1
                    out += _lean(m.group(1), found[0], ty, f"%cpuify.rsqrt{count}")
                    used.add(ty[1:].split(" ")[0] if ty.startswith("<") else "ss")
                    continue
        out.append(line)
    if not count:
        return None
    return "\n".join(out) + "\n" + "\n".join(_declarations(used, text)) + "\n"
