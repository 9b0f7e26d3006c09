"""Processes for the decode-context-parallel tests: a gloo group on CPU, started once per world size.

Starting a process that imports torch, Triton and mixmla takes seconds on the CI's two cores, so a
:class:`GlooPool` starts ``world_size`` processes once, joins them in one gloo process group, and
then runs named tasks (the functions below) on every rank together; each rank returns its result
to the test, which compares them. A task that hangs (ranks waiting in different collectives) is a
test failure after ``timeout`` seconds, and the pool is restarted for the next test.

The tasks build their inputs from seeds on the CPU, so every rank has the same q and cache.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import queue
import tempfile
import traceback

#: Seconds a task may take on every rank before the test fails as hung.
TASK_TIMEOUT_S = 300


def _worker(rank: int, world_size: int, init_file: str, tasks, results) -> None:
    import mixmla  # noqa: F401  (turns Triton's interpreter on before Triton loads, as conftest does)
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=TASK_TIMEOUT_S))
    while True:
        item = tasks.get()
        if item is None:
            break
        name, args = item
        try:
            results.put((rank, True, globals()[name](*args)))
        except BaseException:  # noqa: BLE001 - the test prints it
            results.put((rank, False, traceback.format_exc()))
    dist.destroy_process_group()


class GlooPool:
    """``world_size`` processes in one gloo group. ``run(name, *args)`` calls task ``name`` of this
    module as ``name(*args)`` on every rank and returns the results in rank order."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self._procs = []

    def _start(self):
        ctx = mp.get_context("spawn")
        fd, self._init_file = tempfile.mkstemp(prefix="mixmla-gloo-")
        os.close(fd)
        os.unlink(self._init_file)  # the FileStore creates it
        self._tasks = [ctx.Queue() for _ in range(self.world_size)]
        self._results = ctx.Queue()
        self._procs = [ctx.Process(target=_worker, args=(r, self.world_size, self._init_file, self._tasks[r],
                                                         self._results), daemon=True)
                       for r in range(self.world_size)]
        for p in self._procs:
            p.start()

    def run(self, name: str, *args, timeout: float = TASK_TIMEOUT_S) -> list:
        if not self._procs or not all(p.is_alive() for p in self._procs):
            self.close()
            self._start()
        for q in self._tasks:
            q.put((name, args))
        got = {}
        try:
            while len(got) < self.world_size:
                rank, ok, value = self._results.get(timeout=timeout)
                got[rank] = (ok, value)
        except queue.Empty:
            self.close()
            raise AssertionError(f"task {name} did not finish on ranks {sorted(set(range(self.world_size)) - set(got))} "
                                 f"within {timeout} s (ranks waiting in different collectives?)") from None
        failed = [f"rank {r}:\n{v}" for r, (ok, v) in sorted(got.items()) if not ok]
        if failed:
            raise AssertionError(f"task {name} failed:\n" + "\n".join(failed))
        return [got[r][1] for r in range(self.world_size)]

    def close(self):
        for q in getattr(self, "_tasks", []):
            try:
                q.put(None)
            except (OSError, ValueError):
                pass
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()  # this pool's own process, by its handle
        self._procs = []
        if getattr(self, "_init_file", None) and os.path.exists(self._init_file):
            os.unlink(self._init_file)


# ---------------------------------------------------------------------------------------------
# Inputs (the same on every rank and in the test process).

def case_inputs(case: dict):
    """``(q, cache in the case's form, kv_indptr)`` of a case dict: kv_lens, fmt, heads, seed,
    form ('container' or 'benchmark')."""
    from mixmla.formats import as_cache
    from mixmla.inputs import generate_ragged

    q, kv, _, kv_indptr, _ = generate_ragged(len(case["kv_lens"]), 1, 0, case["seed"], num_heads=case["heads"],
                                             device="cpu", kvseqlens=case["kv_lens"])
    cache = kv[case["fmt"]]
    return q, (as_cache(cache) if case["form"] == "container" else cache), kv_indptr


# ---------------------------------------------------------------------------------------------
# Tasks: run on every rank of the pool.

def dcp_cases(cases: list) -> list:
    """dcp_decode of every case on this rank's shard, and this rank's partial result computed
    apart by mla_decode on the shard with a float32 out: per case (out, lse, part, part_lse)."""
    import torch
    import torch.distributed as dist

    from mixmla import mla_decode
    from mixmla.distributed import dcp_decode, shard_kv

    rank, world = dist.get_rank(), dist.get_world_size()
    results = []
    for case in cases:
        q, cache, kv_indptr = case_inputs(case)
        shard = shard_kv(cache, kv_indptr, world, rank, case["interleave"])
        out, lse = dcp_decode(q, shard, schedule=case["schedule"], return_lse=True)
        part, part_lse = mla_decode(q, *shard, out=torch.empty(q.shape[0], q.shape[1], 512), return_lse=True)
        results.append((out.clone(), lse.clone(), part, part_lse.clone()))
    return results


def _outcome(call) -> tuple:
    try:
        call()
    except (TypeError, ValueError, RuntimeError) as err:
        return ("raised", type(err).__name__, str(err))
    return ("returned",)


def dcp_misuse(case: dict) -> dict:
    """Each misuse of dcp_decode in turn, on every rank: what each one did ('raised', type,
    message) or ('returned',). The last entry is a correct call after all of them, which must
    still work (the group is not left waiting)."""
    import torch
    import torch.distributed as dist

    from mixmla.distributed import dcp_decode, shard_kv

    rank, world = dist.get_rank(), dist.get_world_size()
    q, cache, kv_indptr = case_inputs(case)
    shard = shard_kv(cache, kv_indptr, world, rank, case["interleave"])
    other = case_inputs(dict(case, kv_lens=case["kv_lens"] + [7], seed=case["seed"] + 1))
    two_queries = torch.tensor([0] + [2 * (b + 1) for b in range(len(case["kv_lens"]))], dtype=torch.int32)
    q2 = torch.cat([q, q])
    outcomes = {
        "wrong group size": _outcome(lambda: dcp_decode(q, shard_kv(cache, kv_indptr, 2 * world, rank))),
        "another rank's shard": _outcome(lambda: dcp_decode(q, shard_kv(cache, kv_indptr, world, world - 1 - rank))),
        "different batch": _outcome(lambda: dcp_decode(q if rank == 0 else other[0], *(
            tuple(shard) if rank == 0 else tuple(shard_kv(other[1], other[2], world, rank))))),
        "different q": _outcome(lambda: dcp_decode(q if rank == 0 else torch.randn_like(q.float()).bfloat16(),
                                                   shard)),
        "different schedule": _outcome(lambda: dcp_decode(q, shard, schedule=("allgather", "reduce_scatter")[rank % 2])),
        "MTP on every rank": _outcome(lambda: dcp_decode(q2, *shard, two_queries)),
        "MTP on rank 1 only": _outcome(lambda: dcp_decode(q2 if rank == 1 else q, *shard,
                                                          two_queries if rank == 1 else None)),
        "unknown schedule": _outcome(lambda: dcp_decode(q, shard, schedule="ring")),
    }
    out = dcp_decode(q, shard)
    outcomes["correct call afterwards"] = ("returned", out.clone())
    return outcomes
