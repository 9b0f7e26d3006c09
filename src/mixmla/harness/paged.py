"""``mixmla bench --paged``: the benchmark shapes in shuffled pages beside the contiguous layout,
and the cache writer's GPU time.

Each shape runs three times in a row: contiguous (the benchmark's layout), in pages of 1 token
(SGLang's) and of 64 (FlashMLA's, vLLM's), the pages of every request in a random order in the
pool (``Case.paged``), with mixmla's paths and FlashInfer's paged MLA on the same pools. The
summary puts each paged GPU time over the contiguous one of the same shape and format (the
issue's bar: within 5% at page size 64, 10% at page size 1). ``append_kv`` is timed for one
decode step of ``APPEND_TOKENS`` new tokens into a shuffled pool, after a bit-exact check of what
it wrote against the torch quantizers.
"""

from __future__ import annotations

PAGE_SIZES = (1, 64)
APPEND_TOKENS = 256  #: new tokens of one decode step at batch 256
APPEND_POOL_PAGES = 4096  #: pages of 64 tokens in the writer's pool (262144 slots)
APPEND_FORMATS = ("bf16", "fp8", "mxfp4")


def paged_specs(specs: list[dict], page_sizes=PAGE_SIZES) -> list[dict]:
    """Each spec, then the same spec in pages of each size (``page_size`` key), in that order."""
    out = []
    for spec in specs:
        out.append(dict(spec))
        out += [dict(spec, page_size=p) for p in page_sizes]
    return out


def paged_ratios(rows: list[dict]) -> list[dict]:
    """Per paged row of ours that has a GPU time: its shape, format, page size, GPU time and the
    ratio to the contiguous row of the same shape and format (None when that one is missing)."""
    def key(r):
        shape = {k: v for k, v in r["shape"].items() if k != "page_size"}
        return tuple(sorted(shape.items())), r["impl"], r["path"]

    contiguous = {key(r): r for r in rows if not r["shape"].get("page_size") and r.get("gpu")}
    out = []
    for r in rows:
        page = r["shape"].get("page_size")
        if not page or not r.get("gpu"):
            continue
        base = contiguous.get(key(r))
        paged_us = r["gpu"]["median_us"]
        base_us = base["gpu"]["median_us"] if base else None
        out.append({"shape": r["shape_label"], "impl": r["impl"], "format": r["path"], "page_size": page,
                    "gpu_us": paged_us, "contiguous_us": base_us,
                    "ratio": paged_us / base_us if base_us else None})
    return out


def format_ratios(ratios: list[dict]) -> str:
    """The paged-over-contiguous table (text)."""
    if not ratios:
        return "paged: no paged row with a GPU time"
    lines = [f"{'shape':<18} {'impl':<11} {'format':<6} {'paged us':>9} {'contig us':>9} {'ratio':>6}"]
    for r in ratios:
        base = f"{r['contiguous_us']:.1f}" if r["contiguous_us"] else "-"
        ratio = f"{r['ratio']:.3f}" if r["ratio"] else "-"
        lines.append(f"{r['shape']:<18} {r['impl']:<11} {r['format']:<6} {r['gpu_us']:>9.1f} {base:>9} {ratio:>6}")
    return "\n".join(lines)


def append_case(fmt: str, tokens: int, num_pages: int, page_size: int, device, seed: int = 0):
    """``(pool, kv, slots)``: a zeroed pool, ``tokens`` new bf16 rows and distinct random slots."""
    import torch

    from ..formats import empty_paged_cache

    gen = torch.Generator().manual_seed(seed)
    pool = empty_paged_cache(num_pages, page_size, fmt, device=device, scale=0.02)
    kv = torch.randn(tokens, 576, generator=gen).to(device, torch.bfloat16)
    slots = torch.randperm(num_pages * page_size, generator=gen)[:tokens].to(device)
    return pool, kv, slots


def check_append(fmt: str, pool, kv, slots) -> str | None:
    """Run ``append_kv`` once and compare what it wrote with the torch quantizers' bits; None when
    equal, else what differs."""
    import torch

    from ..formats import quantize_mxfp4
    from ..formats.fp8 import encode_fp8
    from ..writer import append_kv

    append_kv(pool, kv, slots)
    rows = pool.rows
    got = rows.data.view(torch.uint8)[slots]
    if fmt == "bf16":
        want = kv.view(torch.uint8).reshape(got.shape)
    elif fmt == "fp8":
        want = encode_fp8(kv, rows.scale).view(torch.uint8)
    else:
        q = quantize_mxfp4(kv, pad_scales=False)
        want = q.data
        if not torch.equal(rows.scales[slots][:, :18], q.scales):
            return "MXFP4 scale bytes differ from quantize_mxfp4's"
    return None if torch.equal(got, want) else f"{fmt} rows differ from the torch quantizer's bits"


def bench_append(timer_flusher, settings, device="cuda", tokens: int = APPEND_TOKENS,
                 num_pages: int = APPEND_POOL_PAGES, page_size: int = 64) -> list[dict]:
    """Per format: check, then the GPU time of ``append_kv(..., check=False)`` (graph replay after
    an L2 flush, as the decode rows), into a shuffled pool of ``num_pages`` pages of
    ``page_size``. With ``timer_flusher`` None (no GPU) only the check runs."""
    from ..writer import append_kv
    from .timing import gpu_time

    out = []
    for fmt in APPEND_FORMATS:
        pool, kv, slots = append_case(fmt, tokens, num_pages, page_size, device)
        row = {"format": fmt, "tokens": tokens, "page_size": page_size, "status": "ok", "gpu_us": None, "note": ""}
        problem = check_append(fmt, pool, kv, slots)
        if problem:
            row.update(status="check failed", note=problem)
        elif timer_flusher is not None:
            g = gpu_time(lambda: append_kv(pool, kv, slots, check=False), timer_flusher,
                         time_cap_s=settings.gpu_cap_s, max_reps=settings.gpu_max_reps, warm_s=settings.gpu_warm_s)
            row.update(gpu_us=g.median_us, note=g.note or "")
        out.append(row)
    return out


def format_append(rows: list[dict]) -> str:
    lines = [f"append_kv, {rows[0]['tokens'] if rows else APPEND_TOKENS} new tokens (one decode step):"]
    for r in rows:
        gpu = f"gpu {r['gpu_us']:.2f} us" if r["gpu_us"] is not None else "not timed"
        lines.append(f"  {r['format']:<6} {r['status']:<13} {gpu}  {r['note']}")
    return "\n".join(lines)


__all__ = ["PAGE_SIZES", "paged_specs", "paged_ratios", "format_ratios", "bench_append", "format_append",
           "check_append", "append_case"]
