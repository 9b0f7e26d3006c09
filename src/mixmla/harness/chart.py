"""The headline chart of a ``mixmla bench`` run: how far each path is from the physical floor, and
how it compares with the best peer, shape by shape.

Two panels, both on linear axes, one group of bars per shape:

- **x floor**: GPU time over the time the format's minimum bytes take at the measured HBM read
  ceiling (1 = reading every cached byte once at the ceiling). Bars above the axis limit are cut
  and labelled with their value.
- **x best peer**: GPU time over the fastest peer's GPU time on that shape (any peer, any format;
  1 = as fast as the best peer).

A bar's colour is its cache format; mixmla's bars are solid, a peer's are hatched in the same
colour. Drawn: mixmla's bf16, fp8 and MXFP4 paths and the library peers (FlashInfer, FlashMLA);
``auto`` repeats the format it picks and the plain PyTorch baseline is far off the scale, so both
are left out and said so under the chart. The title names the device, the commit and the date.
"""

from __future__ import annotations

__all__ = ["FORMAT_COLOURS", "DRAWN_IMPLS", "chart_series", "write_chart"]

#: Colour per cache format (colour-blind-safe Okabe-Ito hues).
FORMAT_COLOURS = {"bf16": "#0072B2", "fp8": "#E69F00", "mxfp4": "#009E73"}
#: Implementations drawn, in the order of their bars; the rest are named in the footnote.
DRAWN_IMPLS = ("mixmla", "flashinfer", "flashmla")
X_FLOOR_LIMIT = 8.0  #: top of the x-floor axis; taller bars are cut and labelled


def _ok(rows):
    return [r for r in rows if r["status"] == "ok" and r.get("gpu") and r["gpu"].get("median_us")]


def chart_series(results: dict) -> tuple[list[str], list[dict]]:
    """What the chart draws: the shapes (in run order) and one series per drawn (impl, format),
    each ``{"impl", "format", "label", "x_floor": [...], "x_best_peer": [...]}`` with None where
    that path has no timed row on a shape. The best peer of a shape is the lowest GPU median among
    its rows of implementations other than mixmla."""
    rows = _ok(results["rows"])
    shapes = list(dict.fromkeys(r["shape_label"] for r in results["rows"]))
    best_peer = {}
    for r in rows:
        if r["impl"] != "mixmla":
            t = r["gpu"]["median_us"]
            best_peer[r["shape_label"]] = min(t, best_peer.get(r["shape_label"], t))
    index = {(r["impl"], r["path"], r["shape_label"]): r for r in rows}
    series = []
    for impl in DRAWN_IMPLS:
        for fmt in FORMAT_COLOURS:
            cells = [index.get((impl, fmt, s)) for s in shapes]
            if not any(cells):
                continue
            series.append({
                "impl": impl, "format": fmt, "label": f"{impl} {fmt}",
                "x_floor": [c.get("x_floor") if c else None for c in cells],
                "x_best_peer": [c["gpu"]["median_us"] / best_peer[s] if c and s in best_peer else None
                                for c, s in zip(cells, shapes)],
            })
    return shapes, series


def _footnote(results: dict) -> str:
    rows = _ok(results["rows"])
    left = sorted({r["label"] for r in rows if r["impl"] not in DRAWN_IMPLS or r["path"] not in FORMAT_COLOURS})
    ceiling = (results.get("ceiling") or {}).get("read_gbps")
    parts = []
    if ceiling:
        parts.append(f"floor: minimum bytes at the HBM read ceiling measured in the run ({ceiling:.0f} GB/s)")
    parts.append("GPU time: median of CUDA-graph replays after an L2 flush")
    if left:
        parts.append("not drawn: " + ", ".join(left) + " (auto repeats its format; PyTorch is far off the scale)")
    return "; ".join(parts)


def write_chart(results: dict, path: str, commit: str | None = None) -> str | None:
    """Write the chart as a PNG to ``path``; returns the path, or None when matplotlib is missing
    or nothing was timed. ``commit`` overrides ``results["commit"]`` in the title."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    shapes, series = chart_series(results)
    if not series:
        return None
    dev = results.get("device") or {}
    commit = commit or results.get("commit") or "unknown commit"
    date = (dev.get("date") or "")[:10] or "undated"
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(9.0, 1.35 * len(shapes) + 3), 8.8), sharex=True,
                                      layout="constrained")
    width = 0.82 / len(series)
    for j, s in enumerate(series):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(shapes))]
        peer = s["impl"] != "mixmla"
        style = dict(color="white" if peer else FORMAT_COLOURS[s["format"]], edgecolor=FORMAT_COLOURS[s["format"]],
                     hatch="////" if peer else None, linewidth=1.2, label=s["label"])
        floor = [min(v, X_FLOOR_LIMIT) if v else 0 for v in s["x_floor"]]
        top.bar(xs, floor, width, **style)
        for x, v in zip(xs, s["x_floor"]):
            if v and v > X_FLOOR_LIMIT:
                top.text(x, X_FLOOR_LIMIT, f"{v:.0f}", ha="center", va="bottom", fontsize=7, rotation=90)
        bottom.bar(xs, [v or 0 for v in s["x_best_peer"]], width, **dict(style, label=None))
    top.axhline(1.0, color="black", linewidth=1, linestyle="--")
    top.set_ylim(0, X_FLOOR_LIMIT * 1.12)
    top.set_ylabel("x floor (GPU time / minimum bytes at the ceiling)")
    top.set_title("How far from the floor (1 = every cached byte read once at the measured HBM ceiling)",
                  fontsize=10)
    bottom.axhline(1.0, color="black", linewidth=1, linestyle="--")
    bottom.set_ylabel("x best peer (GPU time / fastest peer's)")
    bottom.set_title("Against the best peer on each shape (1 = as fast as the fastest peer; lower is better)",
                     fontsize=10)
    bottom.set_xticks(range(len(shapes)))
    bottom.set_xticklabels(shapes)
    bottom.set_xlabel("batch x cached tokens per request")
    for ax in (top, bottom):
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    fig.suptitle(f"mixmla on {dev.get('name', 'unknown device')}: GPU time per shape (commit {commit}, {date})",
                 fontsize=12)
    fig.legend(*top.get_legend_handles_labels(), loc="outside right upper", fontsize=8,
               frameon=False)
    fig.text(0.5, -0.01, _footnote(results), ha="center", va="top", fontsize=7, wrap=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
