"""Block shapes a program launches its kernels with, read from nvcc's host translation.

cpuify compiles every kernel once for any block shape (the generic block function) and,
for shapes known before the launch, once more for that shape: thread loops with constant
trip counts, shared-memory offsets and barrier intervals folded (the Python API does this
at run time from the second launch of a shape on).  A whole program's shapes found at build
time are compiled into it; the others are compiled in the background while it runs
(nvcc/rtspec.py), which costs the program its first launches in the generic code.

nvcc's front end rewrites `k<<<grid, block, smem, stream>>>(args)` in the host translation
(`<file>.cudafe1.cpp`, macros expanded) into

    (__cudaPushCallConfiguration(grid, block, smem, stream)) ? (void)0 : k(args);

This module finds those call sites and evaluates `block` when it is a constant: an integer
expression, `dim3(...)`, or a variable with a constant initializer that is not assigned
after its declaration (`dim3 threads(16, 16);`, `const int bs = 256;`, also several to a
declaration: `dim3 grid(4), block(16, 16), one;`, `const int n = 4, bs = n * 32;`).  The
declaration read is the nearest one before the launch.  Anything else (a value read from
the command line, a loop variable) is skipped.  A guess can never make a program wrong: the
runtime picks a specialized block function only when the launch's shape equals the one it
was compiled for, and the generic one otherwise.

A launch that names a template instance (`smooth<1, 32, 0>`, as nvcc's front end writes it)
gives its shape to that instance only (instance_launches, kernel_shapes); one without
template arguments, or whose arguments match no instance's demangled name, to every kernel
of its base name.  `covered_entries` says which kernels have every launch of the translation
unit known: their generic block function is only a fallback (nvcc/device.py compiles it at
a cheaper LLVM level).
"""

from __future__ import annotations

import ast
import bisect
import functools
import re
import shutil
import subprocess
from dataclasses import dataclass, field

Shape = tuple[int, int, int]

_PUSH = "__cudaPushCallConfiguration("
_IDENT = re.compile(r"[A-Za-z_]\w*")
_INT_SUFFIX = re.compile(r"\b(\d+|0[xX][0-9a-fA-F]+)[uUlL]+\b")
_MAX_DEPTH = 8


def launch_sites(host_cpp: str) -> list[tuple[str, str]]:
    """(kernel name as written, block argument text) for every `<<<...>>>` in the host
    translation; the block argument is "1" when the launch gives only a grid."""
    return [(name, block) for name, block, _, _ in _launch_sites(host_cpp)]


def _launch_sites(host_cpp: str) -> list[tuple[str, str, int, tuple[int, int]]]:
    """launch_sites with the position of each launch in the text and the span of the
    kernel's name."""
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
        sites.append((name, block.strip(), i, (end + m.start(1), end + m.end(1))))


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


#: a declaration's type: dim3 or an integer type (after `static`/`const`/`constexpr`), as
#: nvcc's front end writes it in the host translation (`unsigned int` becomes `unsigned`)
_DECLARATION = re.compile(
    r"(?<![\w.:>])(?:(?:static|const|constexpr|volatile|register)\s+)*"
    r"(dim3|(?:(?:unsigned|signed|int|long|short|size_t|uint32_t|int32_t|uint64_t|int64_t)\b\s*)+)"
    r"\s*(?:const\s+)?(?=[A-Za-z_])")
_INTEGER_TYPE_WORDS = {"unsigned", "signed", "int", "long", "short", "size_t", "uint32_t",
                       "int32_t", "uint64_t", "int64_t"}
#: `((dim3)(x))`: how nvcc's front end writes `dim3(x)` with one argument
_DIM3_CAST = re.compile(r"\(\s*\(\s*(?:::)?dim3\s*\)\s*(\(.*\))\s*\)", re.DOTALL)
#: the longest declaration statement read (a longer one is no block-shape constant)
_MAX_STATEMENT = 2000

# one declarator: ("dim3" | "int", how it is initialized, its initializer text, its span);
# "args": `x(a, b)` / `x{a, b}`, "expr": `x = e`, "none": no initializer
Declarator = tuple[str, str, str, tuple[int, int]]


def declarations(text: str) -> dict[str, list[Declarator]]:
    """Every variable of type dim3 or an integer type declared in a declaration statement of
    `text`, one statement possibly declaring several (`dim3 grid(4), block(16, 16);`,
    `const int n = 4, bs = n * 32;`) -> its declarators, in text order.  Function parameters and other
    lists that end in `)` or `{` are not declaration statements."""
    out: dict[str, list[Declarator]] = {}
    for m in _DECLARATION.finditer(text):
        words = m.group(1).split()
        if words[0] != "dim3" and not set(words) <= _INTEGER_TYPE_WORDS:
            continue
        kind = "dim3" if words[0] == "dim3" else "int"
        got = _declarators(text, m.end())
        for name, how, init, span in got or ():
            out.setdefault(name, []).append((kind, how, init, span))
    for decls in out.values():
        decls.sort(key=lambda d: d[3][0])
    return out


def declarations_of(text: str, name: str) -> list[Declarator]:
    """declarations(text).get(name, []), found from the occurrences of `name` alone: a
    statement declaring it starts at most _MAX_STATEMENT characters before it (_declarators
    reads no further), so only the text up to twice that before each occurrence is
    scanned (a 2 MB host translation takes a tenth of a second to scan whole, and a
    build asks for the few names its launches' block arguments use)."""
    windows: list[list[int]] = []
    for m in re.finditer(re.escape(name) + r"(?!\w)", text):
        s = m.start()
        if s and (text[s - 1].isalnum() or text[s - 1] == "_"):
            continue            # the end of a longer identifier
        # (to just after the name: the type's match looks ahead at its first character)
        lo, hi = max(0, s - 2 * _MAX_STATEMENT), min(len(text), m.end() + 1)
        if windows and lo <= windows[-1][1]:
            windows[-1][1] = hi
        else:
            windows.append([lo, hi])
    found: dict[int, Declarator] = {}
    for lo, hi in windows:
        for m in _DECLARATION.finditer(text, lo, hi):
            words = m.group(1).split()
            if words[0] != "dim3" and not set(words) <= _INTEGER_TYPE_WORDS:
                continue
            kind = "dim3" if words[0] == "dim3" else "int"
            for got, how, init, span in _declarators(text, m.end()) or ():
                if got == name:
                    found.setdefault(span[0], (kind, how, init, span))
    return [found[k] for k in sorted(found)]


def _declarators(text: str, pos: int) -> list[tuple[str, str, str, tuple[int, int]]] | None:
    """The declarators of the statement from `pos` (just after its type) to its `;`, or
    None when it is no declaration statement."""
    found = []
    end = min(len(text), pos + _MAX_STATEMENT)
    while True:
        m = _IDENT.match(text, pos)
        if not m or m.end() >= end:
            return None
        name, start, pos = m.group(0), m.start(), m.end()
        while pos < end and text[pos].isspace():
            pos += 1
        c = text[pos] if pos < end else ""
        if c in "({":
            close = _group_end(text, pos, end)
            if close < 0:
                return None
            how, init, pos = "args", text[pos + 1:close - 1], close
        elif c == "=" and text[pos + 1:pos + 2] != "=":
            stop = _initializer_end(text, pos + 1, end)
            if stop < 0:
                return None
            how, init, pos = "expr", text[pos + 1:stop], stop
        elif c == "[":
            close = _group_end(text, pos, end)
            if close < 0:
                return None
            how, init, pos = "array", "", close
            stop = _initializer_end(text, pos, end)      # `= {...}` of an array
            if stop < 0:
                return None
            pos = stop
        else:
            how, init = "none", ""
        while pos < end and text[pos].isspace():
            pos += 1
        found.append((name, how, init.strip(), (start, pos)))
        if pos < end and text[pos] == ";":
            return found
        if pos >= end or text[pos] != ",":
            return None              # a function declaration or definition, a parameter list
        pos += 1
        while pos < end and text[pos].isspace():
            pos += 1


def _group_end(text: str, pos: int, end: int) -> int:
    """The index after the bracket closing the one at `pos`; -1 past `end` or at a `;`."""
    depth = 0
    for i in range(pos, end):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == ";":
            return -1
    return -1


def _initializer_end(text: str, pos: int, end: int) -> int:
    """The index of the `,` or `;` that ends the initializer from `pos`; -1 when an unmatched
    closing bracket comes first (a default argument in a parameter list)."""
    depth = 0
    for i in range(pos, end):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return -1
            depth -= 1
        elif c == ";":
            return i if depth == 0 else -1
        elif c == "," and depth == 0:
            return i
    return -1


class _Evaluator:
    """Constant values of block-shape expressions, from declarations in the same file."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._all: dict[str, list[Declarator]] = {}       # name -> its declarations
        self._checked: dict[tuple[str, int], tuple[str, str, str, int] | None] = {}

    def shape(self, expr: str, depth: int = 0, at: int | None = None) -> Shape | None:
        """The block shape `expr` (read at position `at` of the text; the end when None)
        stands for, or None when it is no constant."""
        expr = expr.strip()
        if depth > _MAX_DEPTH or not expr:
            return None
        m = re.fullmatch(r"(?:::)?dim3\s*[({](.*)[)}]", expr, re.DOTALL) or \
            re.fullmatch(r"\{(.*)\}", expr, re.DOTALL)
        if m:
            return self._dims(m.group(1), depth, at)
        m = _DIM3_CAST.fullmatch(expr)
        if m:
            return self.shape(m.group(1)[1:-1], depth + 1, at)
        if _IDENT.fullmatch(expr):
            init = self._declaration(expr, at)
            if init is None:
                return None
            kind, how, body, where = init
            if kind == "dim3":
                if how == "none":
                    return (1, 1, 1)         # dim3's default constructor
                if how == "args":
                    return self._dims(body, depth + 1, where)
                return self.shape(body, depth + 1, where)
            v = self.integer(body, depth + 1, where) if how in ("args", "expr") else None
            return (v, 1, 1) if v is not None else None
        v = self.integer(expr, depth, at)
        return (v, 1, 1) if v is not None else None

    def _dims(self, body: str, depth: int, at: int | None) -> Shape | None:
        if not body.strip():
            return (1, 1, 1)
        parts, _ = _balanced_args(body + ")", 0)
        if not parts or len(parts) > 3:
            return None
        if len(parts) == 1:              # dim3(x): x may be another dim3 (a copy)
            return self.shape(parts[0], depth + 1, at)
        vals = [self.integer(p, depth + 1, at) for p in parts]
        if any(v is None for v in vals):
            return None
        dims = [int(v) for v in vals] + [1] * (3 - len(vals))    # type: ignore[arg-type]
        return (dims[0], dims[1], dims[2])

    def integer(self, expr: str, depth: int = 0, at: int | None = None) -> int | None:
        """The value of a constant integer expression (read at position `at`), or None."""
        if depth > _MAX_DEPTH:
            return None
        expr = _INT_SUFFIX.sub(r"\1", expr.strip())
        expr = re.sub(r"\(\s*(?:unsigned\s+)?(?:int|long|size_t|unsigned)\s*\)", "", expr)
        try:
            tree = ast.parse(expr.replace("/", "//"), mode="eval")
        except SyntaxError:
            return None
        return self._eval(tree.body, depth, at)

    def _eval(self, node: ast.AST, depth: int, at: int | None) -> int | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = self._eval(node.operand, depth, at)
            return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
        if isinstance(node, ast.BinOp):
            a, b = self._eval(node.left, depth, at), self._eval(node.right, depth, at)
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
            init = self._declaration(node.id, at)
            if init is None or init[0] != "int" or init[1] not in ("args", "expr"):
                return None
            return self.integer(init[2], depth + 1, init[3])
        return None

    def _declaration(self, name: str, at: int | None) -> tuple[str, str, str, int] | None:
        """(kind, how initialized, initializer, position) of the declaration of `name`
        nearest before position `at` (`declarations`; else the file's only one), when the
        variable is not assigned after it (up to the next declaration of the name); None
        otherwise.  Scopes are not followed: the declaration may be another function's (a
        wrong guess costs a compile, never a wrong result: the runtime runs specialized code
        only for its exact shape)."""
        decls = self._all.get(name)
        if decls is None:
            decls = self._all[name] = declarations_of(self.text, name)     # (in text order)
        limit = len(self.text) if at is None else at
        index = bisect.bisect_left([d[3][0] for d in decls], limit) - 1
        if index < 0:
            if len(decls) != 1:
                return None
            # declared only after the launch: in the function that calls the one launching
            # (a parameter passed on), the file's only declaration of the name
            index = 0
        key = (name, index)
        if key not in self._checked:
            self._checked[key] = self._unassigned(name, decls, index)
        return self._checked[key]

    def _unassigned(self, name: str, decls: list[Declarator], index: int
                    ) -> tuple[str, str, str, int] | None:
        """decls[index] as _declaration gives it, or None when it is an array or the name is
        assigned (x = ..., x.y = ..., x += ..., ++x) or its address taken after it, up to
        the next declaration of the name (another variable, as far as we can tell)."""
        kind, how, init, (start, end) = decls[index]
        if how == "array":
            return None
        until = decls[index + 1][3][0] if index + 1 < len(decls) else len(self.text)
        n = re.escape(name)
        assigned = re.compile(rf"(?<![\w.]){n}\s*(?:\.\s*[xyz]\s*)?(?:[-+*/%&|^]|<<|>>)?=(?!=)"
                              rf"|(?:\+\+|--)\s*{n}\b|(?<![\w.]){n}\s*(?:\+\+|--)|&\s*{n}\b")
        if any(not (start <= a.start() < end) for a in assigned.finditer(self.text, start, until)):
            return None
        return kind, how, init, start


def launch_shapes(host_cpp: str) -> dict[str, set[Shape]]:
    """Kernel name as written at the launch (last `::` component, no template arguments)
    -> the constant block shapes it is launched with."""
    ev = _Evaluator(host_cpp)
    shapes: dict[str, set[Shape]] = {}
    for name, block, at, _ in _launch_sites(host_cpp):
        shape = ev.shape(block, at=at)
        if shape is None or min(shape) <= 0 or shape[0] * shape[1] * shape[2] > 1024:
            continue
        shapes.setdefault(base_name(name), set()).add(shape)
    return shapes


_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])+\'')


@dataclass
class Launches:
    """What the host translation says about its kernels' launches."""
    #: kernel as written at the launch (instance_name: no namespace, no spaces; the base
    #: name when it gives no template arguments) -> its constant block shapes
    shapes: dict[str, set[Shape]] = field(default_factory=dict)
    #: base names launched somewhere with a block shape not known at build time
    unknown: set[str] = field(default_factory=set)
    #: base names the host code names other than at a launch or a declaration of a `void`
    #: function (an address taken for cudaLaunchKernel, a function pointer, a name in a
    #: header or a string): such a kernel may be launched in ways not seen here
    referenced: set[str] = field(default_factory=set)


def instance_name(name: str) -> str:
    """`ns::k< float, 4>` -> `k<float,4>`: the last `::` component outside template
    arguments, without spaces (how launches and demangled PTX names are compared)."""
    depth, cut = 0, 0
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == ":" and depth == 0:
            cut = i + 1
    return "".join(name[cut:].split())


def instance_launches(host_cpp: str) -> Launches:
    """The launches of the host translation by kernel instance, with the kernels whose
    launches are not all known (Launches)."""
    ev = _Evaluator(host_cpp)
    out = Launches()
    spans: list[tuple[int, int]] = []
    for name, block, at, span in _launch_sites(host_cpp):
        base = base_name(name)
        spans.append(span)
        shape = ev.shape(block, at=at)
        if shape is None or min(shape) <= 0 or shape[0] * shape[1] * shape[2] > 1024:
            out.unknown.add(base)
            continue
        out.shapes.setdefault(instance_name(name), set()).add(shape)
    bases = {base_name(n) for n in out.shapes} | out.unknown
    if bases:
        names = "|".join(sorted(map(re.escape, bases), key=len, reverse=True))
        # (string literals blanked: a kernel's name in a message names nothing; nvcc's
        # front end may put a line marker between a declaration's type and its name)
        text = _STRING.sub(lambda m: '"' + " " * (len(m.group(0)) - 2) + '"', host_cpp)
        # (each pattern starts with its literal words, which re finds fast; what a leading
        # \b or lookbehind would check comes after: 20x faster on a 2 MB translation)
        declared = re.compile(r"void(?<!\wvoid)\s+(?:#[^\n]*\n\s*)*(?:[\w:]+::)?(" + names +
                              r")\s*(?:<[^;{}()]*>\s*)?\(")
        at_declaration = {m.start(1) for m in declared.finditer(text)}
        starts = [a for a, _ in spans]
        for m in re.finditer(r"(" + names + r")(?![\w$])", text):
            if m.start() and (text[m.start() - 1].isalnum() or text[m.start() - 1] in "_$"):
                continue        # the end of a longer name (which holds no other name's start)
            k = bisect.bisect_right(starts, m.start()) - 1
            if k >= 0 and m.start() < spans[k][1] or m.start() in at_declaration:
                continue
            out.referenced.add(m.group(1))
    return out


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
    for e, d in zip(mangled, _demangle(mangled)):
        head = _strip_signature(d)
        if head:
            out[e] = base_name(head)
    return out


def _demangle(mangled: list[str]) -> list[str]:
    """c++filt's names for `mangled`, in order ([] when it is missing or fails)."""
    if not mangled:
        return []
    return list(_demangle_cached(tuple(mangled)))


@functools.lru_cache(maxsize=8)
def _demangle_cached(mangled: tuple[str, ...]) -> tuple[str, ...]:
    tool = shutil.which("c++filt")
    demangled: list[str] = []
    if tool:
        try:
            proc = subprocess.run([tool], check=False, input="\n".join(mangled), capture_output=True,
                                  text=True, timeout=60)
            demangled = proc.stdout.splitlines()
        except (OSError, subprocess.SubprocessError):
            demangled = []
    return tuple(demangled) if len(demangled) == len(mangled) else ()


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


#: The most block shapes one kernel is specialized for (kernel_shapes).
SHAPES_PER_KERNEL = 4


def kernel_shapes(by_name: dict[str, set[Shape]] | dict[str, list[Shape]], entries: list[str], *,
                  per_kernel: int = SHAPES_PER_KERNEL) -> dict[str, list[Shape]]:
    """PTX entry -> the block shapes to specialize it for (at most `per_kernel`, the
    smallest shapes first for a stable choice), from `launch_shapes` (by base name) or
    `instance_launches(...).shapes` (a key with template arguments gives its shapes to the
    entry of that instance, or, when no entry's demangled name matches it, to every entry of
    its base name)."""
    if not by_name:
        return {}
    wanted = _shapes_by_entry(by_name, entries)
    return {entry: sorted(got)[:per_kernel] for entry, got in wanted.items() if got}


def _shapes_by_entry(by_name: dict[str, set[Shape]] | dict[str, list[Shape]],
                     entries: list[str]) -> dict[str, set[Shape]]:
    bases = entry_base_names(entries)
    instances = {e: instance_name(h) for e, h in entry_instance_names(entries).items()}
    by_instance: dict[str, list[str]] = {}
    for entry, inst in instances.items():
        by_instance.setdefault(inst, []).append(entry)
    out: dict[str, set[Shape]] = {}
    for key, dims in by_name.items():
        targets = by_instance.get(key, []) if "<" in key else []
        if not targets:
            base = base_name(key)
            targets = [e for e, b in bases.items() if b == base]
        for entry in targets:
            out.setdefault(entry, set()).update(dims)
    return out


def entry_instance_names(entries: list[str]) -> dict[str, str]:
    """PTX entry -> its name with template arguments (`_Z6smoothILi1EEvPKf` ->
    `smooth<1>`), demangled with c++filt; entries it cannot demangle are left out."""
    mangled = [e for e in entries if e.startswith("_Z")]
    out = {e: e for e in entries if not e.startswith("_Z")}
    for e, d in zip(mangled, _demangle(mangled)):
        head = _strip_signature(d)
        if head:
            out[e] = head
    return out


def covered_entries(launches: Launches, entries: list[str],
                    chosen: dict[str, list[Shape]]) -> set[str]:
    """The PTX entries every launch of which the translation unit shows with a constant
    block shape among those `chosen` for it (kernel_shapes): their generic block function
    runs only when a specialization failed to build or a launch this file cannot show (one
    from another file) uses another shape.  A kernel named anywhere else in the host code
    (an address taken, cudaLaunchKernel) is not covered."""
    wanted = _shapes_by_entry(launches.shapes, entries)
    bases = entry_base_names(entries)
    out = set()
    for entry, dims in wanted.items():
        base = bases.get(entry, entry)
        if base in launches.unknown or base in launches.referenced:
            continue
        if dims and dims <= set(chosen.get(entry, ())):
            out.add(entry)
    return out
