"""CUDA graphs in `cpuify nvcc` programs (tests/programs/graph_*.cu): stream capture (a
replayed chain, fork/join over two streams, an unjoined fork, the calls CUDA refuses during a
capture, with the error codes CUDA 13 gives on an H100), graphs built node by node (a
diamond, a child graph, exec-level parameter changes, cudaGraphExecUpdate, a cycle, 2-byte
memsets, event nodes, the generic node API) and cudaGraphDebugDotPrint's DOT file.  Expected
values are computed here by hand (NumPy for the accumulations); both programs, built with
NVIDIA's nvcc 13.0, printed exactly these lines on an H100 (the DOT file aside)."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from test_runtime_api_programs import INCLUDE, build, run

pytestmark = pytest.mark.skipif(INCLUDE is None or shutil.which("g++") is None,
                                reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")

# cudaGraphNodeType
KERNEL, MEMCPY, MEMSET, HOST, GRAPH = 0, 1, 2, 3, 4


@pytest.fixture(scope="module")
def capture_out(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    exe = build(tmp_path_factory.mktemp("graph_capture"), "graph_capture")
    return run(exe).stdout.splitlines()


def line(out: list[str], prefix: str) -> str:
    hits = [ln for ln in out if ln.startswith(prefix)]
    assert len(hits) == 1, (prefix, out)
    return hits[0]


def test_captured_chain_replays_with_capture_time_arguments(capture_out: list[str]) -> None:
    out = capture_out
    assert out[0] == "capturing active"
    # nothing ran while capturing, and the host function was captured, not called
    assert out[1] == "after capture none host_calls 0"
    # memcpy H2D, kernel, kernel, memset, memcpy D2H, host function: CUDA's node types
    assert out[2] == f"chain nodes 6 types {MEMCPY} {KERNEL} {KERNEL} {MEMSET} {MEMCPY} {HOST}"
    # the kernel node holds a = 2 (the value when the launch was captured, not 100 later)
    assert out[3] == "kernel node a 2 grid 4 block 256 stub 1"
    # each replay: x <- host x (which the host then increments), y = 2x + 1, acc += y,
    # y = 0, out <- acc, host function reads out[3]
    n, replays = 1000, 5
    x = 0.5 * np.arange(n, dtype=np.float64)
    acc = np.zeros(n)
    seen = []
    for _ in range(replays):
        acc += 2 * x + 1
        seen.append(acc[3])
        x += 1
    assert line(out, "host_calls") == "host_calls 5 seen " + " ".join(f"{v:g}" for v in seen)
    assert line(out, "acc ") == f"acc 0 {acc[0]:g} 999 {acc[999]:g} sum {acc.sum():.1f}"
    assert line(out, "y zeroed") == "y zeroed 1"


def test_fork_join_capture_over_two_streams(capture_out: list[str]) -> None:
    out = capture_out
    assert line(out, "forked stream") == "forked stream active"
    # after the join the origin stream depends on both branches
    assert line(out, "capture info") == "capture info same id 1 deps 2"
    # p = 3p -> (q = p + 5 | r = 2p) -> r += q: 4 nodes, 4 edges, one root; s2 left the capture
    assert line(out, "fork/join nodes") == "fork/join nodes 4 edges 4 roots 1 s2 none"
    # two replays: p: i -> 3i -> 9i; r = 2p + p + 5 = 27i + 5 after the second
    assert line(out, "fork/join r") == f"fork/join r 1 {27 + 5} 999 {27 * 999 + 5} bad 0"


def test_unjoined_fork_and_refused_calls(capture_out: list[str]) -> None:
    out = capture_out
    assert line(out, "unjoined") == "unjoined cudaErrorStreamCaptureUnjoined graph 0 s2 none"
    # a synchronous copy goes to the legacy stream, on which a blocking capturing stream
    # would depend: refused, and the capture is invalidated (as on an H100 with CUDA 13)
    assert line(out, "sync copy") == "sync copy cudaErrorStreamCaptureImplicit status invalidated"
    assert line(out, "launch after") == "launch after cudaErrorStreamCaptureInvalidated"
    assert line(out, "end cudaErrorStreamCaptureInvalidated graph") == "end cudaErrorStreamCaptureInvalidated graph 0"
    # cudaMalloc is unsafe during a global or thread-local capture, fine in relaxed mode
    assert line(out, "malloc mode 0") == "malloc mode 0 cudaErrorStreamCaptureUnsupported end cudaErrorStreamCaptureInvalidated"
    assert line(out, "malloc mode 1") == "malloc mode 1 cudaErrorStreamCaptureUnsupported end cudaErrorStreamCaptureInvalidated"
    assert line(out, "malloc mode 2") == "malloc mode 2 cudaSuccess end cudaSuccess"
    assert line(out, "exchanged") == "exchanged cudaSuccess back from relaxed 1"
    assert line(out, "sync capturing") == "sync capturing cudaErrorStreamCaptureUnsupported status invalidated"
    assert line(out, "query captured") == "query captured event cudaErrorCapturedEvent end cudaErrorStreamCaptureInvalidated"
    assert line(out, "other thread malloc mode 0") == ("other thread malloc mode 0 cudaErrorStreamCaptureUnsupported "
                                                      "end cudaErrorStreamCaptureInvalidated")
    assert line(out, "other thread malloc mode 1") == "other thread malloc mode 1 cudaSuccess end cudaSuccess"
    assert line(out, "end in other thread") == "end in other thread cudaErrorStreamCaptureWrongThread status none"
    assert line(out, "begin legacy") == "begin legacy cudaErrorStreamCaptureUnsupported"
    assert line(out, "end not capturing") == "end not capturing cudaErrorIllegalState"
    # external events are nodes: wait (6), kernel, record (7); the replay records the event
    assert line(out, "external event") == "external event nodes 3 types 6 0 7 query cudaSuccess elapsed ok 1"
    # the program goes on; the captured work never ran (p is still 9i from the fork/join part)
    assert line(out, "after y") == "after y 10 21"
    assert line(out, "p 1") == "p 1 9"
    assert out[-1] == "last cudaSuccess"


@pytest.fixture(scope="module")
def explicit_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], str]:
    tmp = tmp_path_factory.mktemp("graph_explicit")
    exe = build(tmp, "graph_explicit")
    dot = tmp / "parent.dot"
    out = run(exe, str(dot)).stdout.splitlines()
    return out, dot.read_text()


def test_explicit_diamond_child_graph_and_updates(explicit_run: tuple[list[str], str]) -> None:
    out, _ = explicit_run
    # memset -> (b, c) -> d -> copy -> host function: 6 nodes, 6 edges
    assert out[0] == "diamond nodes 6 edges 6 roots 1 deps of d 2"
    assert out[1] == "duplicate edge cudaErrorInvalidValue self edge cudaErrorInvalidValue"
    a = 7
    b, c = 2 * a + 1, 3 * a                 # kB changed to 1000 after the node was added
    assert out[2] == f"diamond d {b + c} all 1 host {b + c}"
    b = 5 * a + 1                           # cudaGraphExecKernelNodeSetParams: k = 5
    assert out[3] == f"exec set d {b + c} graph k 2"
    a = 4                                   # cudaGraphExecMemsetNodeSetParams
    assert out[4] == f"exec memset d {5 * a + 1 + 3 * a}"
    # cudaGraphExecUpdate from a clone of the graph (memset 7, k = 2) whose c node has k = 10
    assert out[5] == f"update cudaSuccess result 0 d {2 * 7 + 1 + 10 * 7}"
    assert out[6] == "update topology cudaErrorGraphExecUpdateFailure result 2"  # TopologyChanged
    assert out[7] == f"still d {2 * 7 + 1 + 10 * 7}"
    assert out[8] == "cycle cudaErrorInvalidValue result 2"                        # InvalidStructure
    # child graph: d = 1, e = d + 100, f = 2e; the node's copy has 1 node
    assert out[9] == f"child type {GRAPH} copy nodes 1 f 202 all 1 e 101"
    assert out[10] == "misaligned memset cudaErrorInvalidValue"                    # as on an H100
    # 3 two-byte elements 0xABCD (little-endian) from byte 2 in 2 rows of pitch 16
    expect = np.full(24, 0x11, np.uint8)
    for row in range(2):
        for k in range(3):
            expect[row * 16 + 2 + 2 * k: row * 16 + 4 + 2 * k] = [0xCD, 0xAB]
    assert out[11] == "memset16 " + " ".join(f"{v:02x}" for v in expect)
    assert out[12] == "events cudaSuccess elapsed ok 1"
    # cudaGraphAddNode: a = 3, b = 4a - 2; then the exec's memset sets a = 5
    assert out[13] == f"generic b {4 * 3 - 2} then {4 * 5 - 2} type {KERNEL} k 4"
    # the d node disabled in the exec: d keeps the 0 written before; enabled again: 15 + 70
    assert out[14] == f"disabled d 0 enabled 0 then d {2 * 7 + 1 + 10 * 7}"
    assert out[-1] == "last cudaSuccess"


def parse_dot(text: str) -> tuple[dict[str, dict[str, str]], list[tuple[str, str, dict[str, str]]]]:
    """A small parser of the DOT language (graph/digraph, subgraphs, node and edge statements
    with attribute lists, graph attributes): the nodes with their attributes and the edges."""
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"|->|[{}\[\];=,]|[A-Za-z_0-9.]+', text)
    assert "".join(tokens).replace(" ", "") != ""
    pos = 0

    def peek() -> str:
        return tokens[pos] if pos < len(tokens) else ""

    def take(want: str | None = None) -> str:
        nonlocal pos
        tok = tokens[pos]
        assert want is None or tok == want, (want, tok, tokens[pos - 5:pos + 5])
        pos += 1
        return tok

    def ident(tok: str) -> str:
        return bytes(tok[1:-1], "utf-8").decode("unicode_escape") if tok.startswith('"') else tok

    def attrs() -> dict[str, str]:
        out: dict[str, str] = {}
        take("[")
        while peek() != "]":
            key = ident(take())
            take("=")
            out[key] = ident(take())
            if peek() in (",", ";"):
                take()
        take("]")
        return out

    nodes: dict[str, dict[str, str]] = {}
    edges: list[tuple[str, str, dict[str, str]]] = []

    def block() -> None:
        take("{")
        while peek() != "}":
            if peek() == "subgraph":
                take()
                if peek() != "{":
                    take()
                block()
            else:
                name = ident(take())
                if peek() == "->":
                    take()
                    dst = ident(take())
                    edges.append((name, dst, attrs() if peek() == "[" else {}))
                elif peek() == "=":
                    take()
                    take()
                else:
                    nodes[name] = attrs() if peek() == "[" else {}
            if peek() == ";":
                take()
        take("}")

    assert take() in ("digraph", "graph")
    if peek() != "{":
        take()
    block()
    assert pos == len(tokens)
    return nodes, edges


def test_explicit_graphs_run_the_same_at_the_call(explicit_run: tuple[list[str], str],
                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    # CPUIFY_SYNC_LAUNCH=1: graph launches run their nodes on the calling thread instead of
    # queueing them on the stream: the same output
    out, _ = explicit_run
    tmp = tmp_path_factory.mktemp("graph_explicit_sync")
    exe = build(tmp, "graph_explicit")
    assert run(exe, str(tmp / "parent.dot"), env={"CPUIFY_SYNC_LAUNCH": "1"}).stdout.splitlines() == out


def test_debug_dot_print_parses(explicit_run: tuple[list[str], str]) -> None:
    _, text = explicit_run
    nodes, edges = parse_dot(text)
    # the parent (memset -> child graph -> kernel) and the child's one kernel
    labels = sorted(attrs["label"].split("\n")[0] for attrs in nodes.values())
    assert labels == ["0 KERNEL", "0 MEMSET", "1 CHILD_GRAPH", "2 KERNEL"]
    kernels = [a["label"] for a in nodes.values() if "KERNEL" in a["label"]]
    assert all("affine(int*, int const*, int, int, int)" in k and "block (128, 1, 1)" in k for k in kernels)
    by_label = {a["label"].split("\n")[0]: name for name, a in nodes.items()}
    solid = {(s, d) for s, d, a in edges if "style" not in a}
    assert solid == {(by_label["0 MEMSET"], by_label["1 CHILD_GRAPH"]),
                     (by_label["1 CHILD_GRAPH"], by_label["2 KERNEL"])}
    # the child node points at the child graph's root
    dotted = [(s, d) for s, d, a in edges if a.get("style") == "dotted"]
    assert dotted == [(by_label["1 CHILD_GRAPH"], by_label["0 KERNEL"])]


def test_cuda12_edge_functions_build_next_to_cuda13(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """CUDA 12's graph-edge calls without edge data (cudaGraphAddDependencies with four
    arguments, as Altis's particlefilter_float has them; the dependency queries, removal,
    cudaGraphAddNode, cudaStreamGetCaptureInfo/UpdateCaptureDependencies) build against CUDA
    13's headers through the legacy layer, in the same file as CUDA 13's spellings, and mean
    the same; without the layer they are CUDA 13's compile errors."""
    out = run(build(tmp_path, "graph_cuda12_edges")).stdout.splitlines()
    assert out == [
        # 0->1 (12), 1->2 (13), 2->3 and 0->3 (12, arrays); 3 depends on 2 and 0
        "edges 4, into the last 2 (1 1), out of the first 2",
        "after removing one: 3",
        "graph ran 1234",                # memset to 0, then the chain appends 1, 2, 3, 4
        "capture status 1 frontier 1",   # cudaStreamCaptureStatusActive, the first append
        "captured ran 123456",
    ]
    from test_runtime_api_programs import PROGRAMS, nvcc
    r = nvcc("--cpuify-no-legacy", f"-I{PROGRAMS}", str(PROGRAMS / "graph_cuda12_edges.cu"), "-o",
             str(tmp_path / "off"), cwd=tmp_path)
    assert r.returncode != 0 and "too few arguments" in r.stderr
