"""GPU time of Hopper-kernel variants against the shipped one, same inputs, same run.

``python bench/studies/hopper_variants.py OUTDIR MODULE [MODULE ...] [--paged 1,64]``: each MODULE
is a module name under ``mixmla.kernels.gluon`` or a ``.py`` path, defining ``mla_decode_hopper_kernel`` with the
shipped signature (a copy of decode.py with one change, or a package holding such a copy); it may
declare NUM_WARPS, MAX_REGISTERS and PROGRAMS_PER_SM for its compile and grid (``_decoder``).
``--shapes 256x8192,...`` replaces the default shapes. ``--paged`` also times, on the shapes of at least ``PAGED_MIN_TOKENS`` cached tokens, each kernel
reading the same batch through a block table of shuffled pages of each listed size
(``mixmla.paged.scatter_to_pages``; rows no request owns decode to NaN). Checks: the strict check
against the reference where it is affordable, a variant's output bitwise the shipped one's
(``same``; ``vs shipped``: the relative L2 distance from it, for variants that sum in
another order; for contiguous fp8 the shipped kernel is ``decode_tma``'s, whose bits a ``decode.py`` variant does not have), and a paged output bitwise the same kernel's contiguous one (``paged bits``). Prints a
table, writes OUTDIR/variants.json.

``python bench/studies/hopper_variants.py --safety MODULE [MODULE ...]``: instead, each kernel on
inputs that take a fast path's assumptions away (``safety``: scores rising and falling across tiles,
block exponents far from 0): the strict check and NaN rows.
"""

import dataclasses
import importlib
import importlib.util
import json
import os
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

from mixmla.formats import as_cache
from mixmla.harness.timing import L2Flusher, gpu_time
from mixmla.inputs import generate_input
from mixmla.kernels.gluon import compile as gcompile
from mixmla.kernels.gluon.launch import PROGRAMS_PER_SM, HopperDecoder
from mixmla.paged import scatter_to_pages
from mixmla.reference import default_sm_scale, mla_decode_reference
from mixmla.check import check_strict

SHAPES = [(256, 8192), (64, 8192), (32, 1024), (4, 1024)]
PAGED_MIN_TOKENS = 1 << 19


def compile_variant(fn, spec, num_warps=gcompile.NUM_WARPS, max_registers=gcompile.MAX_REGISTERS,
                    signature=None, cooperative=True):
    """``fn`` compiled for ``spec`` as ``gcompile.compile_decode`` compiles the shipped kernel;
    ``signature``: the variant's own argument list (default the shipped one), whose constexprs
    are taken from ``spec``."""
    signature = dict(signature or gcompile.SIGNATURE)
    names = list(signature)
    attrs = {(names.index(n), ): [["tt.divisibility", d]] for n, d in gcompile.DIVISIBILITY.items() if n in names}
    constexprs = {k: v for k, v in spec.constexprs().items() if k in signature}
    src = GluonASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "maxnreg": max_registers,
                                   "launch_cooperative_grid": cooperative})


def write_source(outdir, name, src):
    """Writes a variant's source ``src`` as ``outdir/name``; returns the path."""
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, name)
    open(path, "w").write(src)
    return path


def print_compile_facts(path, cases, ops=()):
    """Compiles the variant at ``path`` for each ``(FORMAT, PAGED[, SMALL_PAGES])`` of ``cases`` (16 heads, 256
    requests) and prints its registers, spills, shared and global scratch memory, the tile loop's
    length and the loop's counts of the opcodes starting with one of ``ops``."""
    from mixmla import interpreter
    from mixmla.kernels.gluon import sass
    from mixmla.kernels.gluon.compile import KernelSpec

    if interpreter.active():
        sys.exit("Gluon does not compile under Triton's interpreter, which importing mixmla turns on without "
                 "CUDA: run with TRITON_INTERPRET=0")
    mod = load_module(path)
    for fmt, paged, *small in cases:
        spec = KernelSpec(H=16, ROWS=16, FORMAT=fmt, BLOCK_B=256, C0=2, WRITE_LSE=False, PAGED=paged,
                          SMALL_PAGES=bool(small and small[0]))
        k = compile_variant(mod.mla_decode_hopper_kernel, spec, getattr(mod, "NUM_WARPS", gcompile.NUM_WARPS),
                            getattr(mod, "MAX_REGISTERS", gcompile.MAX_REGISTERS))
        f = sass.kernel_facts(k)
        counts = {o: n for o, n in f.loop_ops.items() if o.startswith(tuple(ops))} if ops else {}
        print(f"format {fmt} paged {paged}{' small pages' if spec.SMALL_PAGES else ''}: {f.registers} registers, spill {f.spill_bytes} B, "
              f"loop {f.loop_instructions} instructions, {f.loop_local} local, shared {f.shared} B, "
              f"global scratch {k.metadata.global_scratch_size} B" + (f", {counts}" if counts else ""))


def load_module(name):
    """A variant: a module name under ``mixmla.kernels.gluon``, or the path of a ``.py`` file."""
    if name.endswith(".py"):
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(name))[0], name)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(f"mixmla.kernels.gluon.{name}")


def _label(name):
    return os.path.splitext(os.path.basename(name))[0]


def _decoder(name, b, fmt, device, paged, page_size=0, programs=None):
    """A variant module may declare NUM_WARPS (of its default partition: a warp-specialized kernel
    adds its workers' warps), MAX_REGISTERS, PROGRAMS_PER_SM, SIGNATURE (its own argument list),
    SPEC (a dict of ``KernelSpec`` fields to override), COOPERATIVE (launch flag) and FORMATS (the
    cache formats it reads, of 'fp8' and 'mxfp4': ``main`` times it on those only); otherwise the
    shipped values. programs: the grid (default: the variant's programs per SM on every SM)."""
    if name == "shipped":
        return HopperDecoder(b, 16, fmt, device, paged=paged, page_size=page_size, programs=programs)
    mod = load_module(name)
    per_sm = getattr(mod, "PROGRAMS_PER_SM", PROGRAMS_PER_SM)
    programs = programs or per_sm * torch.cuda.get_device_properties(device).multi_processor_count
    dec = HopperDecoder(b, 16, fmt, device, paged=paged, programs=programs, page_size=page_size)
    spec = dataclasses.replace(dec.spec, **getattr(mod, "SPEC", {}))
    kernel = compile_variant(mod.mla_decode_hopper_kernel, spec, getattr(mod, "NUM_WARPS", gcompile.NUM_WARPS),
                                 getattr(mod, "MAX_REGISTERS", gcompile.MAX_REGISTERS), getattr(mod, "SIGNATURE", None),
                                 getattr(mod, "COOPERATIVE", True))
    signature = getattr(mod, "SIGNATURE", gcompile.SIGNATURE)
    extra = sum(t == "constexpr" for t in gcompile.SIGNATURE.values()) - sum(t == "constexpr" for t in signature.values())
    dec.kernel = _Trimmed(kernel, extra) if extra else kernel
    return dec


class _Trimmed:
    """A variant compiled with fewer specialization constants than the shipped kernel: its
    launcher takes that many fewer trailing placeholders than ``HopperDecoder.launch`` passes."""

    def __init__(self, kernel, extra):
        self.kernel, self.extra = kernel, extra

    @property
    def run(self):
        run = self.kernel.run  # loads the module first, which sets ``function``
        return lambda *args: run(*args[:len(args) - self.extra])

    @property
    def function(self):
        return self.kernel.function

    @property
    def packed_metadata(self):
        return self.kernel.packed_metadata


def _timed(fn, flusher):
    fn()
    torch.cuda.synchronize()
    return round(gpu_time(fn, flusher, warm_s=0.1, time_cap_s=0.4).median_us, 1)


def main(outdir, modules, page_sizes=(), shapes=SHAPES):
    os.makedirs(outdir, exist_ok=True)
    flusher = L2Flusher(mode="read")
    formats = {m: getattr(load_module(m), "FORMATS", ("fp8", "mxfp4")) for m in modules}
    rows = []
    for b, l in shapes:
        q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=b + l, device="cuda")
        for fmt in ("fp8", "mxfp4"):
            cache = as_cache(kv[fmt])
            ref = mla_decode_reference(q, cache, kvp, qo)[0] if b * l <= 65536 else None
            row = {"shape": f"{b}x{l}", "fmt": fmt}
            outs = {}
            names = ["shipped"] + [m for m in modules if fmt in formats[m]]
            for name in names:
                dec = _decoder(name, b, fmt, q.device, 0)
                out = torch.full((q.shape[0], 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
                lse = torch.full((q.shape[0], 16), float("nan"), device="cuda")
                fn = lambda: dec.launch(q, cache, kvp, qo, out, lse, default_sm_scale())  # noqa: E731
                row[_label(name)] = _timed(fn, flusher)
                row[_label(name) + " ok"] = check_strict(out, ref).passed if ref is not None else "-"
                if name != "shipped":
                    row[_label(name) + " same"] = bool(torch.equal(out.view(torch.int16), outs["shipped"][0].view(torch.int16))
                                               and torch.equal(lse, outs["shipped"][1]))
                    # For a variant that sums in another order: how far from the shipped output
                    # (the strict rule's measure; NaN anywhere fails it).
                    row[_label(name) + " vs shipped"] = float(f"{check_strict(out, outs['shipped'][0]).rel_l2:.1e}")
                outs[name] = (out, lse)
            for page_size in page_sizes if b * l >= PAGED_MIN_TOKENS else ():
                batch = scatter_to_pages(cache, kvp, page_size, generator=torch.Generator().manual_seed(page_size))
                pages = batch.block_pages
                for name in names:
                    dec = _decoder(name, b, fmt, q.device, 1, page_size)
                    out = torch.full_like(outs[name][0], float("nan"))
                    lse = torch.full_like(outs[name][1], float("nan"))
                    fn = lambda: dec.launch(q, batch.cache.rows, pages.seq_lens, qo, out, lse,  # noqa: E731
                                            default_sm_scale(), table=pages.table, page_size=page_size)
                    row[f"{_label(name)} p{page_size}"] = _timed(fn, flusher)
                    row[f"{_label(name)} p{page_size} bits"] = bool(
                        torch.equal(out.view(torch.int16), outs[name][0].view(torch.int16))
                        and torch.equal(lse, outs[name][1]))
                del batch, pages
            rows.append(row)
            print(row, flush=True)
        del q, kv
        torch.cuda.empty_cache()
    json.dump(rows, open(os.path.join(outdir, "variants.json"), "w"), indent=1)
    cols = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    print("| " + " | ".join(cols) + " |")
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")


#: The Hopper GPU test's staircase (``tests/test_hopper_gpu.py``): per-tile score levels, base 2.
STAIRCASE = [0, 3, 6, 7.5, 30, 31, 33, 60, 61, 62, 63, 90, 92, 20, 95]


def _wide_scales():
    """A 4x1024 MXFP4 batch in which every 7th token is 2**-20 times the others: its blocks'
    exponents lie far outside [-13, 13] (the range step 77's f16 tables hold exactly)."""
    from mixmla.inputs import pack_kv_data

    q, kv, qo, kvp, _ = generate_input(4, 1, 1024, seed=5, device="cuda")
    rows = kv["bf16"].float().clone()
    rows[::7] *= 2.0 ** -20
    return q, as_cache(pack_kv_data(rows)["mxfp4"]), qo, kvp


def safety(modules):
    """Each kernel (shipped, then ``modules``), MXFP4, on inputs that take a fast path's assumptions
    away: ``generate_staircase(STAIRCASE)`` (scores rising by up to 30 between tiles, and falling)
    with 1 and 4 programs, and ``_wide_scales`` (block exponents outside [-13, 13]): whether the
    strict check passes and how many output rows are NaN. One line per kernel and input."""
    from mixmla.inputs import generate_staircase

    q, kv, qo, kvp, _ = generate_staircase(STAIRCASE, device="cuda")
    stair = (q, as_cache(kv["mxfp4"]), qo, kvp)
    wide = _wide_scales()
    names = ["shipped"] + [m for m in modules if "mxfp4" in getattr(load_module(m), "FORMATS", ("mxfp4", ))]
    for label, inputs, runs in (("staircase", stair, (1, 4)), ("wide scales", wide, (16, ))):
        q, cache, qo, kvp = inputs
        ref = mla_decode_reference(q, cache, kvp, qo)[0]
        for name, programs in [(n, p) for n in names for p in runs]:
            dec = _decoder(name, kvp.numel() - 1, "mxfp4", q.device, 0, programs=programs)
            out = torch.full((q.shape[0], 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
            lse = torch.full((q.shape[0], 16), float("nan"), device="cuda")
            dec.launch(q, cache, kvp, qo, out, lse, default_sm_scale())
            torch.cuda.synchronize()
            nan_rows = int(out.float().isnan().any(dim=-1).sum())
            print(f"{label} ({programs} programs) {_label(name)}: strict {check_strict(out, ref).message[:60]}; "
                  f"NaN rows {nan_rows} of {out.shape[0] * 16}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--safety":
        safety(sys.argv[2:])
        sys.exit(0)
    args = sys.argv[2:]
    sizes = ()
    if "--paged" in args:
        i = args.index("--paged")
        sizes = tuple(int(x) for x in args[i + 1].split(","))
        args = args[:i] + args[i + 2:]
    shapes = SHAPES
    if "--shapes" in args:
        i = args.index("--shapes")
        shapes = [tuple(int(v) for v in x.split("x")) for x in args[i + 1].split(",")]
        args = args[:i] + args[i + 2:]
    main(sys.argv[1], args, sizes, shapes)
