"""``mixmla bench --dcp``: decode context parallelism over the ranks of ``torchrun``, checked and timed.

Run under ``torchrun --nproc-per-node N -m mixmla bench --dcp`` (one GPU per rank, NCCL), or
without torchrun as a group of one (a dry run of the whole path on one GPU; on a CPU, gloo and the
Triton interpreter with tiny shapes, correctness only). For every shape, cache format and
schedule:

1. Inputs: rank 0's, broadcast, so every rank holds the same q and cache; each rank takes its
   token shard (``shard_kv``, ``--interleave``).
2. Check (untimed): ``dcp_decode`` (with its cross-rank argument check) against the float64
   merge of the ranks' float32 partials (recomputed by ``mla_decode`` on each shard): within
   ``merge_error_bound`` elementwise (one bf16 step), relative L2 <= 2e-3, lse within 1e-5; the
   lse within 1e-5 of the one-GPU decode of the unsharded cache; the strict check against the
   float64 reference (rank 0); the same bytes on every rank. The relative L2 to the one-GPU
   output is reported, not judged (the kernels round their probabilities to bf16 per split of the
   tokens: docs/ARCHITECTURE.md). A case that fails is reported and not timed.
3. Time, every rank on its own GPU, L2 flushed by a 256 MiB read before each repetition:
   ``one_gpu_us``, the unsharded decode on one GPU (``mixmla.plan``, backend 'auto', graph
   replay: what a single GPU does best), and ``one_gpu_triton_us``, the same through the Triton
   kernels with a float32 out (the local decode's own path); ``decode_us``, the local decode of
   the shard (graph replay); ``step_us``, the whole step (``DcpPlan.run``, eager, after the ranks
   are lined up by a one-element all-reduce), the slowest rank per repetition, with its
   ``decode`` / ``comm`` / ``merge`` stages from CUDA events between them (a collective's stage
   includes waiting for the slowest rank); ``comm_alone_us``, the schedule's collectives alone on
   lined-up ranks; with ``--graph-step``, ``step_graph_us``, the step captured in one CUDA graph per
   rank (collectives included), without the host's launch gaps. ``speedup = one_gpu_us / step_us``.

Rank 0 prints the table and writes ``dcp.json`` and ``dcp.md`` into ``--out``. docs/PERF.md
describes the method; bench/run_dcp_h200.sh is the multi-GPU run.
"""

from __future__ import annotations

import json
import os
import sys
import time

__all__ = ["add_arguments", "default_specs", "run_dcp", "LONG_TOKENS", "SCHEMA"]

SCHEMA = "mixmla-dcp-bench/1"
#: Single requests of the default run: the long contexts DCP is for.
LONG_TOKENS = (131072, 524288, 1048576)
#: The CPU run's shapes (Triton interpreter: small), a ragged-free single request and a batch.
CPU_SPECS = ({"batchsize": 1, "qseqlen": 1, "kvseqlen": 300, "seed": 31},
             {"batchsize": 3, "qseqlen": 1, "kvseqlen": 70, "seed": 32})
#: Repetitions on a CPU, where the interpreter's times mean nothing.
CPU_REPS = 2
REL_L2_TOL = 2e-3  #: against the one-GPU decode: about one bf16 rounding
LSE_TOL = 1e-5  #: absolute in lse, i.e. relative in exp(lse)


def add_arguments(parser) -> None:
    """The ``--dcp`` options of ``mixmla bench``."""
    g = parser.add_argument_group("decode context parallelism (--dcp; under torchrun, or alone as a group of one)")
    g.add_argument("--dcp", action="store_true",
                   help="check and time dcp_decode over the torchrun ranks (default shapes: single requests of "
                        f"{', '.join(str(n) for n in LONG_TOKENS)} tokens and the 8 benchmark shapes)")
    g.add_argument("--schedules", default="allgather,reduce_scatter",
                   help="--dcp: communication schedules (default allgather,reduce_scatter)")
    g.add_argument("--interleave", type=int, default=1, help="--dcp: tokens per run dealt to a rank (default 1)")
    g.add_argument("--reps", type=int, default=50, help="--dcp: timed repetitions of a step (default 50)")
    g.add_argument("--check-only", action="store_true", help="--dcp: check every case, time none")
    g.add_argument("--graph-step", action="store_true",
                   help="--dcp: also time the whole step captured in one CUDA graph per rank (NCCL in the graph)")


def default_specs(cuda: bool) -> list[dict]:
    """The long single requests and docs/SPEC.md's 8 shapes on a GPU; tiny shapes on a CPU."""
    from ..inputs import BENCHMARK_SHAPES

    if not cuda:
        return [dict(s) for s in CPU_SPECS]
    longs = [{"batchsize": 1, "qseqlen": 1, "kvseqlen": n, "seed": 9100 + k} for k, n in enumerate(LONG_TOKENS)]
    return longs + [dict(s) for s in BENCHMARK_SHAPES]


# ---------------------------------------------------------------------------------------------
# The group and the clock


def _init_group() -> bool:
    """Join torchrun's group (NCCL with a GPU per rank, gloo on CPUs), or make a group of one.
    Returns whether this call made the group (and should destroy it)."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return True


class _Clock:
    """Stamps on the current CUDA stream (events) or of the host clock; ``us(a, b)`` after
    ``sync()``."""

    def __init__(self, cuda: bool):
        import torch

        self.cuda, self._torch = cuda, torch

    def stamp(self):
        if self.cuda:
            e = self._torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def sync(self):
        if self.cuda:
            self._torch.cuda.synchronize()

    def us(self, a, b) -> float:
        return a.elapsed_time(b) * 1e3 if self.cuda else (b - a) * 1e6


class _Lineup:
    """Lines the ranks up before a timed repetition: a one-element all-reduce, which every rank's
    stream leaves at about the same time (on CPUs a barrier)."""

    def __init__(self, device, cuda: bool):
        import torch
        import torch.distributed as dist

        self._dist, self.cuda = dist, cuda
        self._one = torch.ones(1, device=device)

    def __call__(self):
        if self.cuda:
            self._dist.all_reduce(self._one, op=self._dist.ReduceOp.MAX)  # stays 1
        else:
            self._dist.barrier()


# ---------------------------------------------------------------------------------------------
# One case


def _broadcast_inputs(spec: dict, device, fmts):
    """Rank 0's inputs of ``spec`` on every rank: q, {fmt: cache container}, kv_indptr, config."""
    import torch
    import torch.distributed as dist

    from ..formats import as_cache
    from ..inputs import generate_from_spec

    q, kv_data, _, kv_indptr, config = generate_from_spec(spec, device=device)
    caches = {f: as_cache(kv_data[f]) for f in fmts}
    tensors = [q, kv_indptr] + [t for c in caches.values() for t in vars(c).values()]
    for t in tensors:
        # One-byte float types travel as bytes (not every backend reduces or moves fp8 types).
        dist.broadcast(t.view(torch.uint8) if t.element_size() == 1 else t, src=0)
    return q, caches, kv_indptr, config


def _rel_l2(a, b) -> float:
    a, b = a.double(), b.double()
    n = float(b.norm())
    return float((a - b).norm()) / n if n else float((a - b).norm())


def _check(q, cache, kv_indptr, shard, schedule, group) -> dict:
    """dcp_decode (with its cross-rank checks) against the exact merge of the ranks' float32
    partials, the one-GPU decode and the float64 reference (module doc); the verdict, the same on
    every rank."""
    import torch
    import torch.distributed as dist

    from .. import mla_decode, mla_decode_reference
    from ..check import check_strict
    from ..distributed import dcp_decode
    from ..distributed.merge import merge_error_bound, merge_reference

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    out, lse = dcp_decode(q, shard, schedule=schedule, return_lse=True, group=group)
    # This rank's partial, computed apart; every rank's, gathered.
    part = torch.empty(out.shape, dtype=torch.float32, device=out.device)
    part, part_lse = mla_decode(q, *shard, out=part, return_lse=True, backend="triton")
    parts = [torch.empty_like(part) for _ in range(world)]
    part_lses = [torch.empty_like(part_lse) for _ in range(world)]
    dist.all_gather(parts, part, group=group)
    dist.all_gather(part_lses, part_lse.contiguous(), group=group)
    single = torch.empty_like(part)
    single, lse1 = mla_decode(q, cache, kv_indptr, out=single, return_lse=True, backend="triton")
    empty = torch.isneginf(lse1)
    lse_err = float((lse - lse1)[~empty].abs().max()) if bool((~empty).any()) else 0.0
    parts, part_lses = torch.stack(parts), torch.stack(part_lses)
    ref_out, out_ref_lse = merge_reference(parts, part_lses)
    bound = merge_error_bound(ref_out, parts, part_lses, out_ref_lse)
    seen = torch.isfinite(out_ref_lse)
    mine = {"merge_err_over_bound": float(((out.double() - ref_out).abs() / bound.clamp_min(1e-300)).max()),
            "rel_l2_vs_exact_merge": _rel_l2(out, ref_out),
            "lse_err_vs_exact_merge": float((lse - out_ref_lse)[seen].abs().max()) if bool(seen.any()) else 0.0,
            "rel_l2_vs_one_gpu": _rel_l2(out, single.to(torch.bfloat16)), "lse_err_vs_one_gpu": lse_err,
            "empty_rows_match": bool(torch.equal(torch.isneginf(lse), empty))}
    del ref_out, bound, parts
    # Same bytes on every rank: compare with rank 0's.
    ref_bytes, ref_lse = out.clone(), lse.clone()
    dist.broadcast(ref_bytes, src=0, group=group)
    dist.broadcast(ref_lse, src=0, group=group)
    mine["same_bytes"] = bool(torch.equal(ref_bytes.view(torch.int16), out.view(torch.int16))
                              and torch.equal(ref_lse.view(torch.int32), lse.view(torch.int32)))
    strict = None
    if rank == 0:
        ref, _ = mla_decode_reference(q, cache, kv_indptr)
        strict = check_strict(out, ref)
        del ref
    table = [None] * world
    dist.all_gather_object(table, mine, group=group)
    worst = {k: max(r[k] for r in table) for k in mine if k not in ("empty_rows_match", "same_bytes")}
    check = dict(worst, empty_rows_match=all(r["empty_rows_match"] for r in table),
                 same_bytes_on_every_rank=all(r["same_bytes"] for r in table))
    if strict is not None:
        check["strict"] = {"passed": bool(strict.passed), "rel_l2": strict.rel_l2, "message": strict.message}
    verdict = [strict is None or bool(strict.passed)]
    dist.broadcast_object_list(verdict, src=0, group=group)
    # rel_l2_vs_one_gpu is reported, not judged: the unsharded decode splits the tokens otherwise,
    # and the kernel's bf16 probabilities round per split (docs/ARCHITECTURE.md).
    check["passed"] = bool(check["merge_err_over_bound"] <= 1.0 and check["rel_l2_vs_exact_merge"] <= REL_L2_TOL
                           and check["lse_err_vs_exact_merge"] <= LSE_TOL and check["lse_err_vs_one_gpu"] <= LSE_TOL
                           and check["empty_rows_match"] and check["same_bytes_on_every_rank"] and verdict[0])
    return check


def _median(xs):
    from .stats import median

    return median(xs) if xs else None


def _time_local(fn, clock, cuda: bool, flusher, reps: int) -> float:
    """GPU time of ``fn`` (graph replay after a read flush) or, on CPUs, its host time (median)."""
    if cuda:
        from .timing import gpu_time

        return gpu_time(fn, flusher, max_reps=reps, time_cap_s=0.5).median_us
    fn()
    samples = []
    for _ in range(max(1, min(reps, 3))):
        a = clock.stamp()
        fn()
        samples.append(clock.us(a, clock.stamp()))
    return _median(samples)


def _time_step(plan, q, cache, clock, lineup, flusher, reps: int) -> dict:
    """Per repetition on this rank: the step's time and its stages (us)."""
    steps, stages = [], {"decode": [], "comm": [], "merge": []}
    records = []
    for _ in range(reps):
        if flusher is not None:
            flusher.flush()
        lineup()
        marks = [("start", clock.stamp())]
        plan.run(q, cache, marks=lambda stage: marks.append((stage, clock.stamp())))
        records.append(marks)
    clock.sync()
    for marks in records:
        steps.append(clock.us(marks[0][1], marks[-1][1]))
        sums = dict.fromkeys(stages, 0.0)
        for (_, a), (stage, b) in zip(marks, marks[1:]):
            sums[stage] += clock.us(a, b)
        for k in stages:
            stages[k].append(sums[k])
    return {"step": steps, **stages}


def _time_comm(plan, clock, lineup, reps: int) -> list:
    samples = []
    for _ in range(reps):
        lineup()
        a = clock.stamp()
        plan.communicate()
        b = clock.stamp()
        clock.sync()
        samples.append(clock.us(a, b))
    return samples


def _label(spec: dict) -> str:
    from .cases import spec_label

    return spec_label(spec)


def _run_case(spec, inputs, fmt, schedules, args, ctx) -> list[dict]:
    """Rows of one shape (``inputs``: ``_broadcast_inputs``) and format, one per schedule."""
    import torch
    import torch.distributed as dist

    from .. import plan as make_plan
    from ..distributed import dcp_plan, shard_kv
    from ..formats import VALUE_DIM
    from .cases import min_bytes

    q, caches, kv_indptr, _ = inputs
    cache = caches[fmt]
    rank, world = dist.get_rank(), dist.get_world_size()
    shard = shard_kv(cache, kv_indptr, world, rank, args.interleave)
    total_kv = int(kv_indptr[-1])
    base = {"shape": dict(spec), "shape_label": _label(spec), "format": fmt, "world_size": world,
            "interleave": args.interleave, "tokens": total_kv,
            "local_tokens": None, "bytes_one_gpu": min_bytes(q.shape[0], total_kv, q.shape[1], fmt)}
    local_tokens = [None] * world
    dist.all_gather_object(local_tokens, int(shard.kv_indptr[-1]))
    base["local_tokens"] = local_tokens
    clock, lineup, flusher, cuda = ctx["clock"], ctx["lineup"], ctx["flusher"], ctx["cuda"]
    one_gpu = {}
    if not args.check_only:
        p_auto = make_plan(kv_indptr, num_heads=q.shape[1], fmt=fmt)
        out16 = torch.empty(q.shape[0], q.shape[1], VALUE_DIM, dtype=torch.bfloat16, device=q.device)
        one_gpu["one_gpu_us"] = _time_local(lambda: p_auto.run(q, cache, out=out16), clock, cuda, flusher, args.reps)
        one_gpu["one_gpu_backend"] = p_auto.backend
        p_tri = make_plan(kv_indptr, num_heads=q.shape[1], fmt=fmt, backend="triton")
        out32 = torch.empty(out16.shape, dtype=torch.float32, device=q.device)
        one_gpu["one_gpu_triton_us"] = _time_local(lambda: p_tri.run(q, cache, out=out32, return_lse=True), clock,
                                                   cuda, flusher, args.reps)
        del p_auto, p_tri, out16, out32
    rows = []
    for schedule in schedules:
        row = dict(base, schedule=schedule, status="ok", note="")
        try:
            row["check"] = _check(q, cache, kv_indptr, shard, schedule, None)
        except Exception as err:  # noqa: BLE001 - reported, the run goes on
            row.update(status="error", note=f"{type(err).__name__}: {str(err).splitlines()[0][:200]}")
            rows.append(row)
            continue
        if not row["check"]["passed"]:
            row["status"] = "check failed"
        if args.check_only or row["status"] != "ok":
            rows.append(row)
            continue
        p = dcp_plan(shard.kv_indptr, None, q.shape[1], fmt, schedule=schedule)
        decode_us = _time_local(lambda: p.local.run(q, shard.cache, out=p._part, return_lse=True), clock, cuda,
                                flusher, args.reps)
        p.run(q, shard.cache)  # warm: compiled launches, NCCL channels
        mine = {"decode_alone": decode_us, **_time_step(p, q, shard.cache, clock, lineup, flusher, args.reps),
                "comm_alone": _time_comm(p, clock, lineup, args.reps)}
        everyone = [None] * world
        dist.all_gather_object(everyone, mine)
        steps = [max(r["step"][i] for r in everyone) for i in range(args.reps)]  # the slowest rank
        row.update(one_gpu)
        row.update(decode_us=[r["decode_alone"] for r in everyone],
                   step_us=_median(steps),
                   step_stages_us={k: [_median(r[k]) for r in everyone] for k in ("decode", "comm", "merge")},
                   comm_alone_us=[_median(r["comm_alone"]) for r in everyone],
                   reps=args.reps)
        if row.get("one_gpu_us") and row["step_us"]:
            row["speedup"] = row["one_gpu_us"] / row["step_us"]
            row["speedup_vs_triton"] = row["one_gpu_triton_us"] / row["step_us"]
            # Reading 1/N of the cache at the one-GPU rate would take one_gpu_triton_us / N.
            row["decode_efficiency"] = row["one_gpu_triton_us"] / (world * max(row["decode_us"]))
        if args.graph_step:
            row.update(_time_graph_step(p, q, shard.cache, clock, lineup, flusher, args.reps, world))
        rows.append(row)
        del p
    del shard
    if cuda:
        torch.cuda.empty_cache()
    return rows


def _time_graph_step(p, q, cache, clock, lineup, flusher, reps: int, world: int) -> dict:
    """The whole step captured in one CUDA graph per rank (NCCL collectives included), replayed on
    lined-up ranks: the step without host launch gaps. Replayed only when every rank captured it
    (a rank replaying alone would wait in its collectives)."""
    import torch.distributed as dist

    from .timing import capture_graph

    graph, note = None, ""
    if clock.cuda:
        try:
            graph = capture_graph(lambda: p.run(q, cache))
        except Exception as err:  # noqa: BLE001 - reported in the row
            note = f"graph capture failed: {type(err).__name__}: {str(err).splitlines()[0][:160]}"
    else:
        note = "no CUDA graphs on a CPU"
    flags = [None] * world
    dist.all_gather_object(flags, graph is not None)
    if not all(flags):
        return {"step_graph_us": None, "step_graph_note": note or "another rank could not capture the step"}
    ends = []
    for _ in range(reps):
        flusher.flush()
        lineup()
        a = clock.stamp()
        graph.replay()
        ends.append((a, clock.stamp()))
    clock.sync()
    mine = [clock.us(a, b) for a, b in ends]
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    return {"step_graph_us": _median([max(r[i] for r in everyone) for i in range(reps)]), "step_graph_note": ""}


# ---------------------------------------------------------------------------------------------
# Reporting (rank 0)


def _cell(x, fmt="{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _table_rows(rows: list[dict]) -> list[list[str]]:
    out = []
    for r in rows:
        chk = r.get("check") or {}
        stages = r.get("step_stages_us") or {}
        out.append([
            r["shape_label"], r["format"], r["schedule"], r["status"], _cell(chk.get("merge_err_over_bound"), "{:.2f}"),
            _cell(chk.get("rel_l2_vs_one_gpu"), "{:.1e}"), _cell((chk.get("strict") or {}).get("rel_l2"), "{:.1e}"),
            _cell(r.get("one_gpu_us")), _cell(max(r["decode_us"]) if r.get("decode_us") else None),
            _cell(max(stages["comm"]) if stages else None), _cell(max(r["comm_alone_us"]) if r.get("comm_alone_us")
                                                                  else None),
            _cell(max(stages["merge"]) if stages else None), _cell(r.get("step_us")),
            _cell(r.get("speedup"), "{:.2f}x"),
        ])
    return out


_HEADER = ["shape", "format", "schedule", "status", "merge err/bound", "rel L2 vs 1 GPU", "strict", "1 GPU",
           "decode", "comm", "comm alone", "merge", "step", "speed-up"]


def _print_table(rows: list[dict], world: int) -> None:
    cells = _table_rows(rows)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(" | ".join(_HEADER))
        for c in cells:
            print(" | ".join(c))
        return
    t = Table(title=f"mixmla bench --dcp: {world} rank(s); times in us, per-rank columns the slowest rank")
    for h in _HEADER:
        t.add_column(h, justify="left" if h in ("shape", "format", "schedule", "status") else "right")
    for c in cells:
        t.add_row(*c)
    Console(width=160).print(t)


def _markdown(doc: dict) -> str:
    lines = [f"# mixmla bench --dcp ({doc['world_size']} ranks, {doc['device'].get('name')})", "",
             f"commit {doc.get('commit')}, {doc['device'].get('date')}; interleave {doc['settings']['interleave']}, "
             f"{doc['settings']['reps']} repetitions; times in us; per-rank columns: the slowest rank.", "",
             "| " + " | ".join(_HEADER) + " |", "|" + "---|" * len(_HEADER)]
    lines += ["| " + " | ".join(c) + " |" for c in _table_rows(doc["rows"])]
    return "\n".join(lines) + "\n"


def _document(rows, world, schedules, fmts, args, t0) -> dict:
    import torch.distributed as dist

    from .env import device_info, source_commit

    return {"schema": SCHEMA, "world_size": world, "backend": str(dist.get_backend()), "device": device_info(),
            "commit": source_commit(),
            "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NCCL_ALGO",
                                                   "NCCL_PROTO")},
            "settings": {"interleave": args.interleave, "reps": args.reps, "schedules": schedules, "formats": fmts,
                         "check_only": bool(args.check_only), "graph_step": bool(args.graph_step),
                         "budget_s": args.budget_s, "wall_s": round(time.perf_counter() - t0, 1)},
            "rows": rows}


def _write(out_dir: str, doc: dict) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "dcp.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(out_dir, "dcp.md"), "w") as f:
        f.write(_markdown(doc))


def run_dcp(args, specs: list[dict] | None, fmts: list[str]) -> int:
    """``mixmla bench --dcp``: every rank runs it; rank 0 reports. Returns the exit status (0 when
    every case passed its checks)."""
    import torch
    import torch.distributed as dist

    from ..distributed import SCHEDULES
    from .bench import select
    from .env import device_info
    from .timing import L2Flusher

    try:
        schedules = select(args.schedules, SCHEDULES, "schedule")
    except ValueError as err:
        print(f"mixmla bench --dcp: {err}", file=sys.stderr)
        return 2
    if not schedules or args.interleave < 1 or args.reps < 1:
        print("mixmla bench --dcp: need a schedule, --interleave >= 1 and --reps >= 1", file=sys.stderr)
        return 2
    made = _init_group()
    try:
        cuda = torch.cuda.is_available()
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        rank, world = dist.get_rank(), dist.get_world_size()
        specs = specs or default_specs(cuda)
        if not cuda:  # interpreter times mean nothing: a couple of repetitions show the path runs
            args.reps = min(args.reps, CPU_REPS)
        ctx = {"cuda": cuda, "device": device, "clock": _Clock(cuda), "lineup": _Lineup(device, cuda),
               "flusher": L2Flusher(device, mode="read") if cuda else None}
        if rank == 0:
            info = device_info()
            print(f"mixmla bench --dcp: {world} rank(s) on {info['name']}, {dist.get_backend()}; "
                  f"{len(specs)} shapes x {fmts} x {schedules}, interleave {args.interleave}"
                  + ("" if cuda else " (no CUDA GPU: the Triton interpreter, times are host wall clock)"), flush=True)
        t0, rows = time.perf_counter(), []
        out_dir = args.out or os.path.join("bench", "out", f"dcp-{world}-{time.strftime('%Y%m%d-%H%M%S')}")
        for spec in specs:
            inputs = None
            for fmt in fmts:
                # Rank 0 decides, so that every rank skips the same cases.
                go = [time.perf_counter() - t0 < args.budget_s]
                dist.broadcast_object_list(go, src=0)
                if not go[0]:
                    rows += [{"shape": dict(spec), "shape_label": _label(spec), "format": fmt, "schedule": s,
                              "status": "skipped", "note": f"time budget of {args.budget_s:.0f} s spent"}
                             for s in schedules]
                    continue
                inputs = inputs or _broadcast_inputs(spec, device, fmts)
                new = _run_case(spec, inputs, fmt, schedules, args, ctx)
                rows += new
                if rank == 0:
                    _write(out_dir, _document(rows, world, schedules, fmts, args, t0))  # a hang loses nothing
                    for r in new:
                        chk = r.get("check") or {}
                        print(f"  {r['shape_label']:<12} {fmt:<6} {r['schedule']:<15} {r['status']:<12} "
                              f"merge err/bound {_cell(chk.get('merge_err_over_bound'), '{:.2f}')}  "
                              f"rel_l2 vs 1 GPU {_cell(chk.get('rel_l2_vs_one_gpu'), '{:.1e}')}  "
                              f"step {_cell(r.get('step_us'))} us  speed-up {_cell(r.get('speedup'), '{:.2f}x')}"
                              + (f"  {r['note']}" if r.get("note") else ""), flush=True)
            del inputs
        ok = all(r["status"] in ("ok", "skipped") for r in rows)
        if rank == 0:
            doc = _document(rows, world, schedules, fmts, args, t0)
            _write(out_dir, doc)
            print()
            _print_table(rows, world)
            print(f"\nwrote {out_dir}/dcp.json, dcp.md ({doc['settings']['wall_s']:.0f} s)")
        return 0 if ok else 1
    finally:
        if made:
            dist.destroy_process_group()
