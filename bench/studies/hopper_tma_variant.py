"""fp8's raw tiles partly staged by the copy engine (design log step 81), as a text edit of the
shipped ``kernels/gluon/decode.py``: ``write_variant(outdir)`` writes ``var_tma5.py``; time it with
``hopper_timeline.py --kernels shipped,DIR/var_tma5.py --grid plan`` or ``hopper_variants.py``.

Step 80's bound: fp8 with its raw tiles read from shared memory instead of global memory runs at
290 us at 256x8192 (shipped 394): the register loads, not the bytes, hold the loop up. A whole
staged tile (36 KB) does not fit beside two programs per SM, five of its nine chunks (20 KB) do
(2 x 106.5 KB). Here, for contiguous fp8 caches only (paged layouts and MXFP4 as shipped), chunks
0-4 of each tile come by TMA (one descriptor per program over the cache's used rows, made on the
device; an mbarrier with the bytes to expect) into five 4 KB buffers, issued for tile t+1 as soon
as tile t's chunk 4 is read (a barrier first, so that no thread still reads them); chunks 5-8 stay
register loads after the tile maximum as shipped, and the L2 prefetch stays. Rows past the
request are zeroed after the shared-memory read (the copy does not mask rows). Outputs are the
shipped kernel's bits (same products, same order).

The descriptor needs 128 bytes of global scratch per program, which Triton's launcher allocates
through ``triton.set_allocator``; the written module sets one (torch allocations) when imported.
``--separate`` writes ``var_tma5s.py`` (five buffers, see ``ALLOC``); ``--one-box`` writes
``var_tma4one.py`` (chunks 0-3 in one copy per tile, ``ONE_BOX``; compiled
255 registers, no spill, 103 KB shared, tile loop 825 instructions with 5 ``bar.sync`` against
``var_tma5``'s 911 and 9); ``--compile`` prints registers, spills, shared memory and the tile
loop's length.

Timed (steps 82-83): ``--one-box`` saves 4% of the loop's cycles and none of the time;
``--tail-lds`` (chunks 4-8 read from a shared buffer of zeros, a bound) shows the copy itself is
waited for, which neither ``--pf3`` (the L2 prefetch three tiles ahead) nor ``--wide`` (chunks 0-3
as 64 rows of 256 bytes, ``var_tma4wide.py``) shortens.
"""

import sys

import mixmla.kernels.gluon.decode as shipped

from hopper_load_variants import FP8_LOADS, _edit, absolute_imports, deeper_prefetch
from hopper_variants import print_compile_facts, write_source

PREAMBLE = '''
import torch as _torch
import triton as _triton

_triton.set_allocator(lambda size, alignment, stream: _torch.empty(size, dtype=_torch.int8, device="cuda"))
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
'''

HELPERS = '''

TMA_CHUNKS = gl.constexpr(5)


@gluon.jit
def _raw_buf(raw_smem, c: gl.constexpr):
    RAW_BUF_EXPR


@gluon.jit
def _tail_tile(kv_ptr, row_off, ok):
    """fp8 chunks TMA_CHUNKS .. 8 of a tile as register loads."""
    raw = ()
    for c in gl.static_range(TMA_CHUNKS, NUM_CHUNKS):
        raw = raw + (fp8.load_chunk(kv_ptr, row_off, ok, c), )
    return raw


@gluon.jit
def _issue_head(desc, bar, raw_smem, row0, live):
    """Chunks 0 .. TMA_CHUNKS-1 of the tile starting at cache row ``row0`` into ``raw_smem`` by TMA,
    completing on ``bar``; nothing when not ``live``."""
    mbarrier.expect(bar, TMA_CHUNKS * TILE * 64, pred=live)
    for c in gl.static_range(TMA_CHUNKS):
        tma.async_copy_global_to_shared(desc, [row0, 16 * c], bar, _raw_buf(raw_smem, c), pred=live)

'''


#: The five chunk buffers as slices of one allocation (``tma5``, as timed in step 81: the compiler's
#: shared-memory hazard analysis then puts a barrier between consecutive copies), or as five
#: allocations (``tma5s``, as the value buffers are kept apart for the same reason).
ALLOC = {False: "    raw_smem = gl.allocate_shared_memory(gl.int32, [TMA_CHUNKS if TMA_PATH else 1, TILE, 16], raw_lay)\n",
         True: "    raw_smem = ()\n"
               "    for c in gl.static_range(TMA_CHUNKS if TMA_PATH else 1):\n"
               "        raw_smem = raw_smem + (gl.allocate_shared_memory(gl.int32, [TILE, 16], raw_lay), )\n"}
RAW_BUF = {False: "return raw_smem.index(c)", True: "return raw_smem[c]"}

#: ``tma4one``: chunks 0-3 as one box of a three-dimensional view of the cache (chunk, row, word;
#: strides 16 words, the row stride, 1), so that a tile's staging is one copy, one expect and one
#: wait (``gluon_tma_probe.py``: each round brings its own barriers); read back through a flat view.
ONE_BOX = [
    ("TMA_CHUNKS = gl.constexpr(5)", "TMA_CHUNKS = gl.constexpr(4)"),
    ("    RAW_BUF_EXPR\n",
     "    flat = raw_smem._reinterpret(gl.int32, [TMA_CHUNKS * TILE, 16],\n"
     "                                 gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2))\n"
     "    return flat.slice(TILE * c, TILE, dim=0)\n"),
    ("    for c in gl.static_range(TMA_CHUNKS):\n        tma.async_copy_global_to_shared(desc, [row0, 16 * c], bar, _raw_buf(raw_smem, c), pred=live)\n",
     "    tma.async_copy_global_to_shared(desc, [0, row0, 0], bar, raw_smem, pred=live)\n"),
]
ONE_BOX_KERNEL = [
    ("element_bitwidth=32, rank=2)\n    raw_smem", "element_bitwidth=32, rank=3)\n    raw_smem"),
    ("gl.allocate_shared_memory(gl.int32, [TMA_CHUNKS if TMA_PATH else 1, TILE, 16], raw_lay)",
     "gl.allocate_shared_memory(gl.int32, [TMA_CHUNKS, TILE, 16] if TMA_PATH else [1, TILE, 16], raw_lay)"),
    ("tma.make_tensor_descriptor(kv_ptr, [gl.load(kv_indptr + batch), 144], [kv_stride, 1],\n"
     "                                              [TILE, 16], raw_lay)",
     "tma.make_tensor_descriptor(kv_ptr, [NUM_CHUNKS, gl.load(kv_indptr + batch), 16], [16, kv_stride, 1],\n"
     "                                              [TMA_CHUNKS, TILE, 16], raw_lay)"),
]


#: ``tma4wide``: chunks 0-3 as one box of the two-dimensional view (row, word): 64 rows of 256
#: contiguous bytes instead of ``tma4one``'s 256 rows of 64, read back by slicing the word axis.
#: Why: a copy of ``tma4one``'s box measured slower than one tile (its wait is not the L2
#: prefetch's lateness: ``tma4lds`` with the prefetch three tiles ahead waits as long), and the
#: copy engine moves a box row by row.
WIDE_BOX = [
    ("TMA_CHUNKS = gl.constexpr(5)", "TMA_CHUNKS = gl.constexpr(4)"),
    ("    RAW_BUF_EXPR\n", "    return raw_smem.slice(16 * c, 16, dim=1)\n"),
    ("    for c in gl.static_range(TMA_CHUNKS):\n        tma.async_copy_global_to_shared(desc, [row0, 16 * c], bar, _raw_buf(raw_smem, c), pred=live)\n",
     "    tma.async_copy_global_to_shared(desc, [row0, 0], bar, raw_smem, pred=live)\n"),
]
WIDE_BOX_KERNEL = [
    ("gl.allocate_shared_memory(gl.int32, [TMA_CHUNKS if TMA_PATH else 1, TILE, 16], raw_lay)",
     "gl.allocate_shared_memory(gl.int32, [TILE, 16 * TMA_CHUNKS] if TMA_PATH else [TILE, 16], raw_lay)"),
    ("tma.make_tensor_descriptor(kv_ptr, [gl.load(kv_indptr + batch), 144], [kv_stride, 1],\n"
     "                                              [TILE, 16], raw_lay)",
     "tma.make_tensor_descriptor(kv_ptr, [gl.load(kv_indptr + batch), 144], [kv_stride, 1],\n"
     "                                              [TILE, 16 * TMA_CHUNKS], raw_lay)"),
]

#: ``tail_lds`` (a bound, wrong by design): ``tma4one`` with chunks 4-8 read from a 4 KB shared
#: buffer of zeros instead of register loads (as ``ldsbound`` reads all nine), so that only the TMA
#: copy of chunks 0-3 and the L2 prefetch touch the cache: whether the copy's arrival or the
#: remaining register loads hold ``tma4one`` up.
TAIL_LDS = [
    ("@gluon.jit\ndef _issue_head(",
     "@gluon.jit\ndef _tail_lds(buf, z):\n"
     "    raw = ()\n"
     "    for c in gl.static_range(TMA_CHUNKS, NUM_CHUNKS):\n"
     "        raw = raw + (buf.index(z * c).load(chunk_word_layout(4)), )\n"
     "    return raw\n\n\n@gluon.jit\ndef _issue_head("),
]
TAIL_LDS_KERNEL = [
    ("    tma_bar = gl.allocate_shared_memory(",
     "    zero_buf = gl.allocate_shared_memory(gl.int32, [1, TILE, 16], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))\n"
     "    zero_buf.index(0).store(gl.zeros([TILE, 16], gl.int32, chunk_word_layout(4)))\n"
     "    tma_bar = gl.allocate_shared_memory("),
]


def variant_source(separate: bool = False, one_box: bool = False, tail_lds: bool = False, wide: bool = False) -> str:
    src = absolute_imports(open(shipped.__file__).read())
    src = _edit(src, "from mixmla.kernels.constants import", PREAMBLE + "from mixmla.kernels.constants import")
    src = _edit(src, "from mixmla.kernels.gluon.layouts import (CHUNK,", "from mixmla.kernels.gluon.layouts import (chunk_word_layout, CHUNK,")
    helpers = HELPERS
    for a, b in (WIDE_BOX if wide else ONE_BOX if one_box else []) + (TAIL_LDS if tail_lds else []):
        assert a in helpers, a
        helpers = helpers.replace(a, b)
    src = _edit(src, "\n\n@gluon.jit\ndef _tile_rows(",
                helpers.replace("    RAW_BUF_EXPR\n", "    " + RAW_BUF[separate] + "\n") + "\n@gluon.jit\ndef _tile_rows(")
    src = _edit(src, "    p_all = gl.allocate_shared_memory(",
                "    TMA_PATH: gl.constexpr = (FORMAT == FMT_FP8) and (PAGED == 0)\n"
                "    raw_lay: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)\n"
                + ALLOC[separate] +
                "    tma_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())\n"
                "    mbarrier.init(tma_bar, count=1)\n"
                "    fence_async_shared()\n"
                "    gl.thread_barrier()\n"
                "    phase = 0\n"
                "    p_all = gl.allocate_shared_memory(")
    src = _edit(src, "        kscale = gl.load(fp8_scale_ptr)\n",
                "        kscale = gl.load(fp8_scale_ptr)\n"
                "        if TMA_PATH:\n"
                "            desc = tma.make_tensor_descriptor(kv_ptr, [gl.load(kv_indptr + batch), 144], [kv_stride, 1],\n"
                "                                              [TILE, 16], raw_lay)\n")
    src = _edit(src, "            raw = _load_tile(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok)\n            page = ",
                "            if TMA_PATH:\n"
                "                gl.thread_barrier()  # every thread has read the buffers' previous tile\n"
                "                _issue_head(desc, tma_bar, raw_smem, first_row + t_begin * TILE, t_begin < t_end)\n"
                "                raw = _tail_tile(kv_ptr, row_off, ok)\n"
                "            else:\n"
                "                raw = _load_tile(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok)\n"
                "            page = ")
    src = _edit(src, "                nxt = ()\n",
                "                nxt = ()\n"
                "                if TMA_PATH:\n"
                "                    ok_cur = (t * TILE + gl.arange(0, TILE, layout=gl.SliceLayout(1, chunk_word_layout(4)))) < kv_len\n")
    src = _edit(src, "                    keys = to_key_operand(_decode_chunk(FORMAT, raw[c], tables), ROWS)\n",
                "                    if TMA_PATH:\n"
                "                        if c == 0:\n"
                "                            mbarrier.wait(tma_bar, phase)\n"
                "                            phase = phase ^ 1\n"
                "                        if c < TMA_CHUNKS:\n"
                "                            words = gl.where(ok_cur[:, None], _raw_buf(raw_smem, c).load(chunk_word_layout(4)), 0)\n"
                "                        else:\n"
                "                            words = raw[c - TMA_CHUNKS]\n"
                "                        keys = to_key_operand(_decode_chunk(FORMAT, words, tables), ROWS)\n"
                "                        if c == TMA_CHUNKS - 1:\n"
                "                            gl.thread_barrier()  # every thread has read chunks 0 .. 4\n"
                "                            _issue_head(desc, tma_bar, raw_smem, first_row + (t + 1) * TILE, t + 1 < t_end)\n"
                "                    else:\n"
                "                        keys = to_key_operand(_decode_chunk(FORMAT, raw[c], tables), ROWS)\n")
    for a, b in (WIDE_BOX_KERNEL if wide else ONE_BOX_KERNEL if one_box else []) + (TAIL_LDS_KERNEL if tail_lds else []):
        src = _edit(src, a, b)
    assert len(FP8_LOADS.findall(src)) == 1
    src = FP8_LOADS.sub("                if FORMAT == FMT_FP8:\n"
                         "                    if TMA_PATH:\n"
                         "                        raw = _tail_tile(kv_ptr, row_off, ok)\n"
                         "                    else:\n"
                         "                        raw = _load_tile(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok)\n", src)
    if tail_lds:
        assert src.count("raw = _tail_tile(kv_ptr, row_off, ok)") == 2
        src = src.replace("raw = _tail_tile(kv_ptr, row_off, ok)", "raw = _tail_lds(zero_buf, _opaque_zero(t_begin))")
    return src


def write_variant(outdir: str, separate: bool = False, one_box: bool = False, tail_lds: bool = False,
                  pf3: bool = False, wide: bool = False) -> str:
    """Writes the variant; ``pf3``: with the L2 prefetch three tiles ahead (``deeper_prefetch``),
    so that a copy issued one tile ahead finds its rows in L2 sooner."""
    one_box = one_box or tail_lds  # the bound is taken of the one-box copy (or the wide one)
    name = "var_tma4wide" if wide else "var_tma4one" if one_box else "var_tma5s" if separate else "var_tma5"
    if tail_lds:
        name = "var_tma4lds" if name == "var_tma4one" else name + "lds"
    src = variant_source(separate, one_box, tail_lds, wide)
    return write_source(outdir, name + ("_pf3" if pf3 else "") + ".py", deeper_prefetch(src) if pf3 else src)


if __name__ == "__main__":
    out = write_variant(sys.argv[1] if len(sys.argv) > 1 else "bench/out/tma5", separate="--separate" in sys.argv,
                        one_box="--one-box" in sys.argv, tail_lds="--tail-lds" in sys.argv,
                        pf3="--pf3" in sys.argv, wide="--wide" in sys.argv)
    print(out)
    if "--compile" in sys.argv:
        print_compile_facts(out, [(1, 0), (1, 1), (2, 0)], ops=("LDG", "LDS", "UTMALDG", "SYNCS", "BAR"))
