"""The shipped MXFP4 tile loop's matrix-descriptor arithmetic (twenty-seventh session, CPU only):
text edits of ``kernels/gluon/decode.py`` that try to build the ``wgmma`` shared-memory
descriptors with fewer uniform-datapath instructions, for ``hopper_variants.py``.

The shipped loop (16 heads, contiguous, sm_90a) has 1320 SASS instructions per thread and tile, 173
of them uniform (``UIADD3`` 96, ``UMOV`` 36, ``USHF`` 19, ``USGXT`` 18, ``UISETP`` 2, ``ULEA``,
``UIMAD``): 85 around the 36 score products, 88 around the 32 value products. Triton 3.6 lowers
every ``warpgroup_mma`` operand in shared memory to its own descriptor chain: the view's address,
``bfe.u32 (addr >> 4), 14 bits``, zero-extended to 64 bits, ``or`` the constant upper word for the
first k step and a 64-bit ``add`` of a constant for each later k step. ptxas turns that into
about nine uniform instructions per call of four products (address add, shift, extract, the upper
word's move, a carried 64-bit add for the second step, 64-bit adds for the others). The k steps of
one call (and its M repetitions) are advanced by constants in descriptor space; a new view (a new
chunk, whether by ``.index`` or ``.slice``) is always rebuilt from its address. So the only lever
in Gluon is fewer ``warpgroup_mma`` calls over larger views:

- ``zero1``: one ``_opaque_zero(t)`` per tile for every view (the compiler already shares it).
- ``qslice``: the query in one (1, 256, 64) buffer (rows padded to a power of two), one opaque
  per-tile view of it, chunk c as ``.slice(16 c, 16)``.
- ``vone``: the value tile in one (8, TILE, 64) buffer, chunk c as ``.index(c)`` (stores) and
  ``.index(c + z)`` (products), eight products as shipped.
- ``vwide``: the value tile in one (1, TILE, 512) buffer, stored by column slices; the eight
  value products as one ``warpgroup_mma`` of M = 512 (one accumulator of (512, 16), the same 64
  registers): 32 products off one descriptor. The output rows are then ``64 (k // 64) +
  chunk_column(k % 64)`` and ``_write_request`` writes one accumulator.
- ``valias``: ``vwide``'s one product, but the stores go to the eight separate buffers as shipped
  and the product reads a (1, TILE, 512) ``_reinterpret`` of the first. Correct only while the
  allocator places the eight buffers contiguously in order (it does: ``--checks`` verifies it in
  every compiled form from the stores' offsets); the tile's other barriers (the one before the
  first value store, the one after P^T's store and fence) order every buffer's accesses.
- ``qpair``: the score products two chunks per call (K = 128: the keys of chunks c - 1 and c
  joined into one A operand, which is a relabelling, ``assert_trivial``); the query in (5, 16,
  128) pairs of chunks, the same bytes as (9, 16, 64). Four calls of eight products and one of four.
- ``valias_qpair``: both.
- ``hoisted``: no opaque index at all (reference: what the compiler does with invariant views).

Each variant computes the same products in the same order (per accumulator the same k steps), so
its outputs should be the shipped kernel's bits (``hopper_variants.py`` checks ``same``).

Found (``--compile``; 16 heads, 256 requests, contiguous, C0 = 1; uniform = every ``U*`` opcode
of the loop; non-uniform change = the loop's other opcodes against the shipped loop's):

| variant | regs | spill B | shared B | loop | uniform | UIADD3 | UMOV | USHF | USGXT | R2UR | BAR | HGMMA | WARPGROUP | non-uniform change |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
| shipped | 255 | 4 | 86528 | 1320 | 173 | 96 | 36 | 19 | 18 | 0 | 3 | 68 | 27 | |
| zero1 | 255 | 4 | 86528 | 1320 | 173 | 96 | 36 | 19 | 18 | 0 | 3 | 68 | 27 | none (same loop) |
| qslice | 255 | 4 | 100864 | 1321 | 174 | 96 | 36 | 19 | 18 | 0 | 3 | 68 | 27 | none |
| vone | 255 | 0 | 86528 | 1339 | 184 | 96 | 46 | 19 | 18 | 0 | 10 | 68 | 27 | BAR +7, SHF +1 |
| vwide | 255 | 0 | 86528 | 1310 | 162 | 89 | 46 | 12 | 11 | 0 | 10 | 68 | 20 | BAR +7, WARPGROUP -7, MOV +1 |
| valias | 255 | 4 | 86528 | 1301 | 161 | 89 | 45 | 12 | 11 | 0 | 3 | 68 | 20 | WARPGROUP -7 |
| qpair | 255 | 36 | 88576 | 1297 | 154 | 92 | 28 | 15 | 14 | 0 | 3 | 68 | 19 | WARPGROUP -8, IMAD +3, LOP3 +1, S2R +1, VIADD -1 |
| valias_qpair | 255 | 36 | 88576 | 1273 | 137 | 85 | 32 | 8 | 7 | 0 | 3 | 68 | 12 | WARPGROUP -15, IMAD +3, LOP3 +1, S2R +1, VIADD -1 |
| hoisted | 255 | 284 | 86528 | 1365 | 71 | 12 | 59 | 0 | 0 | 77 | 3 | 68 | 27 | LDL +34 (spills in the loop), IMAD +14, MOV +7, LDC +6, ... |

So the uniform count cannot be brought well under 100 in Gluon on Triton 3.6: one M = 512 value
call takes the value side from 88 to 62 (about 1.2 per product: a 64-bit add per A descriptor
and two moves per M block to place the shared B descriptor), K = 128 score calls take a pair of
chunks from about 19 to 15; the floor of this lowering is one add per product plus about four per
call. A single value buffer brings back seven barriers per tile (the hazard analysis treats
static slices of one allocation as conflicting), hence ``valias``. ``qpair``'s extra key
registers cost 32 more bytes of spill, outside the tile loop (no local memory in it).

``--checks valias,qpair,valias_qpair`` (all 24 MXFP4 specializations: BLOCK_B 128-1024, WRITE_LSE,
contiguous, block table, CSR): every check passes, 255 registers, the value buffers contiguous in
every form; the tile loop against the shipped one of the same specialization: ``valias`` -19 to
-21 instructions (spill bytes as shipped, 0-64), ``qpair`` -8 to -24, ``valias_qpair`` -32 to -48
(spill 16-100 bytes where shipped has 0-64, all outside the tile loop).

    TRITON_INTERPRET=0 PYTHONPATH=src:bench/studies python bench/studies/hopper_desc_variants.py OUTDIR --compile
    TRITON_INTERPRET=0 PYTHONPATH=src:bench/studies python bench/studies/hopper_desc_variants.py OUTDIR --checks valias_qpair
    python bench/studies/hopper_variants.py OUT OUTDIR/var_valias_qpair.py OUTDIR/var_valias.py OUTDIR/var_qpair.py   # GPU

``--checks NAME,..`` compiles each named variant for every MXFP4 specialization ``decode`` serves
(``launch.shipped_specs``) and asserts what ``tests/test_hopper_compile.py`` asserts of the shipped
ones (two programs per SM fit, 68 ``wgmma`` all in the tile loop, no local memory in it, the value
tile stored by ``stmatrix``, no copies or scratch), and for the ``valias`` forms that the eight value
buffers lie contiguously in order.
"""

import collections
import os
import re
import sys

import mixmla.kernels.gluon.decode as shipped

from hopper_load_variants import absolute_imports, inline_softmax

def _edit(src, old, new):
    if src.count(old) != 1:
        raise SystemExit(f"hopper_desc_variants: edit anchor found {src.count(old)} times (not once) in "
                         f"decode.py, the shipped source changed: {old!r}")
    at = src.index(old)
    if old.startswith(" ") and at and src[at - 1] != "\n":
        raise SystemExit(f"hopper_desc_variants: edit anchor not at a line start: {old!r}")
    return src.replace(old, new)


def _base():
    return inline_softmax(absolute_imports(open(shipped.__file__).read())) + '\n\nFORMATS = ("mxfp4", )\n'


LOOP_TOP = "            for t in range(t_begin, t_end):\n"
Z_LINE = "                z = _opaque_zero(t)\n"
Q_VIEW = "                    q_c = q_smem.index(c + _opaque_zero(t))\n"
Q_ALLOC = "    q_smem = gl.allocate_shared_memory(MMA_DT, [NUM_CHUNKS, ROWS, CHUNK], q_layout())\n"
Q_STAGE = "            q_mult = _stage_query(FORMAT, q_smem, q_rows, ROWS)\n"
Q_STORES = ("            q_smem.index(c).store((chunks[c]", "            q_smem.index(c).store(chunks[c])")
V_ALLOC = """    v_bufs = ()
    for c in gl.static_range(VALUE_CHUNKS):
        v_bufs = v_bufs + (gl.allocate_shared_memory(MMA_DT, [1, TILE, CHUNK], v_layout()), )
"""
V_STORE = "                        v_bufs[c].index(0).store(keys)\n"
V_PRODUCTS = """                acc = ()
                for c in gl.static_range(VALUE_CHUNKS):
                    acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c], is_async=True), )
"""


def zero1(src):
    src = _edit(src, Z_LINE, "")
    src = _edit(src, LOOP_TOP, LOOP_TOP + Z_LINE)
    return _edit(src, Q_VIEW, "                    q_c = q_smem.index(c + z)\n")


def qslice(src):
    src = _edit(src, Q_ALLOC, "    q_all = gl.allocate_shared_memory(MMA_DT, [1, 16 * ROWS, CHUNK], q_layout())\n")
    src = _edit(src, Q_STAGE, "            q_mult = _stage_query(FORMAT, q_all.index(0), q_rows, ROWS)\n")
    for old in Q_STORES:
        src = _edit(src, old, old.replace("q_smem.index(c)", "q_smem.slice(ROWS * c, ROWS)"))
    src = _edit(src, Z_LINE, "")
    src = _edit(src, LOOP_TOP, LOOP_TOP + Z_LINE + "                q_t = q_all.index(z)\n")
    return _edit(src, Q_VIEW, "                    q_c = q_t.slice(ROWS * c, ROWS)\n")


def vone(src):
    src = _edit(src, V_ALLOC, "    v_all = gl.allocate_shared_memory(MMA_DT, [VALUE_CHUNKS, TILE, CHUNK], v_layout())\n")
    src = _edit(src, V_STORE, "                        v_all.index(c).store(keys)\n")
    return _edit(src, "warpgroup_mma(v_bufs[c].index(z).permute((1, 0))", "warpgroup_mma(v_all.index(c + z).permute((1, 0))")


WIDE_COLUMNS = '''@gluon.jit
def _wide_columns(ROWS: gl.constexpr):
    """Output column of each row of the one (VALUE_DIM, ROWS) value accumulator: 64-column chunks
    in order, each in ``chunk_column`` order."""
    k = gl.arange(0, VALUE_DIM, layout=gl.SliceLayout(1, score_layout(ROWS)))
    return (k - (k & (CHUNK - 1))) + chunk_column(k & (CHUNK - 1))


WIDE_COLUMNS = gl.constexpr((0, ))


'''


def vwide(src):
    src = _edit(src, V_ALLOC, "    v_all = gl.allocate_shared_memory(MMA_DT, [1, TILE, VALUE_DIM], v_layout())\n")
    src = _edit(src, V_STORE, "                        v_all.index(0).slice(CHUNK * c, CHUNK, dim=1).store(keys)\n")
    src = _edit(src, """            acc = ()
            for c in gl.static_range(VALUE_CHUNKS):
                acc = acc + (warpgroup_mma_init(gl.zeros([CHUNK, ROWS], gl.float32, acc_l)), )
""", "            acc = (warpgroup_mma_init(gl.zeros([VALUE_DIM, ROWS], gl.float32, acc_l)), )\n")
    # A wait on one dependency returns it bare.
    src = _edit(src, "                acc = warpgroup_mma_wait(0, deps=acc)\n",
                "                acc = (warpgroup_mma_wait(0, deps=acc), )\n")
    src = _edit(src, "            acc = warpgroup_mma_wait(0, deps=acc)\n", "            acc = (warpgroup_mma_wait(0, deps=acc), )\n")
    src = _edit(src, """                for c in gl.static_range(VALUE_CHUNKS):
                    scaled = scaled + (acc[c] * alpha[None, :], )
""", "                scaled = (acc[0] * alpha[None, :], )\n")
    src = _edit(src, V_PRODUCTS,
                "                acc = (warpgroup_mma(v_all.index(z).permute((1, 0)), p_smem, scaled[0], is_async=True), )\n")
    src = _edit(src, "    dcol = chunk_column(gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_l)))\n",
                "    dcol = _wide_columns(ROWS)\n")
    src = _edit(src, "_write_request(acc, inv_l, lse2, kscale, n, dcol, CHUNK_COLUMNS,",
                "_write_request(acc, inv_l, lse2, kscale, n, dcol, WIDE_COLUMNS,")
    src = _edit(src, "@gluon.jit\ndef _tile_max(", WIDE_COLUMNS + "@gluon.jit\ndef _tile_max(")
    for old in ("        for c in gl.static_range(VALUE_CHUNKS):\n            gl.store(out_rows[None, :]",
                "        for c in gl.static_range(VALUE_CHUNKS):\n            gl.store(part_rows[None, :]"):
        src = _edit(src, old, old.replace("gl.static_range(VALUE_CHUNKS)", "gl.static_range(len(COLUMNS))"))
    return src


def valias(src):
    src = vwide(src)
    src = _edit(src, "    v_all = gl.allocate_shared_memory(MMA_DT, [1, TILE, VALUE_DIM], v_layout())\n", V_ALLOC + """\
    # The eight buffers as one (1, TILE, 512) view for the one value product: the allocator places
    # them contiguously in order (hopper_desc_variants.py --checks verifies it).
    v_all = v_bufs[0]._reinterpret(MMA_DT, [1, TILE, VALUE_DIM], v_layout())
""")
    return _edit(src, "                        v_all.index(0).slice(CHUNK * c, CHUNK, dim=1).store(keys)\n", V_STORE)


SCORE = """                    q_c = q_smem.index(c + _opaque_zero(t))
                    st = warpgroup_mma(keys, q_c.permute((1, 0)), st,
                                       use_acc=c > 0, is_async=True)
                    if c > 0:
                        st = warpgroup_mma_wait(1, deps=(st, ))
"""
SCORE_PAIRS = """                    if c % 2 == 0 and c + 1 < NUM_CHUNKS:
                        held = keys
                    else:
                        if c % 2 == 1:
                            # Chunks c - 1 and c as one K = 128 operand, chunk c - 1's columns first.
                            pair = gl.reshape(gl.permute(gl.join(held, keys), (0, 2, 1)), [TILE, 2 * CHUNK])
                            keys = gl.convert_layout(pair, gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2),
                                                     assert_trivial=True)
                            q_c = q_pairs.index(c // 2 + _opaque_zero(t))
                        else:
                            q_c = q_pairs.index(c // 2 + _opaque_zero(t)).slice(0, CHUNK, dim=1)
                        st = warpgroup_mma(keys, q_c.permute((1, 0)), st, use_acc=c > 1, is_async=True)
                        if c > 1:
                            st = warpgroup_mma_wait(1, deps=(st, ))
"""


def qpair(src):
    src = _edit(src, Q_ALLOC,
                "    q_pairs = gl.allocate_shared_memory(MMA_DT, [(NUM_CHUNKS + 1) // 2, ROWS, 2 * CHUNK], q_layout())\n")
    src = _edit(src, Q_STAGE, "            q_mult = _stage_query(FORMAT, q_pairs, q_rows, ROWS)\n")
    for old in Q_STORES:
        src = _edit(src, old, old.replace("q_smem.index(c)", "q_smem.index(c // 2).slice(CHUNK * (c % 2), CHUNK, dim=1)"))
    return _edit(src, SCORE, SCORE_PAIRS)


def hoisted(src):
    src = _edit(src, Q_VIEW, "                    q_c = q_smem.index(c)\n")
    return _edit(src, Z_LINE, "                z = 0\n")


VARIANTS = {
    "zero1": (zero1, ),
    "qslice": (qslice, ),
    "vone": (vone, ),
    "vwide": (vwide, ),
    "valias": (valias, ),
    "qpair": (qpair, ),
    "valias_qpair": (valias, qpair),
    "hoisted": (hoisted, ),
}


def variant_sources() -> dict:
    out = {}
    for name, edits in VARIANTS.items():
        src = _base()
        for edit in edits:
            src = edit(src)
        out[name] = src
    return out


def write_variants(outdir: str) -> dict:
    from hopper_variants import write_source

    return {name: write_source(outdir, f"var_{name}.py", src) for name, src in variant_sources().items()}


# --- compile facts (any machine) -------------------------------------------------------------

OPS = ("UIADD3", "UMOV", "USHF", "USGXT", "R2UR", "BAR", "HGMMA", "WARPGROUP")


def _loop(kernel):
    from mixmla.kernels.gluon import sass
    from mixmla.kernels.nvtools import cuobjdump

    return sass.hot_loop(sass.parse_sass(cuobjdump(kernel.asm["cubin"], "-sass")))


def loop_facts(kernel) -> dict:
    from mixmla.kernels.gluon import sass

    f = sass.kernel_facts(kernel)
    ops = f.loop_ops
    return {"registers": f.registers, "spill": f.spill_bytes, "shared": f.shared, "loop": f.loop_instructions,
            "loop_local": f.loop_local, "uniform": sum(n for o, n in ops.items() if o.startswith("U")),
            **{o: ops[o] for o in OPS},
            "nonuniform": collections.Counter({o: n for o, n in ops.items() if not o.startswith("U") and o != "R2UR"})}


def _spec(**kw):
    from mixmla.kernels.gluon.compile import KernelSpec

    return KernelSpec(**{**dict(H=16, ROWS=16, FORMAT=2, BLOCK_B=256, C0=1, WRITE_LSE=False), **kw})


def _compile(path, spec):
    from hopper_variants import compile_variant, load_module

    return compile_variant(load_module(path).mla_decode_hopper_kernel, spec)


def print_table(paths: dict):
    from mixmla.kernels.gluon.compile import compile_decode

    rows = {"shipped": loop_facts(compile_decode(_spec()))}
    for name, path in paths.items():
        rows[name] = loop_facts(_compile(path, _spec()))
    cols = ["registers", "spill", "shared", "loop", "loop_local", "uniform", *OPS]
    print("| variant | " + " | ".join(cols) + " | non-uniform change |")
    print("|" + "---|" * (len(cols) + 2))
    base = rows["shipped"]["nonuniform"]
    for name, r in rows.items():
        diff = {o: r["nonuniform"][o] - base[o] for o in sorted(set(base) | set(r["nonuniform"]))
                if r["nonuniform"][o] != base[o]}
        print(f"| {name} | " + " | ".join(str(r[c]) for c in cols) + " | "
              + (", ".join(f"{o} {d:+d}" for o, d in diff.items()) if diff else "none") + " |", flush=True)


# --- the repository's compile checks, on a variant ------------------------------------------

def _value_buffers_contiguous(kernel):
    """The eight value chunks' stores (4 ``stmatrix`` each, the loop's first 32) at one offset per
    chunk, rising by 8 KB (64 tokens x 64 bf16) from chunk to chunk."""
    stsm = [t for t in _loop(kernel) if t.startswith("STSM")][:32]
    offs = []
    for t in stsm:
        m = re.search(r"\[R\d+(?:\+(0x[0-9a-f]+))?\]", t)
        offs.append(int(m.group(1) or "0", 16) if m else None)
    per_chunk = [sorted(set(offs[4 * c:4 * c + 4])) for c in range(8)]
    return (all(len(p) == 1 for p in per_chunk)
            and all(per_chunk[c][0] - per_chunk[0][0] == 8192 * c for c in range(8)))


def _check_one(job):
    path, spec, alias = job
    from mixmla.kernels.gluon.sass import kernel_facts

    if path is None:  # the shipped kernel, for comparison
        from mixmla.kernels.gluon.compile import compile_decode

        f = kernel_facts(compile_decode(spec))
        return spec, f.registers, f.spill_bytes, f.loop_instructions, []
    k = _compile(path, spec)
    f = kernel_facts(k)
    ptx = k.asm["ptx"]
    problems = []
    if 2 * 128 * f.registers > 65536:
        problems.append(f"{f.registers} registers")
    if 2 * (f.shared + 1024) > 233472:
        problems.append(f"shared {f.shared}")
    if ptx.count("wgmma.mma_async") != 68 or f.loop_ops["HGMMA"] != 68:
        problems.append(f"wgmma {ptx.count('wgmma.mma_async')}, loop HGMMA {f.loop_ops['HGMMA']}")
    if f.loop_local:
        problems.append(f"{f.loop_local} local-memory instructions in the tile loop")
    if ptx.count("stmatrix.sync.aligned") < 32 or ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"):
        problems.append("value tile not stored by stmatrix")
    if (ptx.count("cp.async.bulk.tensor") or ptx.count("cp.async.cg.shared.global") or ptx.count("setmaxnreg")
            or ptx.count("cp.async.bulk.prefetch.L2.global") or k.metadata.global_scratch_size):
        problems.append("copies, prefetch, setmaxnreg or scratch")
    if alias and not _value_buffers_contiguous(k):
        problems.append("value buffers not contiguous in order: the (1, TILE, 512) view is wrong")
    return spec, f.registers, f.spill_bytes, f.loop_instructions, problems


def run_checks(paths: dict, names):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from mixmla.kernels.gluon.compile import staged
    from mixmla.kernels.gluon.launch import shipped_specs

    specs = [s for s in shipped_specs() if s.FORMAT == 2 and not staged(s)]
    failed = False
    shipped_loop = {}
    for name in ["shipped"] + list(names):
        jobs = [(paths.get(name), s, "valias" in name) for s in specs]
        with ProcessPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1)),
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            results = list(pool.map(_check_one, jobs))
        bad = [(s, p) for s, _, _, _, p in results if p]
        failed |= bool(bad)
        regs = sorted({r for _, r, _, _, _ in results})
        spills = sorted({sp for _, _, sp, _, _ in results})
        loops = sorted({lp for _, _, _, lp, _ in results})
        if name == "shipped":
            shipped_loop = {s: lp for s, _, _, lp, _ in results}
            print(f"shipped: {len(results)} MXFP4 specializations, registers {regs}, spill bytes {spills}, "
                  f"loop instructions {loops}", flush=True)
            continue
        delta = sorted({lp - shipped_loop[s] for s, _, _, lp, _ in results})
        print(f"{name}: {len(results)} MXFP4 specializations, registers {regs}, spill bytes {spills}, "
              f"loop instructions {loops} (against shipped, same specialization: {delta}): "
              + ("all checks pass" if not bad else f"{len(bad)} fail"), flush=True)
        for s, p in bad:
            print(f"  {s}: {'; '.join(p)}")
    return not failed


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    outdir = args[0] if args else "bench/out/desc"
    paths = write_variants(outdir)
    print("\n".join(paths.values()))
    if "--compile" in sys.argv or "--checks" in sys.argv:
        from mixmla import interpreter

        if interpreter.active():
            sys.exit("Gluon does not compile under Triton's interpreter, which importing mixmla turns on without "
                     "CUDA: run with TRITON_INTERPRET=0")
    if "--compile" in sys.argv:
        print_table(paths)
    if "--checks" in sys.argv:
        i = sys.argv.index("--checks")
        names = sys.argv[i + 1].split(",") if i + 1 < len(sys.argv) and not sys.argv[i + 1].startswith("--") else [
            "valias", "qpair", "valias_qpair"]
        sys.exit(0 if run_checks(paths, names) else 1)
