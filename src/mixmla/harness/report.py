"""Writing the results: results.json (schema + validation), the text table, markdown; the PNG chart
is ``chart.write_chart``.

All writers take the plain-dict ``results`` of :func:`new_results` (JSON-ready); nothing here
touches a GPU, so all of it is testable on a CPU.

One *row* per (shape, implementation, path)::

    {"shape": spec dict, "shape_label": "256x8192", "impl": "mixmla", "path": "fp8",
     "label": "mixmla fp8", "status": "ok" | "check failed" | "error" | "unsupported" | "skipped",
     "note": str, "format": format whose reference/bytes apply or None,
     "check": {"format", "strict": {"passed", "rel_l2", "message"}, "loose": {...} | None} | None,
     "latency_us": {"n", "mean", "std", "err", "best", "worst", "stop"} | None,   # call latency
     "gpu": {"median_us", "min_us", "n", "method", "note", "flush",            # GPU time
             "write_flush_median_us"} | None,
     "bytes": int | None, "floor_us": float | None,   # minimum bytes; their time at the ceiling
     "gbps": float | None, "pct_ceiling": float | None, "x_floor": float | None}

``gbps = bytes / gpu median``; ``pct_ceiling = 100 * gbps / ceiling``; ``x_floor = gpu median /
floor_us`` (1.0 would be reading the minimum bytes at the measured ceiling).
"""

from __future__ import annotations

import json
import math
import os
from typing import Iterable

from .chart import write_chart
from .stats import geomean

__all__ = [
    "SCHEMA", "STATUSES", "new_results", "make_row", "fill_bandwidth", "geomeans", "validate_results",
    "format_table", "format_short", "format_markdown", "write_json", "write_markdown", "write_chart", "write_all",
    "main",
]

SCHEMA = "mixmla-bench/1"
STATUSES = ("ok", "check failed", "error", "unsupported", "skipped")
_ROW_KEYS = ("shape", "shape_label", "impl", "path", "label", "status", "note", "format", "check", "latency_us",
             "gpu", "bytes", "floor_us", "gbps", "pct_ceiling", "x_floor")


def new_results(mode: str, device: dict, ceiling: dict | None, settings: dict, commit: str | None = None) -> dict:
    """An empty results document. mode: ``"gpu"`` or ``"cpu-demo"``. device: name, torch and triton
    versions, ... ceiling: ``Ceiling.as_dict()`` or None. settings: the run's options. commit: the
    checkout's git commit, when known (the chart's title names it)."""
    return {"schema": SCHEMA, "mode": mode, "device": device, "ceiling": ceiling, "settings": settings,
            "commit": commit, "peers": {}, "rows": [], "geomean": {}}


def make_row(spec: dict, shape_label: str, impl: str, path: str, status: str = "ok", note: str = "") -> dict:
    """A row with every key present (measurements None until filled in)."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} not in {STATUSES}")
    row = dict.fromkeys(_ROW_KEYS)
    # Paged shapes (``mixmla bench --paged``) get labels of their own, so geomeans do not mix layouts.
    label = f"{impl} {path}" + (f" p{spec['page_size']}" if spec.get("page_size") else "")
    row.update(shape=dict(spec), shape_label=shape_label, impl=impl, path=path, label=label, status=status, note=note)
    return row


def fill_bandwidth(row: dict, ceiling_gbps: float | None) -> dict:
    """Set ``floor_us``, ``gbps``, ``pct_ceiling``, ``x_floor`` from ``bytes`` and the GPU median
    (us). Leaves them None where an input is missing. Returns the row."""
    nbytes, gpu = row.get("bytes"), row.get("gpu")
    med = gpu.get("median_us") if gpu else None
    if nbytes and med:
        row["gbps"] = nbytes / med * 1e-3  # bytes/us -> GB/s
    if nbytes and ceiling_gbps:
        row["floor_us"] = nbytes / ceiling_gbps * 1e-3
        if row["gbps"] is not None:
            row["pct_ceiling"] = 100.0 * row["gbps"] / ceiling_gbps
            row["x_floor"] = med / row["floor_us"]
    return row


def geomeans(rows: Iterable[dict]) -> dict:
    """Per label, the geometric mean over shapes with status ok of call latency mean and GPU
    median (us): ``{label: {"latency_us", "gpu_us", "n_ok", "n_shapes"}}``. A label with a failed
    or missing shape gets its geomean over the ok ones, and ``n_ok < n_shapes`` says so."""
    by_label: dict[str, list[dict]] = {}
    for r in rows:
        by_label.setdefault(r["label"], []).append(r)
    out = {}
    for label, rs in by_label.items():
        ok = [r for r in rs if r["status"] == "ok"]
        lat = [r["latency_us"]["mean"] for r in ok if r.get("latency_us")]
        gpu = [r["gpu"]["median_us"] for r in ok if r.get("gpu")]
        out[label] = {"latency_us": geomean(lat) if lat else None, "gpu_us": geomean(gpu) if gpu else None,
                      "n_ok": len(ok), "n_shapes": len(rs)}
    return out


def validate_results(doc: dict) -> list[str]:
    """Problems with a results document (empty list when it follows the schema)."""
    problems = []
    for key in ("schema", "mode", "device", "ceiling", "settings", "peers", "rows", "geomean"):
        if key not in doc:
            problems.append(f"missing key {key!r}")
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}, expected {SCHEMA!r}")
    for i, row in enumerate(doc.get("rows", [])):
        missing = [k for k in _ROW_KEYS if k not in row]
        if missing:
            problems.append(f"row {i}: missing {missing}")
            continue
        if row["status"] not in STATUSES:
            problems.append(f"row {i}: bad status {row['status']!r}")
        if row["status"] == "ok" and (row["check"] is None or not row["check"]["strict"]["passed"]):
            problems.append(f"row {i}: status ok without a passed strict check")
        if row["status"] != "ok" and row["status"] != "check failed" and (row["latency_us"] or row["gpu"]):
            problems.append(f"row {i}: timed although status is {row['status']!r}")
        if row["status"] == "check failed" and (row["latency_us"] or row["gpu"]):
            problems.append(f"row {i}: a failing output was timed")
        lat = row["latency_us"]
        if lat and not (lat["best"] <= lat["mean"] <= lat["worst"] and lat["n"] >= 1):
            problems.append(f"row {i}: inconsistent latency stats {lat}")
    for label, g in doc.get("geomean", {}).items():
        if not {"latency_us", "gpu_us", "n_ok", "n_shapes"} <= set(g):
            problems.append(f"geomean {label!r}: missing keys")
    return problems


# ---------------------------------------------------------------------------------------------- text
def _f(x, fmt: str, none: str = "-") -> str:
    return none if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _check_cell(row: dict) -> str:
    c = row.get("check")
    if not c:
        return "-"
    s = c["strict"]
    cell = f"{'ok' if s['passed'] else 'FAIL'} {s['rel_l2']:.1e}"
    if row["path"] == "auto" or row["impl"] == "submission":
        cell += f" ({c['format']})"
    return cell


def _lat_cell(row: dict) -> str:
    lat = row.get("latency_us")
    return f"{lat['mean']:.1f} ± {lat['err']:.1f}" if lat else "-"


TABLE_COLUMNS = ("shape", "impl path", "strict check", "call latency us", "GPU us", "GPU us write-flush", "MB", "GB/s",
                 "% ceil", "x floor", "status")


def _table_cells(row: dict) -> list[str]:
    gpu = row.get("gpu")
    status = row["status"] + (f": {row['note']}" if row["status"] != "ok" and row.get("note") else "")
    return [row["shape_label"], row["label"], _check_cell(row), _lat_cell(row),
            _f(gpu["median_us"] if gpu else None, ".1f"), _f(gpu.get("write_flush_median_us") if gpu else None, ".1f"),
            _f(row["bytes"] / 1e6 if row.get("bytes") else None, ".2f"),
            _f(row.get("gbps"), ".0f"), _f(row.get("pct_ceiling"), ".0f"), _f(row.get("x_floor"), ".2f"), status]


def format_table(results: dict) -> str:
    """The results as a fixed-width text table, then the geomean per path and peer availability."""
    rows = [list(TABLE_COLUMNS)] + [_table_cells(r) for r in results["rows"]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(TABLE_COLUMNS))]
    lines = []
    for k, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i < 3 or i == len(r) - 1 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines += ["", _geomean_text(results)]
    ceiling = results.get("ceiling")
    if ceiling:
        lines.append(f"HBM read ceiling measured in this run: {ceiling['read_gbps']:.0f} GB/s ({ceiling['method']}, "
                     f"{ceiling['nbytes'] / 1e9:.2f} GB); copy {ceiling['copy_gbps']:.0f} GB/s (read+write)")
    for name, p in results.get("peers", {}).items():
        if not p.get("available", True):
            lines.append(f"peer {name}: {p['reason']}")
    return "\n".join(lines)


def _geomean_text(results: dict) -> str:
    g = results.get("geomean") or {}
    if not g:
        return "geomean: (nothing timed)"
    lines = ["geomean over shapes (us):"]
    for label, v in g.items():
        part = "" if v["n_ok"] == v["n_shapes"] else f"  (only {v['n_ok']} of {v['n_shapes']} shapes ok)"
        lines.append(f"  {label:<18} call latency {_f(v['latency_us'], '9.1f')}   GPU {_f(v['gpu_us'], '9.1f')}{part}")
    return "\n".join(lines)


def format_short(results: dict) -> str:
    """A compact pivot: one line per implementation path, one column per shape, each cell
    ``call latency mean / GPU median`` in us (``FAIL``/``err``/``n/a`` otherwise), then the geomeans.
    Fits the last lines of a log."""
    shapes = list(dict.fromkeys(r["shape_label"] for r in results["rows"]))
    labels = list(dict.fromkeys(r["label"] for r in results["rows"]))
    cell = {(r["shape_label"], r["label"]): r for r in results["rows"]}
    short = {"ok": None, "check failed": "FAIL", "error": "err", "unsupported": "n/a", "skipped": "skip"}

    def text(r):
        if r is None:
            return ""
        if r["status"] != "ok":
            return short[r["status"]]
        lat, gpu = r.get("latency_us"), r.get("gpu")
        return f"{_f(lat['mean'] if lat else None, '.0f')}/{_f(gpu['median_us'] if gpu else None, '.0f')}"

    g = results.get("geomean") or {}
    header = ["call/GPU us"] + shapes + ["geomean"]
    body = []
    for label in labels:
        gm = g.get(label, {})
        body.append([label] + [text(cell.get((s, label))) for s in shapes]
                    + [f"{_f(gm.get('latency_us'), '.0f')}/{_f(gm.get('gpu_us'), '.0f')}"
                       + ("*" if gm and gm["n_ok"] < gm["n_shapes"] else "")])
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [header] + body]
    if any(v["n_ok"] < v["n_shapes"] for v in g.values()):
        lines.append("* geomean over the shapes that passed only")
    ceiling = results.get("ceiling")
    if ceiling:
        lines.append(f"HBM read ceiling {ceiling['read_gbps']:.0f} GB/s")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- markdown
def _md_table(header: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
                     + ["| " + " | ".join(r) + " |" for r in esc])


def format_markdown(results: dict, title: str = "mixmla bench") -> str:
    """A markdown summary: device and ceiling, the full table, geomeans, peers, method pointer."""
    dev = results.get("device", {})
    out = [f"# {title}", ""]
    out.append(f"- mode: {results['mode']}; device: {dev.get('name', '?')}; torch {dev.get('torch', '?')}, "
               f"triton {dev.get('triton', '?')}" + (f"; {dev['date']}" if dev.get("date") else ""))
    c = results.get("ceiling")
    if c:
        tri = f", Triton read {c['triton_read_gbps']:.0f}" if c.get("triton_read_gbps") else ""
        out.append(f"- HBM read ceiling (measured in this run): **{c['read_gbps']:.0f} GB/s** by {c['method']} over "
                   f"{c['nbytes'] / 1e9:.2f} GB (torch.sum {c['torch_sum_gbps']:.0f}{tri}; copy {c['copy_gbps']:.0f} "
                   f"GB/s read+write)")
    s = results.get("settings", {})
    if s:
        out.append("- settings: " + ", ".join(f"{k}={v}" for k, v in s.items()))
    out += ["", "## Results", "", _md_table(list(TABLE_COLUMNS), [_table_cells(r) for r in results["rows"]]), ""]
    g = results.get("geomean") or {}
    if g:
        out += ["## Geometric mean over shapes", "",
                _md_table(["impl path", "call latency us", "GPU us", "shapes ok"],
                          [[k, _f(v["latency_us"], ".1f"), _f(v["gpu_us"], ".1f"), f"{v['n_ok']}/{v['n_shapes']}"]
                           for k, v in g.items()]), ""]
    peers = results.get("peers") or {}
    if peers:
        out += ["## Peers", ""] + [f"- {k}: {'available' if v.get('available') else v.get('reason')}"
                                   for k, v in peers.items()] + [""]
    out += ["Call latency: CUDA events around the whole Python call after a 256 MiB L2 flush, repeated until the "
            "standard error is under 0.1% of the mean or a cap is hit (mean ± standard error). GPU time: median of "
            "CUDA-graph replays, each after reading 256 MiB (L2 evicted, clean lines only); 'write-flush': the "
            "same after the call-latency loop's written flush, whose dirty lines are written back during the call. "
            "Bytes: the minimum a call must move (cache once in its format, q read, out written); GB/s and % of "
            "ceiling use the GPU time. See docs/PERF.md.", ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- files
def write_json(results: dict, path: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, default=float)
        f.write("\n")
    return path


def write_markdown(results: dict, path: str, title: str = "mixmla bench") -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(format_markdown(results, title))
    return path


def write_all(results: dict, out_dir: str) -> dict:
    """results.json, summary.md and bench.png into ``out_dir`` (created). Returns name -> path."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {"json": write_json(results, os.path.join(out_dir, "results.json")),
             "markdown": write_markdown(results, os.path.join(out_dir, "summary.md"))}
    chart = write_chart(results, os.path.join(out_dir, "bench.png"))
    if chart:
        paths["chart"] = chart
    return paths


def main(argv: list[str] | None = None) -> int:
    """``python -m mixmla.harness.report RESULTS.json [--short] [--chart PNG [--commit C]]``: print a
    saved run's table again, and draw its chart (``--commit`` names the code commit when the
    results do not)."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m mixmla.harness.report", description=main.__doc__)
    p.add_argument("results", help="a results.json written by mixmla bench")
    p.add_argument("--short", action="store_true", help="the compact pivot table only")
    p.add_argument("--chart", metavar="PNG", help="also draw the chart into this file")
    p.add_argument("--commit", help="the commit to name in the chart's title (default: the one recorded)")
    args = p.parse_args(argv)
    with open(args.results, encoding="utf-8") as f:
        doc = json.load(f)
    problems = validate_results(doc)
    if problems:
        print("results.json does not follow the schema: " + "; ".join(problems[:5]), file=sys.stderr)
        return 1
    print(format_short(doc) if args.short else format_table(doc))
    if args.chart:
        written = write_chart(doc, args.chart, commit=args.commit)
        print(f"wrote {written}" if written else "no chart: matplotlib missing or nothing timed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
