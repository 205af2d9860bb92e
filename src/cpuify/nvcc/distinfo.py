"""What a program built with `cpuify nvcc --distributed` carries for distributed execution:
per kernel, its parameter layout and its access maps (cpuify.analysis.access_maps, as
text), computed at build time so that nothing needs the PTX or a compiler when the
program runs.  The records sit in the ELF section `.cpuify_dist` of the device objects
(not loaded; the linker concatenates them) and are read back from the executable by
cpuify.distributed.native.

A kernel whose maps cannot be built (the analysis refuses it, or is not installed) gets a
reason instead: its launches then run whole on rank 0."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:     # (a running program reads the records without loading the compiler)
    from cpuify.compiler import CompiledModule

DIST_SECTION = ".cpuify_dist"
_MAGIC = b"CPUIFY-DIST 1\n"

# PTX constructs whose kernels cannot run in parts on other ranks, whatever the maps say:
# texture/surface handles point into rank 0's memory, device-side launches and malloc
# create work or memory on the rank that runs the block
_RANK0_CONSTRUCTS = (
    (re.compile(r"^\s*(?:@!?%\w+\s+)?(?:tex|tld4|txq|suld|sust|sured|suq)\.", re.MULTILINE),
     "reads textures or surfaces"),
    (re.compile(r"\b(?:cudaLaunchDevice(?:V2)?|cudaGetParameterBuffer(?:V2)?)\b"),
     "launches kernels from device code"),
    (re.compile(r"call(?:\.uni)?\s*(?:\([^)]*\),\s*)?(?:malloc|free)\b"), "allocates device memory"),
)


@dataclass
class KernelDistInfo:
    name: str                                   # mangled device name
    params: list[tuple[str, str, int, int]]     # (PTX name, PTX type, offset, size)
    access: str | None = None                   # KernelAccess.to_text(), or None
    reason: str = ""                            # why there are no maps / it must run on rank 0
    extra: dict[str, Any] = field(default_factory=dict)


def rank0_reason(ptx: str) -> str:
    """Why the kernels of this module must run on rank 0 ("" if nothing forbids
    distributing them).  Whole-module: a device function any kernel may call counts."""
    for pattern, why in _RANK0_CONSTRUCTS:
        if pattern.search(ptx):
            return f"the module {why}"
    return ""


def _default_maps(compiled: CompiledModule, name: str) -> str:
    # (islpy: an optional dependency)
    from cpuify.analysis.access_maps import kernel_access
    return kernel_access(compiled, name).to_text()


def kernel_records(compiled: CompiledModule | None, refused: dict[str, str], *,
                   maps: Callable[[CompiledModule, str], str] | None = None) -> list[KernelDistInfo]:
    """The distribution records of the kernels of one device module."""
    out: list[KernelDistInfo] = []
    if compiled is None:
        return out
    forbid = rank0_reason(compiled.ptx)
    build = maps or _default_maps
    for name, info in compiled.kernels.items():
        rec = KernelDistInfo(name, [(p[0], p[1], p[2], p[3]) for p in info.params])
        if forbid:
            rec.reason = forbid
        else:
            try:
                rec.access = build(compiled, name)
            except ImportError as exc:
                rec.reason = f"no access maps (cpuify.analysis.access_maps unavailable: {exc})"
            except Exception as exc:  # noqa: BLE001 - any failure: the kernel runs on rank 0
                rec.reason = f"no access maps ({type(exc).__name__}: {exc})"
        out.append(rec)
    return out


def encode(records: list[KernelDistInfo], source: str) -> bytes:
    """One record of the section: magic, length, JSON."""
    body = json.dumps({"source": source, "kernels": [
        {"name": r.name, "params": r.params, "access": r.access, "reason": r.reason, **r.extra}
        for r in records]}, separators=(",", ":")).encode()
    return _MAGIC + f"{len(body)}\n".encode() + body


def decode(data: bytes) -> dict[str, KernelDistInfo]:
    """Kernel name -> its record, from the concatenated records of a section (the linker
    may pad between them with zeros).  A name met twice keeps its first record."""
    out: dict[str, KernelDistInfo] = {}
    pos = 0
    while True:
        pos = data.find(_MAGIC, pos)
        if pos < 0:
            return out
        pos += len(_MAGIC)
        nl = data.index(b"\n", pos)
        n = int(data[pos:nl])
        doc = json.loads(data[nl + 1:nl + 1 + n])
        pos = nl + 1 + n
        for k in doc["kernels"]:
            if k["name"] not in out:
                out[k["name"]] = KernelDistInfo(k["name"], [tuple(p) for p in k["params"]],  # type: ignore[misc]
                                                k.get("access"), k.get("reason", ""))
