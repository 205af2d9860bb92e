"""A slow, obviously-correct reference interpreter of cpuify's IR, used as an oracle for
the compiled path on small grids.

    from cpuify.interp import interpret_kernel
    interpret_kernel(ptx_text, "kernel", grid, block, (x, y, np.int32(n)), shared_mem=0)

Each CUDA thread runs separately (a generator over the lifted IR) with real barrier and
warp-collective semantics; see `cpuify.interp.machine` for the execution model,
`cpuify.interp.spec_eval` for the instructions it evaluates from the PTX instruction table
(cpuify.ir.ptx_table) and `cpuify.interp.ops` for the hand-written rest.  `InterpModule.use_ir(name, op)`
runs a kernel from other IR of it (e.g. its IR after any pass, printed and parsed back), and
`InterpModule.from_ir(text)` a module from IR text alone (`cpuify ir --mlir`'s file).  The interpreter is
the oracle of the compiled path and shares no code with it: it imports only `cpuify.ir`,
`cpuify.errors`, and the frontend and lifting it starts from."""

from cpuify.interp.machine import InterpModule, interpret_kernel, pack_params

__all__ = ["InterpModule", "interpret_kernel", "pack_params"]
