"""Compile the kernels for Hopper (sm_90) on any machine, GPU or not, and report their resources:
registers, spills, shared memory, and the token loop's SASS. Catches compile errors and spills
before device time is spent, and proves a refactor left the compiled code alone.

What is compiled is what a call would launch: ``mixmla.kernels.triton.compile`` builds the call's
argument lists with the launcher's own code and specializes them as Triton's dispatcher does.

    PYTHONPATH=src python3 bench/compile_report.py [--fmt fp8] [--heads 16] [--lq 1] [--direct]
        [--lse] [--fnuz] [--page 1 [--gather window|token]] [--config block_t=32,num_stages=2] [--loop]
        [--dump DIR]
    PYTHONPATH=src python3 bench/compile_report.py --all DIR        # every default configuration
    PYTHONPATH=src python3 bench/compile_report.py --gluon-all DIR  # every shipped Hopper (Gluon) kernel
    PYTHONPATH=src python3 bench/compile_report.py --compare BEFORE AFTER

``--loop`` prints the token loop's instructions per iteration (per warp) and the most frequent
opcodes, which is how the design log's instruction counts were taken. ``--all DIR`` compiles every
default configuration (bf16, fp8 e4m3fn, MXFP4 at H = 16, 32, 64, 128 and H = 16 with Lq = 4;
direct and split; with and without lse; e4m3fnuz at H = 16 and 128) and writes each kernel's SASS
and an ``index.json``; ``--compare`` compares two such folders kernel by kernel (whole kernel, the
token loop up to register numbers, registers, stack, spill instructions in the loop).
"""

import argparse
import collections
import dataclasses
import hashlib
import json
import os
import re
import sys
import time

# Compile for real even on a machine without a GPU (mixmla would pick the interpreter there).
os.environ["TRITON_INTERPRET"] = "0"

from mixmla.kernels.gluon import sass as gsass  # noqa: E402
from mixmla.kernels.triton import compile as tc  # noqa: E402
from mixmla.kernels.triton.configs import config_fields, default_config  # noqa: E402
from mixmla.kernels.triton.launch import with_arguments  # noqa: E402
from mixmla.schedule import rows_per_request  # noqa: E402

DEFAULT_SHAPES = [(fmt, heads, lq, direct, lse, fnuz)
                  for fmt, fnuz in (("bf16", False), ("fp8", False), ("mxfp4", False), ("fp8", True))
                  for heads, lq in ((16, 1), (32, 1), (64, 1), (128, 1), (16, 4))
                  for direct in (True, False)
                  for lse in (False, True)
                  if not fnuz or (heads, lq) in ((16, 1), (128, 1))]


def instructions(sass: str) -> list[tuple[int, str]]:
    """``(address, instruction text)`` of every SASS instruction."""
    return gsass.parse_sass(sass)


def loop_body(sass: str) -> list[str]:
    """Instructions of the longest loop (target .. backward branch): the decode kernel's token loop."""
    lines = instructions(sass)
    spans = gsass.loops(lines)
    if not spans:
        return []
    first, last = max(spans, key=lambda span: lines[span[1]][0] - lines[span[0]][0])
    return [t for _, t in lines[first:last + 1]]


def loop_profile(sass: str):
    """``(instructions, Counter of opcodes)`` of the token loop; (0, empty) if there is none."""
    ops = collections.Counter(gsass.opcode(t) for t in loop_body(sass))
    return sum(ops.values()), ops


def _anonymous(body: list[str]) -> list[str]:
    """Instructions with register numbers and immediates/addresses erased."""
    out = []
    for text in body:
        text = re.sub(r"\bU?R\d+\b", "R", text)
        text = re.sub(r"\bU?P\d\b", "P", text)
        out.append(re.sub(r"0x[0-9a-f]+", "X", text))
    return out


def _config(text: str | None, fmt: str, rows: int):
    return dataclasses.replace(default_config(fmt, rows), **config_fields(text))


def compile_shape(fmt, heads, lq, direct, lse=False, fnuz=False, config=None, page=0, gather=None):
    """The compiled kernels (decode, then combine when split) of one call of that shape (in pages
    of ``page`` tokens read through a block table when it is > 0; ``gather`` 'window' or 'token'
    forces the decode kernel's WINDOW, which the launcher chooses by the grid otherwise)."""
    layout = tc.example_layout(fmt, heads, lq, split=not direct, page_size=page)
    cfg = _config(config, fmt, rows_per_request(layout.q_lens, heads))
    plan, launches = tc.plan_launches(layout, cfg, write_lse=lse, fnuz=fnuz)
    assert plan.schedule.direct == direct, (fmt, heads, lq, direct)
    if gather is not None:
        launches[0] = with_arguments(launches[0], WINDOW=gather == "window")
    return [(launch.kernel.fn.__name__, tc.compile_launch(launch)) for launch in launches]


def _sass_and_resources(k) -> tuple[str, dict]:
    """A compiled kernel's SASS text and resources as ``--all`` folders keep them."""
    return tc.sass(k), dict(tc.resources(k), shared_dynamic=k.metadata.shared)


def _record(out_dir: str, kernels: dict, name: str, text: str, resources: dict) -> str:
    """Writes a kernel's SASS into ``out_dir`` once per distinct text and returns its key."""
    key = f"{name}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"
    if key not in kernels:
        with open(os.path.join(out_dir, key + ".sass"), "w") as f:
            f.write(text)
        kernels[key] = resources
    return key


def write_all(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    index, kernels = {}, {}
    for shape in DEFAULT_SHAPES:
        fmt, heads, lq, direct, lse, fnuz = shape
        case = "/".join([fmt + ("-fnuz" if fnuz else ""), f"H{heads}", f"Lq{lq}", "direct" if direct else "split",
                         "lse" if lse else "nolse"])
        t = time.time()
        index[case] = [_record(out_dir, kernels, name, *_sass_and_resources(k))
                       for name, k in compile_shape(fmt, heads, lq, direct, lse, fnuz)]
        print(f"{case:36s} {' '.join(index[case])} ({time.time() - t:.0f}s)", flush=True)
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump({"index": index, "kernels": kernels}, f, indent=1)


def _hopper_loop(sass: str) -> list[str]:
    """A Hopper (Gluon) kernel's tile loop (``sass.hot_loop``: the loop with the most matrix
    instructions; ``loop_body`` finds the Triton kernels' token loop)."""
    return gsass.hot_loop(instructions(sass))


def _gluon_job(job):
    """One shipped Hopper (Gluon) kernel's case name, kernel name, SASS text and resources."""
    from mixmla.kernels.gluon.compile import compile_decode

    spec, staged = job
    case = "/".join(f"{n}={v}" for n, v in spec.constexprs().items()) + ("/staged" if staged else "")
    name = "mla_decode_hopper_tma_kernel" if staged else "mla_decode_hopper_kernel"
    return (case, name) + _sass_and_resources(compile_decode(spec, staged))


def write_all_gluon(out_dir: str) -> None:
    """``write_all`` for every Hopper (Gluon) kernel the library can launch (``launch.shipped_kernels``),
    in the same format, so that ``--compare`` takes two such folders."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from mixmla.kernels.gluon.launch import shipped_kernels

    os.makedirs(out_dir, exist_ok=True)
    index, kernels = {}, {}
    with ProcessPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1)),
                             mp_context=multiprocessing.get_context("fork")) as pool:
        for case, name, text, res in pool.map(_gluon_job, shipped_kernels()):
            index[case] = [_record(out_dir, kernels, name, text, res)]
            print(f"{case} {index[case][0]}", flush=True)
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump({"index": index, "kernels": kernels}, f, indent=1)


def compare(before: str, after: str) -> int:
    """Print the comparison of two ``--all`` folders; returns the number of kernels that differ."""
    load = lambda d: json.load(open(os.path.join(d, "index.json")))  # noqa: E731
    b, a = load(before), load(after)
    counts, differ = collections.Counter(), 0
    for case, names_b in b["index"].items():
        names_a = a["index"].get(case, [])
        for nb, na in zip(names_b, names_a):
            sb = open(os.path.join(before, nb + ".sass")).read()
            sa = open(os.path.join(after, na + ".sass")).read()
            body = _hopper_loop if nb.startswith("mla_decode_hopper") else loop_body
            lb, la = body(sb), body(sa)
            if [t for _, t in instructions(sb)] == [t for _, t in instructions(sa)]:
                kind = "identical"
            elif _anonymous(lb) == _anonymous(la):
                kind = "loop identical up to register numbers"
            else:
                kind = "different"
                differ += 1
            counts[kind] += 1
            rb, ra = b["kernels"][nb], a["kernels"][na]
            spills = lambda body: (sum("STL" in t for t in body), sum("LDL" in t for t in body))  # noqa: E731
            print(f"{case:36s} {nb.split('-')[0]:18s} {kind:38s} regs/stack {rb['registers']}/{rb['stack']} -> "
                  f"{ra['registers']}/{ra['stack']}  loop {len(lb)} -> {len(la)}, STL/LDL {spills(lb)} -> {spills(la)}")
        if len(names_b) != len(names_a):
            print(f"{case}: {len(names_b)} kernels before, {len(names_a)} after")
            differ += 1
    print(dict(counts))
    return differ


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fmt", default="bf16,fp8,mxfp4")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--lq", type=int, default=1, help="query tokens per request")
    ap.add_argument("--direct", action="store_true", help="the single-chunk plan (no partials, no combine)")
    ap.add_argument("--lse", action="store_true", help="also write the log-sum-exp")
    ap.add_argument("--fnuz", action="store_true", help="fp8 as e4m3fnuz")
    ap.add_argument("--page", type=int, default=0, help="pages of this many tokens (0: contiguous)")
    ap.add_argument("--gather", choices=("window", "token"),
                    help="force the gather of pages smaller than a tile (default: the launcher's choice)")
    ap.add_argument("--config", help="KernelConfig fields over the default, e.g. block_t=32,num_stages=2")
    ap.add_argument("--loop", action="store_true", help="print the token loop's SASS instruction counts")
    ap.add_argument("--dump", metavar="DIR", help="write each kernel's TTGIR, PTX, cubin and SASS")
    ap.add_argument("--all", metavar="DIR", help="every default configuration's SASS into DIR")
    ap.add_argument("--gluon-all", metavar="DIR", help="every shipped Hopper (Gluon) kernel's SASS into DIR")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two --all or --gluon-all folders")
    a = ap.parse_args()
    if a.compare:
        return 1 if compare(*a.compare) else 0
    if a.all:
        write_all(a.all)
        return 0
    if a.gluon_all:
        write_all_gluon(a.gluon_all)
        return 0
    for fmt in a.fmt.split(","):
        t = time.time()
        for name, k in compile_shape(fmt, a.heads, a.lq, a.direct, a.lse, a.fnuz, a.config, a.page, a.gather):
            r = tc.resources(k)
            print(f"{fmt} {name}: regs={r['registers']} stack={r['stack']} shared={k.metadata.shared} "
                  f"({time.time() - t:.0f}s)", flush=True)
            if a.loop and name == "mla_decode_kernel":
                count, ops = loop_profile(tc.sass(k))
                print(f"  loop: {count} instructions per iteration; "
                      + ", ".join(f"{o} {n}" for o, n in ops.most_common(12)))
            if a.dump:
                os.makedirs(a.dump, exist_ok=True)
                for ext in ("ttgir", "ptx"):
                    with open(os.path.join(a.dump, f"{fmt}-{name}.{ext}"), "w") as f:
                        f.write(k.asm[ext])
                with open(os.path.join(a.dump, f"{fmt}-{name}.cubin"), "wb") as f:
                    f.write(k.asm["cubin"])
                with open(os.path.join(a.dump, f"{fmt}-{name}.sass"), "w") as f:
                    f.write(tc.sass(k))
    return 0


if __name__ == "__main__":
    sys.exit(main())
