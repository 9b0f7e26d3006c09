"""What ``mixmla bench`` does on a machine without a CUDA GPU: a tiny Triton-interpreter demo.

It says clearly that no GPU is present, then runs one small shape (2 requests x 64 cached tokens,
16 heads, unless ``--shape``/``--spec`` name small ones) through every requested path of ours and
the plain-PyTorch peer, each output strict-checked against the exact reference on the same cache
format, exactly as the GPU run checks before timing. Times are host wall-clock under the
interpreter and mean nothing for performance; they are shown in the note column only.
"""

from __future__ import annotations

import time

__all__ = ["DEMO_SPEC", "MAX_DEMO_TOKENS", "run_demo"]

DEMO_SPEC = {"batchsize": 2, "qseqlen": 1, "kvseqlen": 64, "seed": 1}
#: Largest cache (tokens) the demo runs under the interpreter; larger shapes are skipped.
MAX_DEMO_TOKENS = 4096


def run_demo(args, specs: list[dict] | None, paths: list[str], peer_names: list[str]) -> int:
    """Run the demo; ``args`` is ``mixmla bench``'s parsed namespace (``out`` is used). Returns the
    exit status (0 when every path of ours passed its strict check)."""
    from .. import interpreter
    from .cases import Case, spec_label
    from .env import device_info, source_commit
    from .measure import check_impl_case, exit_status, peer_formats
    from .peers import make_impl
    from .report import format_table, make_row, new_results, write_all

    print("mixmla bench: no CUDA GPU found (torch.cuda.is_available() is False), so nothing can be timed.")
    print("Running a tiny correctness demo instead, kernels in the Triton interpreter"
          f" (TRITON_INTERPRET={'1' if interpreter.active() else 'unset!'}). Wall times below are not performance.")
    print("On a GPU machine, `mixmla bench` times docs/SPEC.md's 8 shapes; see docs/PERF.md.\n", flush=True)

    specs = specs or [dict(DEMO_SPEC)]
    impls = [("mixmla", p) for p in paths]
    results = new_results("cpu-demo", device_info(), None, {"paths": ",".join(paths), "peers": ",".join(peer_names)},
                          commit=source_commit())
    objs = {"mixmla": make_impl("mixmla")}
    for name in peer_names:
        obj = make_impl(name)
        reason = obj.unavailable()
        if name != "torch" and reason is None:
            reason = "available, but needs a CUDA GPU"
        results["peers"][name] = {"available": reason is None, "reason": reason, "formats": list(obj.formats)}
        if reason is None:
            objs[name] = obj
            impls += [(name, f) for f in peer_formats(obj.formats, paths)]

    for spec in specs:
        tokens = spec["batchsize"] * spec["kvseqlen"]
        if tokens > MAX_DEMO_TOKENS:
            for name, fmt in impls:
                results["rows"].append(make_row(spec, spec_label(spec), name, fmt, "skipped",
                                                f"{tokens} cached tokens is too many for the interpreter "
                                                f"(max {MAX_DEMO_TOKENS})"))
            continue
        case = Case.generate(spec, device="cpu")
        for name, fmt in impls:
            t0 = time.perf_counter()
            row, prep = check_impl_case(objs[name], case, fmt)
            if row["status"] == "ok":
                row["bytes"] = case.bytes(row["format"])
                row["note"] = (row["note"] + "; " if row["note"] else "") + \
                    f"checked in {time.perf_counter() - t0:.1f} s wall (interpreter)"
            rel = f"  strict rel L2 {row['check']['strict']['rel_l2']:.2e} ({row['format']})" if row.get("check") else ""
            print(f"  {row['shape_label']:<8} {row['label']:<16} {row['status']}{rel}  {row['note']}", flush=True)
            results["rows"].append(row)
    status = exit_status(results["rows"])
    if getattr(args, "paged", False):
        from .paged import bench_append, format_append

        # The writer's check on a small pool; nothing is timed without a GPU.
        results["paged"] = {"append_kv": bench_append(None, None, device="cpu", tokens=8, num_pages=4,
                                                      page_size=16)}
        print("\n" + format_append(results["paged"]["append_kv"]))
        status = status or int(any(r["status"] != "ok" for r in results["paged"]["append_kv"]))
    print()
    print(format_table(results))
    if args.out:
        written = write_all(results, args.out)
        print(f"\nwrote {', '.join(written.values())}")
    return status
