"""GPU time of the Triton path's cut layouts in one launch of clusters against decode + combine
(docs/PERF.md, design log step 101; issue 13's small shapes).

For each shape and format, two plans of the benchmark's inputs with the Triton backend: the
shipped one (on an sm_90 GPU, requests of at most 16 chunks run as one thread-block cluster each
and merge their own partials: ``schedule.with_clusters``) and the same layout planned without
clusters (decode, then combine), the driver's count of clusters the GPU holds at once
(``cuOccupancyMaxActiveClusters``) against the clusters launched, and that plan's decode kernel (no merge in it) launched in
clusters of the first plan's size before its combine, which separates what the cluster launch
costs from what the merge inside it costs. Each output is checked strictly, then both graphs are timed
after a read flush, alternated ``--rounds`` times in the same process (median of ``--reps``
replays each). An empty kernel's graph gives the floor of the method. One JSON line per
measurement to OUT/cluster_timing.jsonl; a table last.

The cluster form is not in the shipped code: apply ``bench/studies/patches/triton_clusters.patch``
first (``git apply``), which this script imports from.

    PYTHONPATH=src:bench/studies python3 bench/studies/cluster_timing.py OUT [--shapes 4x1024,...]
"""

import argparse
import json
import os

import torch

import mixmla
from mixmla import api
from mixmla.check import check_strict
from mixmla.formats import as_cache
from mixmla.harness.timing import L2Flusher, capture_graph
from mixmla.kernels.triton import backend as triton_backend
from mixmla.kernels.triton import launch
from mixmla.kernels.triton.decode import mla_decode_kernel

from flush_study import bench_case, shape_list, time_graphs


def max_active_clusters(kernel, cluster: int, grid: tuple) -> int | str:
    """``cuOccupancyMaxActiveClusters`` of a loaded ``kernel`` (a ``CompiledKernel``) launched as
    clusters of ``cluster`` programs on a grid of ``grid`` clusters: how many clusters the GPU can
    hold at once; the error text where the driver call fails."""
    import ctypes

    class LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, padding, a 64-byte value
        _fields_ = [("id", ctypes.c_uint), ("pad", ctypes.c_char * 4), ("x", ctypes.c_uint), ("y", ctypes.c_uint),
                    ("z", ctypes.c_uint), ("rest", ctypes.c_char * 52)]

    class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
        _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint), ("bx", ctypes.c_uint),
                    ("by", ctypes.c_uint), ("bz", ctypes.c_uint), ("shared", ctypes.c_uint),
                    ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)),
                    ("num_attrs", ctypes.c_uint)]

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        attr = LaunchAttribute(4, b"", cluster, 1, 1, b"")  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        num_warps, _, shared = kernel.packed_metadata
        cfg = LaunchConfig(grid[0] * cluster, grid[1] if len(grid) > 1 else 1, 1, 32 * num_warps, 1, 1, shared,
                           None, ctypes.pointer(attr), 1)
        if cluster > 8:  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            cuda.cuFuncSetAttribute(ctypes.c_void_p(kernel.function), 16, 1)
        n = ctypes.c_int(0)
        err = cuda.cuOccupancyMaxActiveClusters(ctypes.byref(n), ctypes.c_void_p(kernel.function), ctypes.byref(cfg))
        return n.value if err == 0 else f"CUresult {err}"
    except Exception as exc:  # a study: record why, keep timing
        return f"{type(exc).__name__}: {exc}"


def _plan(case, fmt, clusters: bool):
    q, _, qo_indptr, kv_indptr, _ = case.data
    # Else a plan of the same indptrs reuses the last plan's schedule (``_LAST_PLAN``) or its
    # layout's backend plan (``_LAYOUTS``, whose key does not hold the cluster choice).
    api._LAST_PLAN = None
    api._LAYOUTS.clear()
    runs = triton_backend.runs_clusters
    if not clusters:
        triton_backend.runs_clusters = lambda device: False
    try:
        return mixmla.plan(kv_indptr, qo_indptr, case.num_heads, fmt, sm_scale=case.sm_scale, backend="triton")
    finally:
        triton_backend.runs_clusters = runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shapes", default="4x1024,32x1024,64x1024,32x8192,64x8192,4x8192")
    ap.add_argument("--formats", default="bf16,fp8,mxfp4")
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "cluster_timing.jsonl"), "a")
    flush = L2Flusher(mode="read").flush
    sink = torch.zeros(1, device="cuda")
    empty = capture_graph(lambda: sink.add_(1))
    floor = time_graphs([empty], flush, a.reps)[0]
    print(json.dumps(dict(empty_kernel_us=floor)), flush=True)
    log.write(json.dumps(dict(empty_kernel_us=floor)) + "\n")
    rows = []
    for shape in shape_list(a.shapes):
        case = bench_case(shape)
        q = case.data[0]
        for fmt in a.formats.split(","):
            cache, ref = case.cache(fmt), case.ref(fmt)
            graphs, rec = {}, dict(shape=shape, fmt=fmt)
            for name, clusters in (("clusters", True), ("two_launches", False)):
                p = _plan(case, fmt, clusters)
                out = torch.full_like(ref, float("nan"), dtype=torch.bfloat16)
                p.run(q, cache, out=out)
                chk = check_strict(out, ref)
                rec[name] = dict(cluster=p.schedule.cluster, work_items=p.schedule.num_work, rel_l2=chk.rel_l2,
                                 ok=bool(chk.passed), us=[])
                if clusters and p.schedule.cluster > 1:
                    dec = launch.launches(p._plan.constants, q, as_cache(cache), p.kv_indptr, p.qo_indptr, out,
                                          None)[0]
                    k = launch.with_cluster(mla_decode_kernel.warmup(*dec.args, grid=dec.grid, **dec.options),
                                            p.schedule.cluster)
                    rec[name]["clusters_launched"] = dec.grid[0] * dec.grid[1]
                    rec[name]["max_active_clusters"] = max_active_clusters(k, p.schedule.cluster, dec.grid)
                graphs[name] = capture_graph(lambda p=p, out=out: p.run(q, cache, out=out))
                if not clusters and not p.schedule.direct:
                    # The same decode kernel (no merge in it), launched as clusters of the size the
                    # cluster plan has, then the combine: what launching in clusters costs alone.
                    size = rec["clusters"]["cluster"]
                    if size > 1:
                        dec, comb = launch.launches(p._plan.constants, q, as_cache(cache), p.kv_indptr, p.qo_indptr,
                                                    out, None)
                        k = launch.with_cluster(mla_decode_kernel.warmup(*dec.args, grid=dec.grid, **dec.options),
                                                size)
                        out2 = torch.full_like(ref, float("nan"), dtype=torch.bfloat16)
                        dec = launch.with_arguments(dec, out_ptr=out2)
                        comb = launch.with_arguments(comb, out_ptr=out2)

                        def clustered_decode(k=k, dec=dec, comb=comb, size=size):
                            stream = torch.cuda.current_stream().cuda_stream
                            launch.launch_compiled(k, (dec.grid[0] // size, dec.grid[1]), stream, dec.args)
                            launch.run(comb)

                        clustered_decode()
                        chk = check_strict(out2, ref)
                        rec["decode_in_clusters"] = dict(cluster=size, rel_l2=chk.rel_l2, ok=bool(chk.passed), us=[])
                        graphs["decode_in_clusters"] = capture_graph(clustered_decode)
            for _ in range(a.rounds):
                for name, g in graphs.items():
                    rec[name]["us"].append(time_graphs([g], flush, a.reps)[0])
            log.write(json.dumps(rec) + "\n")
            log.flush()
            rows.append(rec)
            print(json.dumps(rec), flush=True)
            del graphs
        del case
        torch.cuda.empty_cache()
    print(f"\nempty kernel {floor:.2f} us; GPU us after a read flush, rounds in order")
    print("shape      fmt    cluster  one launch (clusters)  decode + combine   decode in clusters + combine")
    for r in rows:
        c, t = r["clusters"], r["two_launches"]
        d = r.get("decode_in_clusters", dict(us=[], ok=True))
        ok = "" if c["ok"] and t["ok"] and d["ok"] else " FAIL"
        print(f"{r['shape']:10} {r['fmt']:6} {c['cluster']:7}  {' / '.join(f'{x:.1f}' for x in c['us']):20} "
              f"{' / '.join(f'{x:.1f}' for x in t['us']):18} {' / '.join(f'{x:.1f}' for x in d['us']):18}{ok}")


if __name__ == "__main__":
    main()
