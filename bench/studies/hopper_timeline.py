"""Where a tile's time goes in the Hopper kernel: SM clock cycles per phase of the tile loop.

``PYTHONPATH=src:bench/studies python3 bench/studies/hopper_timeline.py --out OUT [--kernels shipped,var.py]
[--shapes 256x8192,...] [--compile-only]``

Each kernel (``shipped``: kernels/gluon/decode.py, which the library runs for MXFP4 (fp8 runs
``decode_tma``, not instrumented here; so MXFP4 only); or a variant's source file, as written by
``hopper_load_variants.py``) is instrumented by text edits: clock reads between the phases of the
tile loop, summed per thread over its tiles and written with the tile count and the program's whole
time to the ``lse`` buffer (float32, (programs, 20, 128); compiled with WRITE_LSE=False). Phases:
wait for the previous tile's value products; row offsets; the nine chunks (decode, value stores,
score products issued; MXFP4: the next tile's loads); wait for the score products; mask and tile maximum (fp8: then the next tile's loads);
probabilities and rescale; P^T store and fence; value products issued. Per shape and format it
prints the mean cycles per tile of each phase (thread 0 of each warp, over all programs), the
program's whole time per tile, the mean and slowest program's whole time (cycles), the span of all programs and
how far apart they start and end (us, on the GPU's shared nanosecond timer), and the GPU time of the uninstrumented and instrumented kernel
(the probes' own cost). ``--grid plan`` runs the grid a plan takes for the batch (``backend.grid_size``) instead of two
programs per SM. ``--compile-only`` compiles on any machine. Writes OUT/timeline.json.
"""

import argparse
import importlib.util
import json
import os
import tempfile

import torch

import mixmla.kernels.gluon.decode as shipped_decode
from mixmla.kernels.gluon import sass
from mixmla.kernels.gluon.launch import REQUEST_COST_TILES, ROWS
from mixmla.kernels.gluon.compile import KernelSpec

from hopper_load_variants import absolute_imports, inline_softmax
from hopper_variants import compile_variant, load_module

PHASES = ["wait values", "rows", "chunks", "wait scores", "max", "exp+rescale", "P store", "value issue"]
#: Per request piece, outside the tile loop: from the piece's start to its first tile (request
#: bounds, query staging, first loads), from its last tile to its end (the last value products,
#: output or partial stores, fence, count; without the merge), the merge (the last arriver's, or a
#: merger's share once the count is complete), and a merger's wait for the count (both 0, and the
#: merge in "piece end", for kernels that merge inside ``_write_request``: ``MERGE_ANCHORS``).
PIECE = ["piece start", "piece end", "merge", "merge wait"]
#: Piece start split: request bounds; first tile's page entries, loads and prefetch issued; query staged.
START = ["bounds", "first loads", "query"]
NPROBES = 20

HELPERS = '''

@gluon.jit
def _clock():
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    return gl.inline_asm_elementwise("mov.u32 $0, %clock;", "=r,r", [gl.full([128], 0, gl.int32, one)],
                                     dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _globaltimer():
    """The low 32 bits of the GPU's nanosecond timer, which (unlike %clock) all SMs share."""
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    return gl.inline_asm_elementwise("mov.u32 $0, %globaltimer_lo;", "=r,r", [gl.full([128], 0, gl.int32, one)],
                                     dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _smid():
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    return gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [gl.full([128], 0, gl.int32, one)],
                                     dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _zeros():
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    return gl.zeros([128], gl.int32, one)


@gluon.jit
def _store_probes(ptr, pid, probes):
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    i = gl.arange(0, 128, layout=one)
    for k in gl.static_range(20):
        gl.store(ptr + (pid * 20 + k) * 128 + i, probes[k].to(gl.float32))


@gluon.jit
def mla_decode_hopper_kernel('''

PROBES = [
    ("\n\n@gluon.jit\ndef mla_decode_hopper_kernel(", HELPERS),
    ("    pid = gl.program_id(0)\n",
     "    pid = gl.program_id(0)\n    g_begin = _globaltimer()\n    c_begin = _clock()\n"
     "    ph0 = _zeros(); ph1 = _zeros(); ph2 = _zeros(); ph3 = _zeros(); ph4 = _zeros(); ph5 = _zeros()\n"
     "    ph6 = _zeros(); ph7 = _zeros(); ntl = _zeros(); pq = _zeros(); pe = _zeros(); pm = _zeros()\n"
     "    sa = _zeros(); sb = _zeros(); sc = _zeros(); pw = _zeros()\n"),
    ("            # A tile's page entries are read two tiles before its rows",
     "            e1 = _clock()\n            sa += e1 - d0\n            # A tile's page entries are read two tiles before its rows"),
    ("            q_mult = _stage_query(", "            e2 = _clock()\n            sb += e2 - e1\n            q_mult = _stage_query("),
    ("            qk = (sm_scale * LOG2E * kscale)", "            sc += _clock() - e2\n            qk = (sm_scale * LOG2E * kscale)"),
    ("            start_b, cum_b, first, nparts = _request_bounds(",
     "            d0 = _clock()\n            start_b, cum_b, first, nparts = _request_bounds("),
    ("            for t in range(t_begin, t_end):\n",
     "            pq += _clock() - d0\n            for t in range(t_begin, t_end):\n"),
    ("            acc = warpgroup_mma_wait(0, deps=acc)\n            inv_l, lse2",
     "            d2 = _clock()\n            acc = warpgroup_mma_wait(0, deps=acc)\n            inv_l, lse2"),
    # A request of two pieces: the last arriver's merge.
    ("                        _merge_parts(part_o_ptr,", "                        d3 = _clock()\n                        _merge_parts(part_o_ptr,"),
    ("                        gl.store(counter_ptr + b, 0)\n                else:",
     "                        gl.store(counter_ptr + b, 0)\n                        pm += _clock() - d3\n                else:"),
    # Longer requests: a merger's wait for the count, then its share of the merge.
    ("                        _wait_count(counter_ptr + b, nparts)\n",
     "                        d4 = _clock()\n                        _wait_count(counter_ptr + b, nparts)\n"
     "                        d5 = _clock()\n                        pw += d5 - d4\n"),
    ("                        gl.thread_barrier()\n                        left = gl.atomic_add",
     "                        pm += _clock() - d5\n                        gl.thread_barrier()\n                        left = gl.atomic_add"),
    ("                acc = warpgroup_mma_wait(0, deps=acc)\n                row_off,",
     "                c0 = _clock()\n                acc = warpgroup_mma_wait(0, deps=acc)\n                c1 = _clock()\n"
     "                ph0 += c1 - c0\n                ntl += 1\n                row_off,"),
    ("                nxt = ()\n", "                c2 = _clock()\n                ph1 += c2 - c1\n                nxt = ()\n"),
    ("                st = warpgroup_mma_wait(0, deps=(st, ))\n",
     "                c3 = _clock()\n                ph2 += c3 - c2\n"
     "                st = warpgroup_mma_wait(0, deps=(st, ))\n                c4 = _clock()\n                ph3 += c4 - c3\n"),
    ("                m_new = gl.maximum(m_i, _tile_max(s, red_smem, ROWS))\n",
     "                m_new = gl.maximum(m_i, _tile_max(s, red_smem, ROWS))\n                c5 = _clock()\n"
     "                ph4 += c5 - c4\n"),
    ("                z = _opaque_zero(t)\n                p_smem = p_all.index(z)\n",
     "                c6 = _clock()\n                ph5 += c6 - c5\n                z = _opaque_zero(t)\n"
     "                p_smem = p_all.index(z)\n"),
    ("                fence_async_shared()\n                acc = ()\n",
     "                fence_async_shared()\n                c7 = _clock()\n                ph6 += c7 - c6\n                acc = ()\n"),
    ("scaled[c], is_async=True), )\n", "scaled[c], is_async=True), )\n                ph7 += _clock() - c7\n"),
]


#: The merge probes' anchors: kernels since the merge moved into ``decode._write_request`` (a helper
#: the probes cannot reach) have none of them, and then "merge" and "merge wait" read 0 and the
#: merge is counted in "piece end".
MERGE_ANCHORS = {a for a, _ in PROBES if "_merge_parts(" in a or "counter_ptr + b" in a or "left = gl.atomic_add" in a}


def instrumented(src):
    src = inline_softmax(absolute_imports(src))
    merges_inline = any(src.count(a) for a in MERGE_ANCHORS)
    for a, b in PROBES:
        if a in MERGE_ANCHORS and not merges_inline:
            continue
        assert src.count(a) == 1, a
        src = src.replace(a, b)
    return src.rstrip("\n") + ("\n            pe += _clock() - d2\n    c_end = _clock()\n    g_end = _globaltimer()\n"
                               "    _store_probes(lse_ptr, pid, (ph0, ph1, ph2, ph3, ph4, ph5, ph6, ph7, ntl, c_end - c_begin, pq, pe,"
                               " pm, sa, sb, sc, pw, g_begin.to(gl.float32, bitcast=True), g_end.to(gl.float32, bitcast=True), _smid()))\n")


def probed_module(kernel):
    src = open(shipped_decode.__file__ if kernel == "shipped" else kernel).read()
    d = tempfile.mkdtemp(prefix="timeline_")
    path = os.path.join(d, "probed_" + os.path.basename(kernel if kernel != "shipped" else "shipped.py"))
    open(path, "w").write(instrumented(src))
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def spec(fmt, batch):
    return KernelSpec(H=16, ROWS=ROWS, FORMAT=fmt, BLOCK_B=max(128, 1 << max(0, batch - 1).bit_length()),
                      C0=REQUEST_COST_TILES, WRITE_LSE=False, PAGED=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out"))
    ap.add_argument("--kernels", default="shipped")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--shapes", default="256x8192,64x8192,4x1024")
    ap.add_argument("--grid", choices=("full", "plan"), default="full",
                    help="programs: two per SM, or what a plan takes for the batch (backend.grid_size)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    kernels = a.kernels.split(",")
    if a.compile_only:
        for kernel in kernels:
            mod = probed_module(kernel)
            for fmt in (2, ):  # decode.py reads MXFP4 only (contiguous fp8 is decode_tma's)
                f = sass.kernel_facts(compile_variant(mod.mla_decode_hopper_kernel, spec(fmt, 256)))
                print(f"{kernel} format {fmt}: {f.registers} registers, spill {f.spill_bytes} B, loop "
                      f"{f.loop_instructions} instructions, {f.loop_local} local")
        return
    from mixmla.formats import as_cache
    from mixmla.harness.timing import L2Flusher, gpu_time
    from mixmla.inputs import generate_input
    from mixmla.kernels.gluon.backend import grid_size
    from mixmla.kernels.gluon.launch import PROGRAMS_PER_SM, HopperDecoder
    from mixmla.reference import default_sm_scale

    flusher = L2Flusher(mode="read")
    rows = []
    for shape in a.shapes.split(","):
        b, l = (int(x) for x in shape.split("x"))
        q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=b + l, device="cuda")
        for name in ("mxfp4", ):  # decode.py reads MXFP4 only
            cache = as_cache(kv[name])
            for kernel in kernels:
                programs = None
                if a.grid == "plan":
                    full = PROGRAMS_PER_SM * torch.cuda.get_device_properties(q.device).multi_processor_count
                    programs = grid_size((kvp[1:] - kvp[:-1]).cpu().numpy(), full)
                dec = HopperDecoder(b, 16, name, q.device, write_lse=False, programs=programs)
                if kernel != "shipped":
                    dec.kernel = compile_variant(load_module(kernel).mla_decode_hopper_kernel, dec.spec)
                out = torch.empty(q.shape[0], 16, 512, dtype=torch.bfloat16, device="cuda")
                plain = lambda: dec.launch(q, cache, kvp, qo, out, None, default_sm_scale())  # noqa: E731
                plain()
                torch.cuda.synchronize()
                t_plain = gpu_time(plain, flusher, warm_s=0.1, time_cap_s=0.4).median_us
                ref_out = out.clone()
                probe = torch.zeros(dec.programs, NPROBES, 128, dtype=torch.float32, device="cuda")
                dec.kernel = compile_variant(probed_module(kernel).mla_decode_hopper_kernel, dec.spec)
                probed = lambda: dec.launch(q, cache, kvp, qo, out, probe, default_sm_scale())  # noqa: E731
                probed()
                torch.cuda.synchronize()
                t_probed = gpu_time(probed, flusher, warm_s=0.1, time_cap_s=0.4).median_us
                probe.zero_()
                flusher.flush()
                probed()
                torch.cuda.synchronize()
                w = probe.double()[:, :, ::32]  # thread 0 of each warp
                # Program start and end on the shared nanosecond timer (low 32 bits, read modulo 2**32
                # relative to the earliest start): how far apart programs start and end, and how much
                # of the GPU time lies outside every program (launch, teardown).
                g = probe[:, 17:19, 0].contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
                g = (g - g[:, 0].min()) % (1 << 32)
                starts, ends = g[:, 0].double() / 1000, g[:, 1].double() / 1000
                tiles = w[:, 8].sum()
                per_tile = {ph: round(float(w[:, k].sum() / tiles), 1) for k, ph in enumerate(PHASES)}
                row = {"kernel": os.path.basename(kernel), "shape": shape, "fmt": name, "plain us": round(t_plain, 1),
                       "probed us": round(t_probed, 1),
                       "same output": bool(torch.equal(out.view(torch.int16), ref_out.view(torch.int16))),
                       **per_tile, "loop": round(sum(per_tile.values()), 1),
                       "program per tile": round(float(w[:, 9].sum() / tiles), 1),
                       # Whole programs (cycles): the slowest against the mean says how even the
                       # split is; against the GPU time, what lies outside the programs.
                       "program mean": round(float(w[:, 9, 0].mean()), 0), "program max": round(float(w[:, 9, 0].max()), 0),
                       # Per program (mean cycles): outside the loop, the merge apart from the rest of a piece's end.
                       "piece start": round(float(w[:, 10, 0].mean()), 0),
                       "piece end": round(float((w[:, 11, 0] - w[:, 12, 0] - w[:, 16, 0]).mean()), 0),
                       "merge": round(float(w[:, 12, 0].mean()), 0),
                       "merge wait": round(float(w[:, 16, 0].mean()), 0),
                       "merge wait in slowest": round(float(w[int(w[:, 9, 0].argmax()), 16, 0]), 0),
                       "merge in slowest": round(float(w[int(w[:, 9, 0].argmax()), 12, 0]), 0),
                       "span us": round(float(ends.max() - starts.min()), 2),
                       "start spread us": round(float(starts.max() - starts.min()), 2),
                       "end spread us": round(float(ends.max() - ends.min()), 2),
                       "programs": dec.programs,
                       # When programs end, from the earliest start: a few late ones, or a broad spread.
                       **{f"end p{p} us": round(float(torch.quantile(ends - starts.min(), p / 100)), 2)
                          for p in (10, 50, 90)},
                       **{name: round(float(w[:, 13 + k, 0].mean()), 0) for k, name in enumerate(START)}}
                # Per program: the SM it ran on, its start and end (us from the earliest start).
                sm = probe[:, 19, 0].cpu().tolist()
                s0, e0 = (starts - starts.min()).cpu().tolist(), (ends - starts.min()).cpu().tolist()
                row["per program"] = [[int(sm[i]), round(s0[i], 2), round(e0[i], 2)] for i in range(dec.programs)]
                rows.append(row)
                print({k: v for k, v in row.items() if k != "per program"}, flush=True)
        del q, kv
        torch.cuda.empty_cache()
    json.dump(rows, open(os.path.join(a.out, "timeline.json"), "w"), indent=1)
    cols = [c for c in rows[0] if c != "per program"]
    print("| " + " | ".join(cols) + " |")
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
