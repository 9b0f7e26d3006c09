"""Probe (sm_90a; compiles on the CPU, runs on the H200): can a Gluon kernel on triton 3.6 merge a request's
split-K partials inside a thread-block cluster, through distributed shared memory, instead of through
global memory? (docs/PERF.md, design log step 100; issue 13's small shapes.)

Each CTA of a cluster of C (``num_ctas=C``: Triton's launcher sets the cluster dimension; 16 is the
non-portable size it also allows) loads a (16, 512) float32 partial into its shared memory, the
cluster meets at ``barrier.cluster`` (release/acquire), and CTA r sums columns r*512/C .. of all C
partials in the fixed order 0..C-1 (bitwise repeatable), then the cluster meets again so that no CTA
exits while another reads its memory. Gluon has no operation for another CTA's shared memory, so
the reads are inline PTX: ``mapa.shared::cluster`` of the buffer's address, which is ``global_smem``
(the symbol Triton declares for a kernel's shared memory) plus the buffer's offset, 0 here (the
buffer is the kernel's only allocation: asserted from the compiled kernel's shared size).
``MODE`` 1 reads the partners' partials from global memory (L2) instead, 3 as 1 from copies each CTA
writes before the barrier (what a decode's partials would be: the barrier's release and acquire
must make them visible), 2 reads only its own slice (no merge): the launch and load cost of the
same grid. Each is compiled for C CTAs per program (every layout then carries the cluster's CGA
bases) and for one, the cluster then made by the launch alone (``launch_clusters``): a kernel of
one-CTA layouts, which is what the decode kernels are.

    python bench/studies/cluster_merge_probe.py            # CPU: compile, print the cluster PTX
    python bench/studies/cluster_merge_probe.py OUT        # GPU: check and time, OUT/cluster_merge.jsonl
"""
import os, sys, re
os.environ["TRITON_INTERPRET"] = "0"
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

RANK = gl.constexpr("mov.u32 $0, %cluster_ctarank;")
CID = gl.constexpr("mov.u32 $0, %clusterid.x;")
NCID = gl.constexpr("mov.u32 $0, %nclusterid.x;")
SYNC = gl.constexpr("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned; mov.u32 $0, 0;")
#: A store of four floats that every CTA makes: ``gl.store`` of a tensor whose layout is the same in
#: every CTA of the cluster (each CTA holding its own values, which Gluon cannot know) is made by
#: CTA 0 only.
ST4 = gl.constexpr("st.global.v4.f32 [$4], {$8, $9, $10, $11}; mov.u32 $0, 0; mov.u32 $1, 0; mov.u32 $2, 0; "
                   "mov.u32 $3, 0;")
LD4 = gl.constexpr("{ .reg .u32 a, b; mov.u32 b, global_smem; add.u32 b, b, $4; mapa.shared::cluster.u32 a, b, $8; "
                   "ld.shared::cluster.v4.f32 {$0, $1, $2, $3}, [a]; }")
H = 16
D = 512


@gluon.jit
def _sreg(ASM: gl.constexpr, L: gl.constexpr):
    return gl.inline_asm_elementwise(ASM, "=r,r", [gl.full([128], 0, gl.int32, L)], dtype=gl.int32, is_pure=False,
                                     pack=1)


@gluon.jit
def cluster_merge(part_ptr, out_ptr, C: gl.constexpr, BASE: gl.constexpr, L1: gl.constexpr, L2: gl.constexpr,
                  LM: gl.constexpr, SL: gl.constexpr, MODE: gl.constexpr):
    H: gl.constexpr = 16
    D: gl.constexpr = 512
    DS: gl.constexpr = D // C
    rank = gl.max(_sreg(RANK, L1), axis=0)
    cid = gl.max(_sreg(CID, L1), axis=0)
    buf = gl.allocate_shared_memory(gl.float32, [H, D], SL)
    r = gl.arange(0, H, layout=gl.SliceLayout(1, L2))[:, None]
    c = gl.arange(0, D, layout=gl.SliceLayout(0, L2))[None, :]
    x = gl.load(part_ptr + ((cid * C + rank) * H + r) * D + c)
    NPART = gl.max(_sreg(NCID, L1), axis=0) * C * H * D  # MODE 3's copies lie after the inputs
    if MODE == 3:  # written to global memory by this kernel, read back by the partners after the barrier
        dst0 = (part_ptr + NPART + ((cid * C + rank) * H + r) * D + c).to(gl.int64, bitcast=True)
        gl.inline_asm_elementwise(ST4, "=r,=r,=r,=r,l,l,l,l,f,f,f,f", [dst0, x], dtype=gl.int32, is_pure=False,
                                  pack=4)
    else:
        buf.store(x)
    _sreg(SYNC, L1)
    rm = gl.arange(0, H, layout=gl.SliceLayout(1, LM))[:, None]
    cm = gl.arange(0, DS, layout=gl.SliceLayout(0, LM))[None, :]
    off = BASE + (rm * D + rank * DS + cm) * 4
    acc = gl.zeros([H, DS], gl.float32, LM)
    for j in gl.static_range(C):
        if MODE == 0:  # the partner's shared memory
            acc += gl.inline_asm_elementwise(LD4, "=f,=f,=f,=f,r,r,r,r,r,r,r,r",
                                             [off, gl.full([H, DS], j, gl.int32, LM)], dtype=gl.float32,
                                             is_pure=False, pack=4)
        elif MODE == 1:  # the partner's partial from global memory (L2)
            acc += gl.load(part_ptr + ((cid * C + j) * H + rm) * D + rank * DS + cm)
        elif MODE == 3:
            acc += gl.load(part_ptr + NPART + ((cid * C + j) * H + rm) * D + rank * DS + cm)
        elif j == 0:  # no merge: this CTA's own slice
            acc += gl.load(part_ptr + ((cid * C + rank) * H + rm) * D + rank * DS + cm)
    dst = (out_ptr + (cid * H + rm) * D + rank * DS + cm).to(gl.int64, bitcast=True)
    gl.inline_asm_elementwise(ST4, "=r,=r,=r,=r,l,l,l,l,f,f,f,f", [dst, acc], dtype=gl.int32, is_pure=False, pack=4)
    _sreg(SYNC, L1)


def layouts(C, ctas):
    """The probe's layouts for clusters of ``C`` in a kernel compiled for ``ctas`` CTAs per program
    (1 or C): every layout of a kernel of C CTAs carries log2(C) CGA bases, zero here (each CTA
    holds a whole tensor of its own)."""
    bits = ctas.bit_length() - 1
    cga1 = [[0]] * bits
    cga2 = [[0, 0]] * bits
    L1 = gl.BlockedLayout([1], [32], [4], [0], cga1)
    L2 = gl.BlockedLayout([1, 4], [1, 32], [4, 1], [1, 0], cga2)
    tc = min(32, D // C // 4)
    LM = gl.BlockedLayout([1, 4], [32 // tc, tc], [4, 1], [1, 0], cga2)
    SL = gl.SwizzledSharedLayout(1, 1, 1, [1, 0], cga2)
    return L1, L2, LM, SL


def compile_probe(C, mode=0, ctas=None):
    """The probe for clusters of ``C``, compiled for ``ctas`` (default C) CTAs per program; with 1,
    the cluster is made by the launch alone (``launch_clusters``)."""
    ctas = C if ctas is None else ctas
    L1, L2, LM, SL = layouts(C, ctas)
    src = GluonASTSource(cluster_merge, {"part_ptr": "*fp32", "out_ptr": "*fp32", "C": "constexpr", "BASE": "constexpr",
                                         "L1": "constexpr", "L2": "constexpr", "LM": "constexpr", "SL": "constexpr",
                                         "MODE": "constexpr"},
                         constexprs={"C": C, "BASE": 0, "L1": L1, "L2": L2, "LM": LM, "SL": SL, "MODE": mode})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_ctas": ctas})


def launch_clusters(kernel, clusters, C, stream, args):
    """Launch ``kernel`` (compiled for one CTA per program) as ``clusters`` clusters of ``C`` CTAs:
    Triton's launcher takes the cluster size from the packed metadata's ``num_ctas``."""
    num_warps, _, shared = kernel.packed_metadata
    kernel.run(clusters, 1, 1, stream, kernel.function, (num_warps, C, shared), None, None, None, *args)


def _time(call, reps=50):
    """us per call: graph replay of ``reps`` calls, median of 20 replays (no flush: the partials are
    as hot as a kernel that has just written them)."""
    import torch
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        call()
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for _ in range(reps):
            call()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000 / reps)
    return sorted(ts)


def gpu(out):
    import json

    import torch
    rows = []
    for C in (2, 4, 8, 16):
        clusters = 128 // C
        space = torch.full((2, clusters * C, H, D), float("nan"), device="cuda")
        part = space[0]
        part.normal_()
        ref = part.view(clusters, C, H, D).sum(1)
        ds = D // C
        own = torch.cat([part.view(clusters, C, H, D)[:, r, :, r * ds:(r + 1) * ds] for r in range(C)], dim=2)
        for ctas in (C, 1):
            for mode, name in ((0, "dsmem"), (1, "global"), (3, "written"), (2, "none")):
                k = compile_probe(C, mode, ctas)
                if mode == 0:  # the buffer is all of it: offset 0
                    assert k.metadata.shared == H * D * 4, k.metadata.shared
                L1, L2, LM, SL = layouts(C, ctas)
                o = torch.full((clusters, H, D), float("nan"), device="cuda")
                space[1].fill_(float("nan"))

                def call():
                    launch_clusters(k, clusters, C, torch.cuda.current_stream().cuda_stream,
                                    (space, o, C, 0, L1, L2, LM, SL, mode))

                call()
                torch.cuda.synchronize()
                want = own if mode == 2 else ref
                err = ((o - want).norm() / want.norm()).item()
                ts = _time(call)
                row = dict(C=C, clusters=clusters, compiled_ctas=ctas, mode=name, rel_err=err,
                           ok=bool(err < 1e-6),  # float32 sums in the order 0..C-1, not torch's
                           us_median=ts[10], us_min=ts[0])
                print(json.dumps(row), flush=True)
                rows.append(row)
    with open(os.path.join(out, "cluster_merge.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        gpu(sys.argv[1])
        sys.exit()
    for C in (2, 4, 8, 16):
        for ctas in (C, 1):
            k = compile_probe(C, 0, ctas)
            ptx = k.asm["ptx"]
            print(f"C={C} compiled for {ctas} CTAs: shared {k.metadata.shared} B;",
                  sum("mapa" in line for line in ptx.splitlines()), "mapa,",
                  sum("barrier.cluster" in line for line in ptx.splitlines()), "cluster barriers")
