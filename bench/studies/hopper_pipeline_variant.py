"""The Hopper kernel with its tile loop software-pipelined across tiles (design log step 75), written
as a text edit of the shipped ``kernels/gluon/decode.py`` so that it differs from it in that one
idea. ``write_variant(outdir)`` writes ``var_pipe.py`` there and returns its path; time it with
``hopper_variants.py OUT DIR/var_pipe.py`` (outputs compared bitwise with the shipped kernel's).

Shipped: per tile, decode the nine chunks (score product issued chunk by chunk), softmax, then
issue the eight value products; issuing them stalls the warps for about as long as the tensor
cores take (the ``value issue`` phase of ``hopper_timeline.py``, 700-850 cycles per tile), and the
next tile's decode waits for them. Here iteration t runs the softmax of tile t, then for each
chunk c issues tile t's value product of chunk c, decodes tile t+1's chunk c while it runs, waits
for it (it reads the value buffer chunk c is stored into), stores the chunk and issues its score
product. Tile t_begin is decoded before the loop and the last tile's value products are issued
after it. Both formats load the tile after next chunk by chunk during the decode (the shipped
fp8 loads its next tile after the maximum). A piece with no tile runs the prologue and the
epilogue on masked tiles (every score -inf), which leaves its state as it was.

Step 34 (second session) tried the same order in an older kernel and spilled; ``--compile`` shows
this one's registers and spills for both formats on any machine.
"""

import sys

import mixmla.kernels.gluon.decode as shipped

from hopper_load_variants import _edit, absolute_imports
from hopper_variants import print_compile_facts, write_source

HELPERS = '''

@gluon.jit
def _decode_into(FORMAT: gl.constexpr, raw_c, tables, ROWS: gl.constexpr):
    return to_key_operand(_decode_chunk(FORMAT, raw_c, tables), ROWS)


@gluon.jit
def _softmax_tile(st, t, t_begin, kv_len, last_visible, qk, m_i, l_acc, red_smem, r_s, ROWS: gl.constexpr):
    """(p, alpha, l_acc, m_i) of tile t's scores st; rows of tiles before t_begin are not visible
    (the epilogue of an empty piece)."""
    pos = t * TILE + r_s
    visible = (pos[:, None] < kv_len) & (pos[:, None] <= last_visible[None, :]) & (t >= t_begin)
    s = gl.where(visible, st * qk[None, :], float("-inf"))
    m_new = gl.maximum(m_i, _tile_max(s, red_smem, ROWS))
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s - m_safe[None, :])
    alpha = gl.exp2(m_i - m_safe)
    return p, alpha, l_acc * alpha[None, :] + p, m_new

'''

OLD_LOOP_START = "            for t in range(t_begin, t_end):\n                # The value product of the previous tile still reads the value buffers.\n"
OLD_LOOP_END = "            acc = warpgroup_mma_wait(0, deps=acc)\n            inv_l, lse2 = _finish("

NEW_LOOP = '''            acc = warpgroup_mma_wait(0, deps=acc)  # the loop carries plain tensors
            # Prologue: tile t_begin decoded, its values stored, its score product issued; tile
            # t_begin + 1 loaded chunk by chunk meanwhile.
            row_off, sc_off, ok = _tile_rows(FORMAT, PAGED, first_row, kv_len, t_begin + 1, t_begin + 1 < t_end, page,
                                             num_pages, page_shift, kv_stride, sc_stride)
            nxt = ()
            for c in gl.static_range(NUM_CHUNKS):
                keys = _decode_into(FORMAT, raw[c], tables, ROWS)
                nxt = nxt + (_load_chunk(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok, c), )
                if c < VALUE_CHUNKS:
                    v_bufs[c].index(0).store(keys)
                q_c = q_smem.index(c + _opaque_zero(t_begin))
                st = warpgroup_mma(keys, q_c.permute((1, 0)), st, use_acc=c > 0, is_async=True)
                if c > 0:
                    st = warpgroup_mma_wait(1, deps=(st, ))
            raw = nxt
            for t in range(t_begin, t_end - 1):
                st = warpgroup_mma_wait(0, deps=(st, ))
                pg = _tile_pages(FORMAT, PAGED, pages_ptr, first_row, kv_len, t + 2, t + 2 < t_end, page_shift)
                row_off, sc_off, ok = _tile_rows(FORMAT, PAGED, first_row, kv_len, t + 2, t + 2 < t_end, pg,
                                                 num_pages, page_shift, kv_stride, sc_stride)
                if PAGED == 0:
                    _prefetch_tile(FORMAT, PAGED, kv_ptr, first_row, kv_len, t + 3, t + 3 < t_end, pg, num_pages,
                                   page_shift, kv_stride)
                p, alpha, l_acc, m_i = _softmax_tile(st, t, t_begin, kv_len, last_visible, qk, m_i, l_acc, red_smem,
                                                     r_s, ROWS)
                scaled = ()
                for c in gl.static_range(VALUE_CHUNKS):
                    scaled = scaled + (acc[c] * alpha[None, :], )
                z = _opaque_zero(t)
                p_smem = p_all.index(z)
                p_smem.store(p.to(MMA_DT))
                fence_async_shared()
                # Tile t's value product of chunk c runs while tile t+1's chunk c decodes; it reads
                # the value buffer that chunk is stored into, so it is waited for before the store.
                nxt = ()
                acc = ()
                for c in gl.static_range(NUM_CHUNKS):
                    if c < VALUE_CHUNKS:
                        acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c],
                                                   is_async=True), )
                    keys = _decode_into(FORMAT, raw[c], tables, ROWS)
                    nxt = nxt + (_load_chunk(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok, c), )
                    if c < VALUE_CHUNKS:
                        done = warpgroup_mma_wait(0, deps=acc + (st, ))
                        acc = ()
                        for i in gl.static_range(c + 1):
                            acc = acc + (done[i], )
                        st = done[c + 1]
                        v_bufs[c].index(z).store(keys)
                    q_c = q_smem.index(c + z)
                    st = warpgroup_mma(keys, q_c.permute((1, 0)), st, use_acc=c > 0, is_async=True)
                st = warpgroup_mma_wait(1, deps=(st, ))  # returns at once; the prologue's type for the loop
                raw = nxt
            # Epilogue: the last tile's softmax and value product.
            st = warpgroup_mma_wait(0, deps=(st, ))
            t = t_end - 1
            p, alpha, l_acc, m_i = _softmax_tile(st, t, t_begin, kv_len, last_visible, qk, m_i, l_acc, red_smem, r_s,
                                                 ROWS)
            scaled = ()
            for c in gl.static_range(VALUE_CHUNKS):
                scaled = scaled + (acc[c] * alpha[None, :], )
            z = _opaque_zero(t_end)
            p_smem = p_all.index(z)
            p_smem.store(p.to(MMA_DT))
            fence_async_shared()
            acc = ()
            for c in gl.static_range(VALUE_CHUNKS):
                acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c], is_async=True), )
'''


def variant_source() -> str:
    src = absolute_imports(open(shipped.__file__).read())
    start = src.index(OLD_LOOP_START)
    end = src.index(OLD_LOOP_END)
    assert src.count(OLD_LOOP_START) == 1 and src.count(OLD_LOOP_END) == 1 and start < end
    src = src[:start] + NEW_LOOP + src[end:]
    return _edit(src, "\n\n@gluon.jit\ndef _tile_rows(", HELPERS + "\n@gluon.jit\ndef _tile_rows(")


def write_variant(outdir: str) -> str:
    return write_source(outdir, "var_pipe.py", variant_source())


if __name__ == "__main__":
    out = write_variant(sys.argv[1] if len(sys.argv) > 1 else "bench/out/pipe")
    print(out)
    if "--compile" in sys.argv:
        print_compile_facts(out, [(1, 0), (1, 1), (2, 0), (2, 1)])
