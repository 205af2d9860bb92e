"""Unit tests of `cpuify nvcc`'s pieces that need no nvcc: option parsing, PTX linking for
-rdc, the device-code records of -dc objects, the runtime stubs, and scoped call-site
`.param` names in the PTX parser."""

from __future__ import annotations

import struct

import pytest

from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.nvcc import device
from cpuify.nvcc.driver import UsageError, parse_args, ptx_arch
from cpuify.nvcc.rtlib import per_thread_aliases, stub_source


def test_parse_nvcc_command_line() -> None:
    o = parse_args(["-O3", "-std=c++17", "-Iinc", "-D", "N=4", "-gencode", "arch=compute_80,code=sm_80",
                    "-arch=sm_75", "-Xcompiler", "-fopenmp,-Wall", "-Xlinker", "-rpath=/x", "-lcudart",
                    "-lm", "-L/lib", "-rdc=true", "-c", "a.cu", "b.cpp", "c.o", "-o", "out.o"])
    assert o.inputs == [("a.cu", "cu"), ("b.cpp", "host"), ("c.o", "obj")]
    assert o.output == "out.o" and o.rdc and "-c" in o.flags
    assert ptx_arch(o) == 80
    assert "-Iinc" in o.host_opts and "-DN=4" in o.host_opts and "-std=c++17" in o.host_opts
    assert "-lcudart" not in o.link_opts and "-lm" in o.link_opts and "-L/lib" in o.link_opts
    assert "-Wl,-rpath=/x" in o.link_opts and "-fopenmp" in o.link_opts
    o = parse_args(["-x", "cu", "k.cpp", "-arch=sm_60", "--bogus", "-G"])
    assert o.inputs == [("k.cpp", "cu")] and ptx_arch(o) == 75
    assert any("--bogus" in w for w in o.warnings) and any("-G" in w for w in o.warnings)
    with pytest.raises(UsageError):
        parse_args(["data.bin"])
    # -dlink next to -c or -dc: nvcc compiles relocatable device code and links none
    for args in (["-rdc=true", "-dlink", "-c"], ["-c", "-dlink"], ["-dlink", "-dc"]):
        o = parse_args([*args, "lib.cu"])
        assert o.rdc and "-c" in o.flags and "-dlink" not in o.flags, args
    o = parse_args(["-dlink", "a.o", "lib.cu"])
    assert "-dlink" in o.flags and "-c" not in o.flags


PTX_A = """
.version 8.0
.target sm_75
.address_size 64
.extern .func (.param .b32 func_retval0) twice(.param .b32 twice_param_0);
.extern .global .align 4 .u32 shared_counter;
.global .align 1 .b8 $str[3] = {104, 105, 0};
.weak .func (.param .b32 func_retval0) tmpl(.param .b32 tmpl_param_0)
{
    .reg .b32 %r<2>;
    ld.param.u32 %r1, [tmpl_param_0];
    st.param.b32 [func_retval0+0], %r1;
    ret;
}
.visible .entry k(.param .u64 k_param_0)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [k_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    ld.global.u32 %r1, [shared_counter];
    {
    .param .b32 param0;
    st.param.b32 [param0+0], %r1;
    .param .b32 retval0;
    call.uni (retval0), twice, (param0);
    ld.param.b32 %r2, [retval0+0];
    }
    st.global.u32 [%rd2], %r2;
    ret;
}
"""

PTX_B = """
.version 8.1
.target sm_75
.address_size 64
.visible .global .align 4 .u32 shared_counter = 21;
.global .align 1 .b8 $str[3] = {104, 111, 0};
.weak .func (.param .b32 func_retval0) tmpl(.param .b32 tmpl_param_0)
{
    .reg .b32 %r<2>;
    ld.param.u32 %r1, [tmpl_param_0];
    st.param.b32 [func_retval0+0], %r1;
    ret;
}
.visible .func (.param .b32 func_retval0) twice(.param .b32 twice_param_0)
{
    .reg .b32 %r<3>;
    ld.param.u32 %r1, [twice_param_0];
    add.s32 %r2, %r1, %r1;
    st.param.b32 [func_retval0+0], %r2;
    ret;
}
"""


def test_link_ptx_resolves_externs_weak_and_local_names() -> None:
    text = device.link_ptx([device.RdcModule("_a", "a.cu", PTX_A), device.RdcModule("_b", "b.cu", PTX_B)])
    assert text.startswith(".version 8.1")                      # the newest version
    assert ".extern .global" not in text and ".extern .func" not in text
    assert text.count(".func (.param .b32 func_retval0) tmpl(") == 1
    assert "$str_cpuify_m1[3]" in text and text.count("$str[3]") == 1
    m = parse_ptx(text)
    assert [e.name for e in m.entries] == ["k"] and m.functions["twice"].body
    from cpuify.compiler import compile_ptx
    import numpy as np
    from cpuify.api.module import RawModule
    mod = RawModule(ptx=text)
    out = np.zeros(1, np.uint32)
    mod.get_function("k")((1,), (1,), (out,))
    assert out[0] == 42                                         # twice(shared_counter = 21)
    assert compile_ptx(text).kernels


def test_link_ptx_rejects_two_definitions() -> None:
    dup = PTX_B.replace("shared_counter = 21", "other = 1")
    with pytest.raises(Exception, match="twice"):
        device.link_ptx([device.RdcModule("_b", "b.cu", PTX_B), device.RdcModule("_c", "c.cu", dup)])


def test_rdc_records_round_trip() -> None:
    blob = device.rdc_record("_id1", "x.cu", "ptx one") + device.rdc_record("_id2", "y.cu", "ptx\ntwo")
    mods = device.parse_rdc_records(blob)
    assert [(m.module_id, m.source, m.ptx) for m in mods] == [("_id1", "x.cu", "ptx one"),
                                                              ("_id2", "y.cu", "ptx\ntwo")]


def test_fatbin_hash_matches_embedded_bytes() -> None:
    body = bytes(range(40))
    data = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body + b"\xff" * 8  # padding ignored
    quads = ",".join(f"0x{struct.unpack_from('<Q', data, i)[0]:016x}" for i in range(0, len(data), 8))
    fatbin_c = f'asm(\n".section .nv_fatbin, \\"a\\"\\n"\n"fatbinData:\\n"\n".quad {quads}\\n"\n);'
    assert device.fatbin_bytes(fatbin_c) == data
    h = 1469598103934665603
    for b in data[:16 + len(body)]:
        h = ((h ^ b) * 1099511628211) % 2**64
    assert device.fatbin_hash(data) == h


def test_stubs_cover_unimplemented_functions_only() -> None:
    header = ("extern __host__ cudaError_t CUDARTAPI cudaGraphCreate(cudaGraph_t *g, unsigned f);\n"
              "extern __host__ __cudart_builtin__ cudaError_t CUDARTAPI cudaMalloc(void **p, size_t n);\n"
              "extern __CUDA_DEPRECATED __host__ cudaError_t CUDARTAPI cudaOldThing(int x);\n"
              "extern __host__ struct cudaChannelFormatDesc CUDARTAPI cudaCreateChannelDesc(int x, int y, "
              "int z, int w, enum cudaChannelFormatKind f);\n"
              "    #define cudaMalloc __CUDART_API_PTDS(cudaMalloc)\n"
              "    #define cudaGraphCreate __CUDART_API_PTSZ(cudaGraphCreate)\n")
    src = stub_source(header, {"cudaMalloc"})
    # each stub names itself (once: the `said` flag) and returns cudaErrorNotSupported
    assert ('int cudaGraphCreate_cpuify(void) { static int said; int e = '
            'cpuify_cudart_not_supported_once("cudaGraphCreate", &said); return e; }') in src
    assert '__asm__("cudaGraphCreate")' in src
    assert '__asm__("cudaOldThing")' in src               # deprecated functions too
    assert '__asm__("cudaGraphCreate_ptsz")' in src       # per-thread default stream name
    # other return types: a typed stub returning zeros
    assert ("struct cudaChannelFormatDesc cudaCreateChannelDesc_cpuify(int x, int y, int z, int w, "
            "enum cudaChannelFormatKind f)") in src
    assert "cudaMalloc" not in src
    assert stub_source(header, {"cudaMalloc", "cudaCreateChannelDesc"}).count("cudaCreateChannelDesc") == 0
    # the implemented function's per-thread name calls it with stream 0 as the thread's own
    assert ("cudaError_t cudaMalloc_ptds(void **p, size_t n) { int old = "
            "cpuify_cudart_default_stream_per_thread(1); cudaError_t r = cudaMalloc(p, n); "
            "cpuify_cudart_default_stream_per_thread(old); return r; }") in per_thread_aliases(header, {"cudaMalloc"})


def test_per_thread_stream_functions_give_stream_0_as_the_threads_own() -> None:
    # --default-stream per-thread: a `_ptsz` function's stream 0 is cudaStreamPerThread; one
    # whose stream parameter cannot be found stays an alias
    header = ("extern __host__ cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, "
              "size_t count, cudaStream_t stream __dv(0));\n"
              "extern __host__ cudaError_t CUDARTAPI cudaGraphUpload(cudaGraphExec_t g);\n"
              "    #define cudaMemsetAsync __CUDART_API_PTSZ(cudaMemsetAsync)\n"
              "    #define cudaGraphUpload __CUDART_API_PTSZ(cudaGraphUpload)\n")
    text = per_thread_aliases(header, {"cudaMemsetAsync", "cudaGraphUpload"})
    assert ("cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream) "
            "{ if (stream == 0) stream = cudaStreamPerThread; return cudaMemsetAsync(devPtr, value, count, "
            "stream); }") in text
    assert 'cudaGraphUpload_ptsz __attribute__((alias("cudaGraphUpload")))' in text


def test_scoped_call_params_get_their_own_names() -> None:
    # nvcc reuses `param0` in every call scope; the types differ (f32 here, b64 there)
    ptx = """
.version 8.0
.target sm_75
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);
.func (.param .b32 func_retval0) f(.param .b32 f_param_0)
{
    .reg .f32 %f<2>;
    ld.param.f32 %f1, [f_param_0];
    st.param.f32 [func_retval0+0], %f1;
    ret;
}
.visible .entry k()
{
    .reg .f32 %f<3>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    mov.f32 %f1, 0f3F800000;
    {
    .param .b32 param0;
    st.param.f32 [param0+0], %f1;
    .param .b32 retval0;
    call.uni (retval0), f, (param0);
    ld.param.f32 %f2, [retval0+0];
    }
    mov.u64 %rd1, 0;
    {
    .param .b64 param0;
    st.param.b64 [param0+0], %rd1;
    .param .b64 param1;
    st.param.b64 [param1+0], %rd1;
    .param .b32 retval0;
    call.uni (retval0), vprintf, (param0, param1);
    ld.param.b32 %r1, [retval0+0];
    }
    ret;
}
"""
    k = parse_ptx(ptx).functions["k"]
    params = [(v.name, v.type) for v in k.locals if v.space == "param"]
    names = [n for n, _ in params]
    assert len(set(names)) == len(names) == 5
    assert ("param0", "b32") in params and any(n.startswith("param0$") and t == "b64" for n, t in params)


# ------------------------------------------------------------------------------------
# block shapes of launches, read from nvcc's host translation

HOST_CPP = """
extern "C" unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim = 1, size_t sharedMem = 0, CUstream_st * stream = 0);
static void run(int t) {
  (__cudaPushCallConfiguration(4, t)) ? (void)0 : dyn(p);
}
int main(int argc, char **argv) {
  dim3 threads(16, 16); dim3 grid(4); const int bs = 8 * 32; int later = 64;
  dim3 flat = dim3(bs / 2);
  (__cudaPushCallConfiguration(grid, threads)) ? (void)0 : tile(d, 1024);
  (__cudaPushCallConfiguration(4, 256u, 0, 0)) ? (void)0 : ::ns::k2<float, 4> (d, 1024);
  (__cudaPushCallConfiguration(8, bs)) ? (void)0 : scale(d, f(1, 2));
  (__cudaPushCallConfiguration(8, flat)) ? (void)0 : scale(d, 3);
  (__cudaPushCallConfiguration(8, dim3(32, 4, 2))) ? (void)0 : cube(d);
  (__cudaPushCallConfiguration(8)) ? (void)0 : one(d);
  later = atoi(argv[1]);
  (__cudaPushCallConfiguration(8, later)) ? (void)0 : var(d);
  (__cudaPushCallConfiguration(8, 2048)) ? (void)0 : huge(d);
  (__cudaPushCallConfiguration(8, threads.x * 2)) ? (void)0 : member(d);
}
"""


def test_launch_shapes_from_host_translation() -> None:
    from cpuify.nvcc.launch_shapes import launch_shapes, launch_sites
    assert ("k2", "256u") not in launch_sites(HOST_CPP)
    assert ("ns::k2<float, 4>", "256u") in launch_sites(HOST_CPP)
    got = launch_shapes(HOST_CPP)
    assert got == {
        "tile": {(16, 16, 1)},
        "k2": {(256, 1, 1)},
        "scale": {(256, 1, 1), (128, 1, 1)},
        "cube": {(32, 4, 2)},
        "one": {(1, 1, 1)},
        # not constants: a parameter, a variable assigned later, a member access; and a
        # block of more than 1024 threads (the launch fails anyway)
    }


# as nvcc 13's front end writes declarations with several declarators (`dim3(64)` becomes
# `((dim3)(64))`, `unsigned int` `unsigned`, `v(96)` `v = (96)`)
HOST_CPP_DECLARATORS = """
static void helper(int n, dim3 block = dim3(2)) { int e = n; }
int main() {
dim3 grid(1, 1), block(16, 16);
dim3 a(2), b = ((dim3)(64)), c, e{8, 4};
const int n = 4, bs = (n * 32);
static const unsigned u = 64U, v = (96), w;
dim3 g = {4, 4}, h(8), copy(block);
int arr[4] = {1, 2, 3, 4}, later = 5;
(__cudaPushCallConfiguration(grid, block)) ? (void)0 : tile(d);
(__cudaPushCallConfiguration(a, b)) ? (void)0 : flat(d);
(__cudaPushCallConfiguration(c, e)) ? (void)0 : flat(d);
(__cudaPushCallConfiguration(c, c)) ? (void)0 : unit(d);
(__cudaPushCallConfiguration(1, bs)) ? (void)0 : third(d);
(__cudaPushCallConfiguration(((dim3)(1)), u)) ? (void)0 : ints(d);
(__cudaPushCallConfiguration(1, v)) ? (void)0 : ints(d);
(__cudaPushCallConfiguration(1, g)) ? (void)0 : more(d);
(__cudaPushCallConfiguration(1, h)) ? (void)0 : more(d);
(__cudaPushCallConfiguration(1, copy)) ? (void)0 : more(d);
(__cudaPushCallConfiguration(1, w)) ? (void)0 : unknown(d);
(__cudaPushCallConfiguration(1, later)) ? (void)0 : unknown(d);
later = 7;
}
"""


def test_launch_shapes_declared_together() -> None:
    from cpuify.nvcc.launch_shapes import declarations, launch_shapes
    got = launch_shapes(HOST_CPP_DECLARATORS)
    assert got == {
        "tile": {(16, 16, 1)},
        "flat": {(64, 1, 1), (8, 4, 1)},
        "unit": {(1, 1, 1)},                 # dim3's default constructor
        "third": {(128, 1, 1)},
        "ints": {(64, 1, 1), (96, 1, 1)},
        "more": {(4, 4, 1), (8, 1, 1), (16, 16, 1)},
        # `w` has no initializer; `later` is assigned after the launch
    }
    decls = declarations(HOST_CPP_DECLARATORS)
    # a parameter list is no declaration statement; the local in the helper is
    assert [d[:3] for d in decls["e"]] == [("int", "expr", "n"), ("dim3", "args", "8, 4")]
    assert [d[:3] for d in decls["arr"]] == [("int", "array", "")]


def test_declarations_of_one_name_match_the_whole_scan() -> None:
    """declarations_of (what a build asks for: the few names its block arguments use) reads
    only the text before each occurrence of the name, and finds what declarations finds for
    it: in the test texts, and where an occurrence lies far after the declaration or the
    name ends a longer identifier."""
    from cpuify.nvcc.launch_shapes import declarations, declarations_of
    far = ("void f() {\n  const unsigned int n = 4, bs = n * 32;\n" + "  x += 1;\n" * 600 +
           "  dim3 grid(2),\n     block(bs, 2);\n  g(n, xbs, bs_, block);\n}\n"
           "void h(int bs) { static const int bs = 3; int a[4] = {1, 2}, n; }\n")
    for text in (HOST_CPP_DECLARATORS, HOST_CPP_INSTANCES, far):
        every = declarations(text)
        assert every, text[:40]
        for name in set(every) | {"xbs", "nowhere"}:
            assert declarations_of(text, name) == every.get(name, []), name
    assert [d[:3] for d in declarations_of(far, "bs")] == [
        ("int", "expr", "n * 32"), ("int", "expr", "3")]


def test_launch_shapes_nearest_declaration_before_the_launch() -> None:
    """A name declared in several functions: the declaration nearest before the launch
    counts, unless the variable is assigned after it."""
    from cpuify.nvcc.launch_shapes import launch_shapes
    text = """
void a() { const int threads = 64; (__cudaPushCallConfiguration(1, threads)) ? (void)0 : ka(d); }
void b() { int threads = 128; (__cudaPushCallConfiguration(1, threads)) ? (void)0 : kb(d); threads = 3; }
void c() { int threads = 256; (__cudaPushCallConfiguration(1, threads)) ? (void)0 : kc(d); }
"""
    assert launch_shapes(text) == {"ka": {(64, 1, 1)}, "kc": {(256, 1, 1)}}


def test_launch_shapes_map_to_ptx_entries() -> None:
    from cpuify.nvcc.launch_shapes import kernel_shapes
    entries = ["_Z4tilePfi", "_ZN2ns2k2IfLi4EEEvPfi", "plain", "_Z5otherv"]
    got = kernel_shapes({"tile": {(16, 16, 1)}, "k2": {(256, 1, 1), (64, 1, 1)},
                         "plain": [(32, 1, 1)]}, entries)
    assert got == {"_Z4tilePfi": [(16, 16, 1)], "_ZN2ns2k2IfLi4EEEvPfi": [(64, 1, 1), (256, 1, 1)],
                   "plain": [(32, 1, 1)]}


def test_rdc_record_carries_launch_shapes() -> None:
    rec = device.rdc_record("mod1", "a.cu", ".entry k {}", {"k": [(16, 16, 1), (256, 1, 1)]})
    old = b"CPUIFY-RDC 1\nmod0\nb.cu\n3\nabc"
    mods = device.parse_rdc_records(b"junk" + rec + b"pad" + old)
    assert [(m.module_id, m.source, m.ptx, m.shapes) for m in mods] == [
        ("mod1", "a.cu", ".entry k {}", {"k": [(16, 16, 1), (256, 1, 1)]}),
        ("mod0", "b.cu", "abc", {})]


# as nvcc 13's front end writes a translation unit's kernels and launches (line markers
# between a declaration's type and its name, template arguments spaced)
HOST_CPP_INSTANCES = """
template< int R, int B> static void
# 5
smooth(const float *x, float *y, int n) {__wrapper__device_stub_smooth<R,B>(x,y,n);}
void
# 9
flat(float *d) {__wrapper__device_stub_flat(d);}
void taken(float *d);
void viaptr(float *d);
void wide(float *d);
void kept(float *d);
int main(int argc, char **argv) {
int later = atoi(argv[1]);
(__cudaPushCallConfiguration(4, 32)) ? (void)0 : smooth< 1, 32> (dx, dy, n);
(__cudaPushCallConfiguration(4, 64)) ? (void)0 : smooth< 2, 64> (dx, dy, n);
(__cudaPushCallConfiguration(4, 128)) ? (void)0 : flat(dx);
printf("flat and kept done\\n");
(__cudaPushCallConfiguration(4, later)) ? (void)0 : taken(dx);
(__cudaPushCallConfiguration(4, 256)) ? (void)0 : viaptr(dx);
cudaLaunchKernel((const void *)viaptr, 4, 256, args, 0, 0);
(__cudaPushCallConfiguration(1, 1)) ? (void)0 : wide(dx);
(__cudaPushCallConfiguration(1, 2)) ? (void)0 : wide(dx);
(__cudaPushCallConfiguration(1, 4)) ? (void)0 : wide(dx);
(__cudaPushCallConfiguration(1, 8)) ? (void)0 : wide(dx);
(__cudaPushCallConfiguration(1, 16)) ? (void)0 : wide(dx);
}
"""


def test_launches_by_template_instance_and_their_coverage() -> None:
    """A launch naming a template instance gives its shape to that instance only; a kernel
    is covered when every launch of it has a constant shape it is specialized for and the
    host code names it nowhere else (a string does not count)."""
    from cpuify.nvcc.launch_shapes import (
        covered_entries,
        instance_launches,
        kernel_shapes,
    )
    entries = ["_Z6smoothILi1ELi32EEvPKfPfi", "_Z6smoothILi2ELi64EEvPKfPfi", "_Z4flatPf",
               "_Z5takenPf", "_Z6viaptrPf", "_Z4widePf", "_Z4keptPf"]
    launches = instance_launches(HOST_CPP_INSTANCES)
    assert launches.shapes["smooth<1,32>"] == {(32, 1, 1)}
    assert launches.unknown == {"taken"}
    assert launches.referenced == {"viaptr"}
    # names that end or start a longer identifier are no references; one after `&` is,
    # and so is a declaration whose `void` ends a longer word
    extra = "int xflat = wide_(1), myvoid flat2;\nvoidflat(dx);\nauto p = &wide;\n"
    assert instance_launches(HOST_CPP_INSTANCES + extra).referenced == {"viaptr", "wide"}
    assert instance_launches(HOST_CPP_INSTANCES + extra + "xvoid flat(float *);\n"
                             ).referenced == {"viaptr", "wide", "flat"}
    shapes = kernel_shapes(launches.shapes, entries)
    assert shapes == {"_Z6smoothILi1ELi32EEvPKfPfi": [(32, 1, 1)],
                      "_Z6smoothILi2ELi64EEvPKfPfi": [(64, 1, 1)],
                      "_Z4flatPf": [(128, 1, 1)], "_Z6viaptrPf": [(256, 1, 1)],
                      "_Z4widePf": [(1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1)]}
    # taken: a shape known at run time only; viaptr: its address is taken; wide: more
    # shapes than it is specialized for; kept: never launched here
    assert covered_entries(launches, entries, shapes) == {
        "_Z6smoothILi1ELi32EEvPKfPfi", "_Z6smoothILi2ELi64EEvPKfPfi", "_Z4flatPf"}
    # a launch whose template arguments match no instance (written in a template) gives
    # its shape to every instance of the name, as a launch by base name does
    more = instance_launches(HOST_CPP_INSTANCES + "(__cudaPushCallConfiguration(1, 96)) ? "
                                                  "(void)0 : smooth< R, B> (dx, dy, n);\n")
    assert kernel_shapes(more.shapes, entries[:2]) == {
        "_Z6smoothILi1ELi32EEvPKfPfi": [(32, 1, 1), (96, 1, 1)],
        "_Z6smoothILi2ELi64EEvPKfPfi": [(64, 1, 1), (96, 1, 1)]}
