"""The copy engine alone (design log step 84): how fast TMA streams fp8 tiles into shared memory on
the H200, and how long a copy issued ``D`` cycles before it is needed is waited for.

Each program streams its own range of 64-row tiles of a 576-byte-row cache (an fp8 cache's rows,
as int32 words) through ``NBUF`` shared buffers: wait for buffer s, "consume" it (a dependent
chain of ``delay`` float multiply-adds, as a warpgroup's decode would take the time, reading
nothing), a barrier, the copy of the tile ``NBUF`` ahead into it, optionally an L2 prefetch of the
tile ``PF`` beyond that one, then ``delay_free`` more steps (the rest of a tile's work, with the
copy in flight) before the next wait: 144 words per
row (the whole tile, 36 KB, as two copies: Gluon's shapes are powers of two) or 64 (chunks 0-3,
16 KB, as ``var_tma4one``).
Per program it records, with ``%clock``, the cycles waited at the barriers, the cycles of the
delay chains and its whole time; the host times the launch with events (GB/s of the tiles read).
This separates the copy engine's own rate and latency from what the decode kernel does around
it: the kernel's copy of chunks 0-3, issued about a tile ahead, was waited for ~900 cycles (step
83).

``PYTHONPATH=src:bench/studies python3 bench/studies/tma_stream.py --out OUT`` on the GPU;
``--compile`` (any machine, ``TRITON_INTERPRET=0``) prints registers, shared memory and the
copies in the loop.
"""

import argparse
import json
import os

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

ROW_WORDS = gl.constexpr(144)  # 576 bytes: one fp8 cache row
TILE = gl.constexpr(64)


@gluon.jit
def _clock():
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    return gl.inline_asm_elementwise("mov.u32 $0, %clock;", "=r,r", [gl.full([128], 0, gl.int32, one)],
                                     dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _delay(x, n):
    """``n`` dependent multiply-adds on every thread's value (4 cycles each, one chain per thread)."""
    for _ in range(n):
        x = x * 1.0000001 + 1e-7
    return x


@gluon.jit
def _issue(desc, tail_desc, bar, buf, tail, row0, live, BOXW: gl.constexpr, TAIL: gl.constexpr):
    mbarrier.expect(bar, TILE * (BOXW + 16 * TAIL) * 4, pred=live)
    tma.async_copy_global_to_shared(desc, [row0, 0], bar, buf, pred=live)
    if TAIL:
        tma.async_copy_global_to_shared(tail_desc, [row0, 128], bar, tail, pred=live)


@gluon.jit
def _prefetch(kv_ptr, row0, live):
    """One bulk L2 prefetch of the 64 rows from ``row0`` (as ``paging.prefetch_rows``), by one thread."""
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    lane = gl.arange(0, 128, layout=one)
    size = gl.where((lane == 0) & live, TILE * ROW_WORDS * 4, 0)
    gl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.u32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [kv_ptr + row0.to(gl.int64) * ROW_WORDS + lane * 0, size], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def tma_stream_kernel(kv_ptr, n_rows, tiles_per_program, delay, delay_free, out_ptr,
                      NBUF: gl.constexpr, BOXW: gl.constexpr, TAIL: gl.constexpr, PF: gl.constexpr):
    """kv (n_rows, 144) int32, row stride 144; program p streams tiles [p * T, (p + 1) * T) of 64
    rows (T = tiles_per_program, a multiple of NBUF), BOXW words of each row (a power of two: Gluon's
    shapes are) and with TAIL the last 16 (words 128-143, a second copy on the same barrier). out (programs, 4, 128)
    int32 per thread: cycles waited, cycles of the delay chains, whole time (the last row unused)."""
    lay: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    desc = tma.make_tensor_descriptor(kv_ptr, [n_rows, ROW_WORDS], [ROW_WORDS, 1], [TILE, BOXW], lay)
    tail_desc = tma.make_tensor_descriptor(kv_ptr, [n_rows, ROW_WORDS], [ROW_WORDS, 1], [TILE, 16], lay)
    bufs = gl.allocate_shared_memory(gl.int32, [NBUF, TILE, BOXW], lay)
    tails = gl.allocate_shared_memory(gl.int32, [NBUF if TAIL else 1, TILE, 16], lay)
    bars = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(NBUF):
        mbarrier.init(bars.index(s), count=1)
    fence_async_shared()
    gl.thread_barrier()
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    pid = gl.program_id(0)
    first = pid * tiles_per_program
    t_start = _clock()
    for s in gl.static_range(NBUF):
        _issue(desc, tail_desc, bars.index(s), bufs.index(s), tails.index(s if TAIL else 0), (first + s) * TILE,
               True, BOXW, TAIL)
    if PF > 0:
        for j in gl.static_range(PF):
            _prefetch(kv_ptr, (first + NBUF + j) * TILE, NBUF + j < tiles_per_program)
    waited = gl.zeros([128], gl.int32, one)
    delayed = gl.zeros([128], gl.int32, one)
    x = gl.full([128], 1.0, gl.float32, one)
    for k0 in range(0, tiles_per_program, NBUF):
        for s in gl.static_range(NBUF):
            c0 = _clock()
            mbarrier.wait(bars.index(s), (k0 // NBUF) & 1)
            c1 = _clock()
            x = _delay(x, delay)
            gl.thread_barrier()  # every thread is done with buffer s
            nxt = k0 + s + NBUF
            live = nxt < tiles_per_program
            _issue(desc, tail_desc, bars.index(s), bufs.index(s), tails.index(s if TAIL else 0), (first + nxt) * TILE,
                   live, BOXW, TAIL)
            if PF > 0:
                _prefetch(kv_ptr, (first + nxt + PF) * TILE, nxt + PF < tiles_per_program)
            x = _delay(x, delay_free)  # the rest of a tile's work, with the copy in flight
            c2 = _clock() + (x > 1e30).to(gl.int32)  # the chain ends before this clock read
            waited += c1 - c0
            delayed += c2 - c1
    whole = _clock() - t_start
    lanes = gl.arange(0, 128, layout=one)
    base = out_ptr + pid * 512
    gl.store(base + lanes, waited)
    gl.store(base + 128 + lanes, delayed)
    gl.store(base + 256 + lanes, whole)


#: (programs per SM, buffers, words per row, delay chain lengths with the buffer in use and with the
#: copy in flight, L2 prefetch distance beyond the copy's tile (0: none)): the cases of one run. A
#: chain step takes about 7.3 cycles.
CASES = [
    (1, 2, 144, 0, 0, 0), (2, 1, 144, 0, 0, 0), (2, 2, 144, 0, 0, 0),
    (2, 1, 144, 250, 0, 0), (2, 1, 144, 0, 250, 0), (2, 2, 144, 500, 0, 0),
    (2, 1, 144, 250, 250, 0), (2, 1, 144, 250, 250, 1), (2, 1, 144, 250, 250, 2),
    (2, 1, 144, 150, 350, 0), (2, 1, 144, 150, 350, 1), (2, 1, 144, 150, 350, 2),
    (2, 1, 144, 250, 400, 0), (2, 1, 144, 250, 400, 1),
    (2, 2, 144, 250, 250, 0), (2, 2, 144, 250, 250, 1),
    (2, 1, 64, 60, 550, 0), (2, 1, 64, 60, 550, 1), (2, 1, 64, 60, 550, 2),
    (2, 1, 128, 200, 300, 0), (2, 1, 128, 200, 300, 1),
]


def _box(words: int) -> dict:
    return {"BOXW": 128, "TAIL": 1} if words == 144 else {"BOXW": words, "TAIL": 0}


def compile_facts():
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from mixmla.kernels.gluon import sass

    sig = {"kv_ptr": "*i32", "n_rows": "i32", "tiles_per_program": "i32", "delay": "i32", "delay_free": "i32",
           "out_ptr": "*i32", "NBUF": "constexpr", "BOXW": "constexpr", "TAIL": "constexpr", "PF": "constexpr"}
    for nbuf, boxw in ((1, 144), (2, 144), (1, 64)):
        k = triton.compile(GluonASTSource(tma_stream_kernel, sig, constexprs={"NBUF": nbuf, "PF": 1, **_box(boxw)},
                                          attrs={(0, ): [["tt.divisibility", 16]], (5, ): [["tt.divisibility", 16]]}),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
        f = sass.kernel_facts(k)
        print(f"NBUF {nbuf} words {boxw}: {f.registers} registers, spill {f.spill_bytes} B, shared {f.shared} B, "
              f"loop {f.loop_instructions} instructions: {dict(f.loop_ops)}")


def run(out_dir: str, tiles: int = 32768) -> list:
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kv = torch.randint(-2**31, 2**31 - 1, (tiles * TILE.value, ROW_WORDS.value), dtype=torch.int32, device="cuda")
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    rows = []
    for per_sm, nbuf, boxw, delay, free, pf in CASES:
        programs = sms * per_sm
        t = tiles // programs // nbuf * nbuf
        out = torch.zeros(programs, 4, 128, dtype=torch.int32, device="cuda")

        def launch():
            tma_stream_kernel[(programs, )](kv, kv.shape[0], t, delay, free, out, NBUF=nbuf, PF=pf, **_box(boxw),
                                            num_warps=4)

        launch()
        times = []
        for _ in range(5):
            flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            launch()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3)
        us = sorted(times)[len(times) // 2]
        o = out.double()
        cyc_tile = o[:, 2].mean().item() / t
        row = dict(  # delay_per_tile: the cycles between the wait's end and the next wait's start
            per_sm=per_sm, nbuf=nbuf, box_words=boxw, delay=delay, delay_free=free, prefetch=pf, programs=programs, tiles_per_program=t,
                   us=us, gbs=programs * t * TILE.value * boxw * 4 / us / 1e3,
                   wait_per_tile=o[:, 0].mean().item() / t, delay_per_tile=o[:, 1].mean().item() / t,
                   cycles_per_tile=cyc_tile, mhz=o[:, 2].mean().item() / us)
        rows.append(row)
        print(f"{per_sm}/SM nbuf {nbuf} box {boxw * 4:4d} B busy {delay:4d} free {free:4d} pf {pf}: {us:8.1f} us {row['gbs']:7.0f} GB/s, "
              f"per tile: wait {row['wait_per_tile']:6.0f} delay {row['delay_per_tile']:6.0f} "
              f"whole {cyc_tile:6.0f} cycles ({row['mhz']:.0f} MHz)", flush=True)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tma_stream.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out/tma_stream"))
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    if args.compile:
        compile_facts()
    else:
        run(args.out)
