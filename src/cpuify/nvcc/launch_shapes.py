"""Block shapes a program launches its kernels with, read from nvcc's host translation.

cpuify compiles every kernel once for any block shape (the generic block function) and,
for shapes known before the launch, once more for that shape: thread loops with constant
trip counts, shared-memory offsets and barrier intervals folded (the Python API does this
at run time from the second launch of a shape on; a whole program has no compiler at run
time, so its shapes must be found at build time).

nvcc's front end rewrites `k<<<grid, block, smem, stream>>>(args)` in the host translation
(`<file>.cudafe1.cpp`, macros expanded) into

    (__cudaPushCallConfiguration(grid, block, smem, stream)) ? (void)0 : k(args);

This module finds those call sites and evaluates `block` when it is a constant: an integer
expression, `dim3(...)`, or a variable declared once with a constant initializer and never
assigned again (`dim3 threads(16, 16);`, `const int bs = 256;`).  Anything else (a value
read from the command line, a loop variable) is skipped.  A guess can never make a
program wrong: the runtime picks a specialized block function only when the launch's
shape equals the one it was compiled for, and the generic one otherwise.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess

Shape = tuple[int, int, int]

_PUSH = "__cudaPushCallConfiguration("
_IDENT = re.compile(r"[A-Za-z_]\w*")
_INT_SUFFIX = re.compile(r"\b(\d+|0[xX][0-9a-fA-F]+)[uUlL]+\b")
_MAX_DEPTH = 8


def launch_sites(host_cpp: str) -> list[tuple[str, str]]:
    """(kernel name as written, block argument text) for every `<<<...>>>` in the host
    translation; the block argument is "1" when the launch gives only a grid."""
    sites = []
    pos = 0
    while True:
        i = host_cpp.find(_PUSH, pos)
        if i < 0:
            return sites
        args, end = _balanced_args(host_cpp, i + len(_PUSH))
        pos = max(end, i + len(_PUSH))
        if args is None or not args:
            continue
        tail = host_cpp[end:end + 400]
        m = re.match(r"\s*\)\s*\?\s*\(void\)\s*0\s*:\s*([\w:\s<>,*&]+?)\s*\(", tail)
        if not m:
            continue
        name = m.group(1).strip().removeprefix("::")
        block = args[1] if len(args) > 1 else "1"
        sites.append((name, block.strip()))


def _balanced_args(text: str, start: int) -> tuple[list[str] | None, int]:
    """The comma-separated arguments from `start` (just after an opening parenthesis) to
    the matching closing one, and the index after it."""
    depth = 0
    args: list[str] = []
    cur = start
    i = start
    n = len(text)
    while i < n:
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                args.append(text[cur:i])
                return args, i + 1
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[cur:i])
            cur = i + 1
        elif c == ";":
            return None, i
        i += 1
    return None, n


class _Evaluator:
    """Constant values of block-shape expressions, from declarations in the same file."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._declarations: dict[str, tuple[str, str] | None] = {}

    def shape(self, expr: str, depth: int = 0) -> Shape | None:
        expr = expr.strip()
        if depth > _MAX_DEPTH or not expr:
            return None
        m = re.fullmatch(r"(?:::)?dim3\s*[({](.*)[)}]", expr, re.DOTALL)
        if m:
            return self._dims(m.group(1), depth)
        if _IDENT.fullmatch(expr):
            init = self._declaration(expr)
            if init is None:
                return None
            kind, body = init
            if kind == "dim3":
                return self._dims(body, depth + 1)
            v = self.integer(body, depth + 1)
            return (v, 1, 1) if v is not None else None
        v = self.integer(expr, depth)
        return (v, 1, 1) if v is not None else None

    def _dims(self, body: str, depth: int) -> Shape | None:
        if not body.strip():
            return (1, 1, 1)
        parts, _ = _balanced_args(body + ")", 0)
        if not parts or len(parts) > 3:
            return None
        vals = [self.integer(p, depth + 1) for p in parts]
        if any(v is None for v in vals):
            return None
        dims = [int(v) for v in vals] + [1] * (3 - len(vals))    # type: ignore[arg-type]
        return (dims[0], dims[1], dims[2])

    def integer(self, expr: str, depth: int = 0) -> int | None:
        """The value of a constant integer expression, or None."""
        if depth > _MAX_DEPTH:
            return None
        expr = _INT_SUFFIX.sub(r"\1", expr.strip())
        expr = re.sub(r"\(\s*(?:unsigned\s+)?(?:int|long|size_t|unsigned)\s*\)", "", expr)
        try:
            tree = ast.parse(expr.replace("/", "//"), mode="eval")
        except SyntaxError:
            return None
        return self._eval(tree.body, depth)

    def _eval(self, node: ast.AST, depth: int) -> int | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = self._eval(node.operand, depth)
            return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
        if isinstance(node, ast.BinOp):
            a, b = self._eval(node.left, depth), self._eval(node.right, depth)
            if a is None or b is None:
                return None
            op = node.op
            if isinstance(op, ast.Add):
                return a + b
            if isinstance(op, ast.Sub):
                return a - b
            if isinstance(op, ast.Mult):
                return a * b
            if isinstance(op, ast.FloorDiv) and b:
                return int(a / b)           # C division truncates
            if isinstance(op, ast.LShift) and 0 <= b < 32:
                return a << b
            if isinstance(op, ast.RShift) and 0 <= b < 32:
                return a >> b
            return None
        if isinstance(node, ast.Name):
            init = self._declaration(node.id)
            if init is None or init[0] != "int":
                return None
            return self.integer(init[1], depth + 1)
        return None

    def _declaration(self, name: str) -> tuple[str, str] | None:
        """("dim3", arguments) or ("int", initializer) of the one declaration of `name`,
        when the variable is never assigned after it; None otherwise."""
        if name not in self._declarations:
            self._declarations[name] = self._find_declaration(name)
        return self._declarations[name]

    def _find_declaration(self, name: str) -> tuple[str, str] | None:
        n = re.escape(name)
        dim3 = list(re.finditer(rf"\bdim3\s+{n}\s*(?:=\s*dim3\s*)?[({{]([^;]*?)[)}}]\s*;", self.text))
        ints = list(re.finditer(
            rf"\b(?:static\s+)?(?:constexpr\s+|const\s+)*(?:unsigned\s+|signed\s+)?"
            rf"(?:int|long|short|size_t|unsigned|uint32_t|int32_t)\s+(?:const\s+)?{n}\s*=\s*([^;,]+);",
            self.text))
        decls = [("dim3", m) for m in dim3] + [("int", m) for m in ints]
        if len(decls) != 1:
            return None
        kind, m = decls[0]
        # any later assignment (x = ..., x.y = ..., x += ..., ++x) makes it a variable
        assigned = re.compile(rf"(?<![\w.]){n}\s*(?:\.\s*[xyz]\s*)?(?:[-+*/%&|^]|<<|>>)?=(?!=)"
                              rf"|(?:\+\+|--)\s*{n}\b|(?<![\w.]){n}\s*(?:\+\+|--)|&\s*{n}\b")
        for a in assigned.finditer(self.text):
            if not (m.start() <= a.start() < m.end()):
                return None
        return kind, m.group(1)


def launch_shapes(host_cpp: str) -> dict[str, set[Shape]]:
    """Kernel name as written at the launch (last `::` component, no template arguments)
    -> the constant block shapes it is launched with."""
    ev = _Evaluator(host_cpp)
    shapes: dict[str, set[Shape]] = {}
    for name, block in launch_sites(host_cpp):
        shape = ev.shape(block)
        if shape is None or min(shape) <= 0 or shape[0] * shape[1] * shape[2] > 1024:
            continue
        shapes.setdefault(base_name(name), set()).add(shape)
    return shapes


def base_name(name: str) -> str:
    """`ns::k<float, 4>` -> `k`."""
    depth = 0
    out = []
    for c in name:
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out).split("::")[-1].strip()


def entry_base_names(entries: list[str]) -> dict[str, str]:
    """PTX entry name -> its base name in the source (`_Z6kernelPfi` -> `kernel`;
    `extern "C"` names map to themselves), demangled with c++filt."""
    mangled = [e for e in entries if e.startswith("_Z")]
    out = {e: e for e in entries if not e.startswith("_Z")}
    if not mangled:
        return out
    tool = shutil.which("c++filt")
    demangled: list[str] = []
    if tool:
        try:
            proc = subprocess.run([tool], check=False, input="\n".join(mangled), capture_output=True,
                                  text=True, timeout=60)
            demangled = proc.stdout.splitlines()
        except (OSError, subprocess.SubprocessError):
            demangled = []
    if len(demangled) != len(mangled):
        return out
    for e, d in zip(mangled, demangled):
        head = _strip_signature(d)
        if head:
            out[e] = base_name(head)
    return out


def _strip_signature(demangled: str) -> str:
    """`void ns::k<float>(float*, int)` -> `ns::k<float>` (drops a template function's
    return type and the parameter list)."""
    depth = 0
    for i, c in enumerate(demangled):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            head = demangled[:i]
            break
    else:
        return ""
    # a template instance carries its return type first: "void k<int>"
    depth = 0
    for i in range(len(head) - 1, -1, -1):
        c = head[i]
        if c == ">":
            depth += 1
        elif c == "<":
            depth -= 1
        elif c == " " and depth == 0:
            return head[i + 1:]
    return head


def kernel_shapes(by_name: dict[str, set[Shape]] | dict[str, list[Shape]], entries: list[str], *,
                  per_kernel: int = 4) -> dict[str, list[Shape]]:
    """PTX entry -> the block shapes to specialize it for, from `launch_shapes` (at most
    `per_kernel`, the smallest shapes first for a stable choice)."""
    if not by_name:
        return {}
    out: dict[str, list[Shape]] = {}
    for entry, base in entry_base_names(entries).items():
        got = by_name.get(base)
        if got:
            out[entry] = sorted(set(got))[:per_kernel]
    return out
