"""Reporting the accuracy study: the JSON document, its aggregation over repeats, markdown and
rich tables, and the chart.

The document (``accuracy.json``, schema :data:`SCHEMA`) holds the settings, the device, the
layouts and one entry per measured case as :func:`mixmla.accuracy.study.run_case` returns it.
Everything printed or drawn is computed from the document alone, so docs/ACCURACY.md's tables can
be regenerated from the committed JSON (and are checked against it by the tests).
"""

from __future__ import annotations

import json
import os
import statistics

from .layouts import LAYOUTS
from .study import CACHE_KINDS

SCHEMA = "mixmla-accuracy/1"

#: Metrics of one layout in one case, flattened: cache metrics as they are, output metrics as
#: ``"<reference>.<metric>"`` with reference ``vs_bf16`` or ``vs_exact``.
CACHE_METRICS = ("cache_rel_l2", "latent_rel_l2", "rope_rel_l2", "cache_max", "cache_gain")
OUTPUT_METRICS = ("out_rel_l2", "out_max", "out_worst_row_rel_l2", "lse_rms", "lse_max")
REFERENCES = ("vs_bf16", "vs_exact")


def new_document(settings: dict, device: dict, command: str) -> dict:
    """An empty results document. settings: the run's options; device: ``harness.env.device_info``;
    command: the command line that makes it."""
    layouts = {name: {"description": LAYOUTS[name].description, "kernels": LAYOUTS[name].kernels}
               for name in settings["layouts"]}
    return {"schema": SCHEMA, "command": command, "settings": settings, "device": device,
            "layouts": layouts, "runs": [], "seconds": None}


def _flatten(layout_result: dict) -> dict:
    flat = {k: layout_result[k] for k in CACHE_METRICS + ("bytes_per_token",)}
    for ref in REFERENCES:
        flat.update({f"{ref}.{k}": layout_result[ref][k] for k in OUTPUT_METRICS})
    return flat


def _is_worst_case(metric: str) -> bool:
    """Max-type metrics are combined over repeats by their maximum, the others by their mean."""
    return metric.endswith("_max") or "worst" in metric


def aggregate(doc: dict) -> list[dict]:
    """The document's runs grouped by case label (repeats with other seeds), in run order.

    Returns ``[{"label", "cache", "kv_len", "batch", "num_heads", "seeds": [...], "mse_changed" and
    "mse_lowered": mean fractions of MXFP4 blocks whose exponent the squared-error rule changed /
    lowered (None without both MXFP4 layouts), "layouts": {name:
    {flat metric: value}}}]``: relative-L2, RMS and gain metrics are the mean over repeats, max
    metrics the maximum.
    """
    groups: dict[str, list[dict]] = {}
    for run in doc["runs"]:
        groups.setdefault(run["case"]["label"], []).append(run)
    out = []
    for label, runs in groups.items():
        case = runs[0]["case"]
        per_layout = {}
        for name in runs[0]["layouts"]:
            flats = [_flatten(r["layouts"][name]) for r in runs]
            per_layout[name] = {m: (max if _is_worst_case(m) else statistics.fmean)([f[m] for f in flats])
                                for m in flats[0]}
        changed = [r["mse_scales"]["changed_fraction"] for r in runs if r.get("mse_scales")]
        lowered = [r["mse_scales"]["lowered_fraction"] for r in runs if r.get("mse_scales")]
        out.append({"label": label, "cache": case["cache"], "kv_len": case["kv_len"], "batch": case["batch"],
                    "num_heads": case["num_heads"], "seeds": [r["case"]["seed"] for r in runs],
                    "mse_changed": statistics.fmean(changed) if changed else None,
                    "mse_lowered": statistics.fmean(lowered) if lowered else None,
                    "layouts": per_layout})
    return out


def summary(doc: dict) -> dict:
    """Per layout and cache kind, the range over cases of the aggregated metrics:
    ``{name: {kind: {metric: (min, median, max)}}}`` (kinds without cases are left out)."""
    cases = aggregate(doc)
    out: dict = {}
    for name in doc["layouts"]:
        for kind in CACHE_KINDS:
            rows = [c["layouts"][name] for c in cases if c["cache"] == kind and name in c["layouts"]]
            if not rows:
                continue
            out.setdefault(name, {})[kind] = {
                m: (min(r[m] for r in rows), statistics.median(r[m] for r in rows), max(r[m] for r in rows))
                for m in rows[0]}
    return out


def pct(v: float) -> str:
    """A relative error as a percentage with 3 significant digits."""
    return f"{100 * v:.3g}%"


def nats(v: float) -> str:
    return f"{v:.3g}"


def _span(r: tuple[float, float, float], fmt=pct) -> str:
    lo, _, hi = r
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)} - {fmt(hi)}"


def _kinds(summ: dict, name: str, metric: str, fmt=pct, part: int | None = None) -> str:
    """'gaussian / outliers' cell: the range over cases, or one part of it (0 min, 2 max)."""
    cells = []
    for kind in CACHE_KINDS:
        if kind in summ[name]:
            r = summ[name][kind][metric]
            cells.append(_span(r, fmt) if part is None else fmt(r[part]))
    return " / ".join(cells)


def summary_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the headline table: one row per layout."""
    summ = summary(doc)
    kinds = " / ".join(k for k in CACHE_KINDS if any(k in v for v in summ.values()))
    headers = ["layout", "bytes/token", "kernels", f"cache rel L2 ({kinds})",
               f"output rel L2 vs bf16 ({kinds})", f"output rel L2 vs exact ({kinds})",
               f"worst lse error vs bf16 ({kinds}, nats)"]
    rows = []
    for name in doc["layouts"]:
        first = next(iter(summ[name].values()))
        rows.append([name, str(int(first["bytes_per_token"][0])), "yes" if doc["layouts"][name]["kernels"] else "no",
                     _kinds(summ, name, "cache_rel_l2"), _kinds(summ, name, "vs_bf16.out_rel_l2"),
                     _kinds(summ, name, "vs_exact.out_rel_l2"), _kinds(summ, name, "vs_bf16.lse_max", nats, part=2)])
    return headers, rows


#: Per-case tables: (title, flat metric, formatter).
CASE_TABLES = (
    ("Output, relative L2 error against the bf16-cache result", "vs_bf16.out_rel_l2", pct),
    ("Output, max |error| / max |output|, against the bf16-cache result", "vs_bf16.out_max", pct),
    ("Output, relative L2 error of the worst (token, head) row, against the bf16-cache result",
     "vs_bf16.out_worst_row_rel_l2", pct),
    ("Output, relative L2 error against the exact result (float cache)", "vs_exact.out_rel_l2", pct),
    ("Log-sum-exp, RMS |error| against the bf16-cache result (nats)", "vs_bf16.lse_rms", nats),
    ("Log-sum-exp, max |error| against the bf16-cache result (nats)", "vs_bf16.lse_max", nats),
    ("Log-sum-exp, max |error| against the exact result (nats)", "vs_exact.lse_max", nats),
    ("Cache, relative L2 error against the float cache (all 576 dims)", "cache_rel_l2", pct),
    ("Cache, relative L2 error of the rope dims (512..575)", "rope_rel_l2", pct),
    ("Cache, max |error| / max |value|", "cache_max", pct),
    ("Cache gain <decoded, x> / <x, x> (1: no shrinkage)", "cache_gain", lambda v: f"{v:.5f}"),
)


def case_rows(doc: dict, metric: str, fmt) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of one per-case table: a row per case, a column per layout."""
    cases = aggregate(doc)
    names = list(doc["layouts"])
    headers = ["case (batch x kv, heads)"] + names
    rows = [[f"{c['cache']} {c['batch']}x{c['kv_len']}, h{c['num_heads']}"]
            + [fmt(c["layouts"][n][metric]) for n in names] for c in cases]
    return headers, rows


def mse_rows(doc: dict) -> tuple[list[str], list[list[str]]] | None:
    """(headers, rows) of the squared-error MXFP4 quantizer's table, or None when the run lacks
    "mxfp4" or "mxfp4-mse". Changes are relative: (mse - producer) / producer."""
    if not {"mxfp4", "mxfp4-mse"} <= set(doc["layouts"]):
        return None
    headers = ["case (batch x kv, heads)", "blocks changed", "cache rel L2", "change",
               "cache gain: producer -> mse", "output rel L2 vs bf16", "change"]
    rows = []
    for c in aggregate(doc):
        a, b = c["layouts"]["mxfp4"], c["layouts"]["mxfp4-mse"]

        def change(m):
            return f"{100 * (b[m] - a[m]) / a[m]:+.2f}%"

        rows.append([f"{c['cache']} {c['batch']}x{c['kv_len']}, h{c['num_heads']}",
                     f"{pct(c['mse_changed'])} (lowered {pct(c['mse_lowered'])})",
                     f"{pct(a['cache_rel_l2'])} -> {pct(b['cache_rel_l2'])}", change("cache_rel_l2"),
                     f"{a['cache_gain']:.5f} -> {b['cache_gain']:.5f}",
                     f"{pct(a['vs_bf16.out_rel_l2'])} -> {pct(b['vs_bf16.out_rel_l2'])}", change("vs_bf16.out_rel_l2")])
    return headers, rows


def _markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def format_markdown(doc: dict) -> str:
    """The tables of a document as markdown (the generated part of docs/ACCURACY.md)."""
    s = doc["settings"]
    where = doc["device"].get("name", "?") if s["device"].startswith("cuda") else f"the CPU ({s['threads']} threads)"
    parts = [
        f"Made by `{doc['command']}` on {where}, torch {doc['device'].get('torch', '?')}, "
        f"in {doc['seconds']:.0f} s: {len(doc['runs'])} cases ({s['repeats']} seeds per problem, base seed "
        f"{s['seed']}), {len(doc['layouts'])} layouts.\n",
        "### Summary (range over contexts and head counts)\n",
        _markdown_table(*summary_rows(doc)),
    ]
    mse = mse_rows(doc)
    if mse is not None:
        parts += ["### The squared-error MXFP4 quantizer against the benchmark producer\n", _markdown_table(*mse)]
    for title, metric, fmt in CASE_TABLES:
        parts += [f"### {title}\n", _markdown_table(*case_rows(doc, metric, fmt))]
    seeds = "; ".join(f"{c['label']}: {', '.join(map(str, c['seeds']))}" for c in aggregate(doc))
    parts.append(f"Seeds per problem: {seeds}.\n")
    return "\n".join(parts)


def print_tables(doc: dict, plain: bool = False) -> None:
    """The summary and squared-error tables on the terminal (rich, or markdown text when ``plain``
    or rich is missing)."""
    tables = [("Accuracy of each cache layout (range over contexts and heads)", summary_rows(doc))]
    mse = mse_rows(doc)
    if mse is not None:
        tables.append(("Squared-error MXFP4 scales against the benchmark producer", mse))
    if not plain:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            plain = True
    if plain:
        for title, (headers, rows) in tables:
            print(f"{title}\n\n{_markdown_table(headers, rows)}")
        return
    console = Console(width=max(Console().width, 120))
    for title, (headers, rows) in tables:
        table = Table(*headers, title=title)
        for row in rows:
            table.add_row(*row)
        console.print(table)


def _log_x(ax, ticks: list[int], label: str) -> None:
    """A log x axis labelled at exactly ``ticks``, in plain numbers."""
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(label)


def write_chart(doc: dict, path: str) -> str | None:
    """PNG with two panels: each layout's output error against the bf16-cache result over its
    bytes per token (median over cases, bars from the best to the worst case), per cache kind;
    and the same error against the context length. Returns the path, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        return None
    names = [n for n in doc["layouts"] if n != "bf16"]  # bf16 is the reference: its error is 0
    summ, cases = summary(doc), aggregate(doc)
    markers = {"gaussian": "o", "outliers": "^"}
    cmap = plt.get_cmap("tab10")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 6.5), constrained_layout=True)
    # Layouts of the same size are drawn side by side, not on top of each other.
    sizes = {n: int(next(iter(summ[n].values()))["bytes_per_token"][0]) for n in names}
    for j, name in enumerate(names):
        same = [n for n in names if sizes[n] == sizes[name]]
        for k, kind in enumerate(CACHE_KINDS):
            if kind not in summ[name]:
                continue
            lo, mid, hi = summ[name][kind]["vs_bf16.out_rel_l2"]
            x = sizes[name] * 1.025 ** (same.index(name) - (len(same) - 1) / 2 + (2 * k - 1) * 0.25 * len(same))
            ax1.errorbar([x], [100 * mid], yerr=[[100 * (mid - lo)], [100 * (hi - mid)]], fmt=markers[kind],
                         color=cmap(j % 10), capsize=3, ms=8, label=name if k == 0 else None)
            by_len: dict[int, list[float]] = {}
            for c in cases:
                if c["cache"] == kind:
                    by_len.setdefault(c["kv_len"], []).append(c["layouts"][name]["vs_bf16.out_rel_l2"])
            lens = sorted(by_len)
            ax2.plot(lens, [100 * statistics.fmean(by_len[n]) for n in lens], marker=markers[kind], color=cmap(j % 10),
                     linestyle="-" if kind == "gaussian" else "--", label=f"{name}, {kind}")
    _log_x(ax1, sorted(set(sizes.values())), "bytes per cached token (log)")
    ax1.set_title("Error against size: median over cases, bars from best to worst case\n"
                  "circles: Gaussian cache, triangles: outlier-heavy cache")
    ax1.legend(fontsize=8, title="layout", title_fontsize=8)
    _log_x(ax2, sorted({c["kv_len"] for c in cases}), "cached tokens per request (log)")
    ax2.set_title("Error against context length (mean over head counts and seeds)\n"
                  "solid: Gaussian cache, dashed: outlier-heavy cache")
    ax2.legend(fontsize=7, ncol=2)
    percent = FuncFormatter(lambda v, _: f"{v:g}%")
    for ax in (ax1, ax2):
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(percent)
        ax.yaxis.set_minor_formatter(percent)
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_ylabel("output relative L2 error against the bf16-cache result (log)")
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(f"mixmla accuracy: the float64 reference on each decoded cache layout ({doc['command']})",
                 fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(doc: dict, out_dir: str) -> dict:
    """accuracy.json, accuracy.md and accuracy.png into ``out_dir`` (created). Returns name -> path."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {"json": os.path.join(out_dir, "accuracy.json"), "markdown": os.path.join(out_dir, "accuracy.md")}
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, allow_nan=False)
        f.write("\n")
    with open(paths["markdown"], "w", encoding="utf-8") as f:
        f.write(format_markdown(doc))
    chart = write_chart(doc, os.path.join(out_dir, "accuracy.png"))
    if chart:
        paths["chart"] = chart
    return paths

