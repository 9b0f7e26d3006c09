# Writes the three ablation variants of round 2 from the Hopper kernel of commit 12f29b5
# (src/mixmla/kernels/gluon/decode.py at that commit; run from a checkout of it, repo root).
import sys; sys.path.insert(0, "bench/studies")
from hopper_load_variants import absolute_imports
src = absolute_imports(open("src/mixmla/kernels/gluon/decode.py").read())
def edit(s, a, b):
    assert s.count(a) == 1, a
    return s.replace(a, b)
# nomerge: the last program resets the count but merges nothing (upper bound of a faster merge)
nm = edit(src, """                    _fence_gpu()
                    _merge_parts(part_o_ptr, part_lse_ptr, out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt, q_lo,
                                 q_len, first, nparts, start_b, num_programs, total, H, ROWS, WRITE_LSE)
""", "")
open(".trees/gen/var_nomerge.py", "w").write(nm)
p8 = edit(src, "    PARTS: gl.constexpr = 4\n", "    PARTS: gl.constexpr = 8\n")
open(".trees/gen/var_parts8.py", "w").write(p8)
# nopart: no partial stores, no count (each piece writes its output directly: wrong results, timing only)
npart = edit(src, "            if nparts == 1:\n                out_rows", "            if True:\n                out_rows")
open(".trees/gen/var_nopart.py", "w").write(npart)
