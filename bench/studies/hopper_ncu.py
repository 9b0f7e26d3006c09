"""Where the Hopper kernel's warps stall: ncu's per-reason stall samples for one launch, and the
instructions that collect most of them.

``PYTHONPATH=src python3 bench/studies/hopper_ncu.py OUT FMT BATCH KV_LEN``

Runs ``ncu --set full`` on the third launch of ``hopper_profile_target.py`` (clocks not locked, so
the kernel runs as in the benchmark), keeps the report, and writes from it: ``raw.csv`` (every
metric), ``source.csv`` (the SASS source page: samples per instruction), and ``stalls.txt``: the
stall reasons' shares of all warp samples (``smsp__pcsamp_warps_issue_stalled_*``), the issue
rate and pipe utilizations of the raw page, and the 40 instructions with the most samples.
"""

import csv
import io
import os
import subprocess
import sys


def _ncu(*args):
    return subprocess.run(["ncu", *args], capture_output=True, text=True, check=True).stdout


def main(out, fmt, batch, kv_len):
    os.makedirs(out, exist_ok=True)
    rep = os.path.join(out, f"{fmt}-{batch}x{kv_len}")
    target = os.path.join(os.path.dirname(__file__), "hopper_profile_target.py")
    subprocess.run(["ncu", "--set", "full", "--import-source", "no", "--clock-control", "none", "-k",
                    "regex:mla_decode_hopper", "--launch-skip", "2", "--launch-count", "1", "-f", "-o", rep,
                    sys.executable, target, fmt, str(batch), str(kv_len)], check=True)
    raw = _ncu("--import", rep + ".ncu-rep", "--page", "raw", "--csv")
    open(rep + "-raw.csv", "w").write(raw)
    rows = list(csv.reader(io.StringIO(raw)))
    header, units, values = rows[0], rows[1], rows[2]
    metrics = {h: v for h, v in zip(header, values)}
    lines = []

    def num(v):
        try:
            return float(v.replace(",", ""))
        except ValueError:
            return None

    stalls = {h: num(v) for h, v in metrics.items() if h.startswith("smsp__pcsamp_warps_issue_stalled_")
              and num(v) is not None}
    total = sum(stalls.values()) or 1.0
    lines.append(f"stall samples (smsp__pcsamp_warps_issue_stalled_*), total {total:.0f}")
    for h, v in sorted(stalls.items(), key=lambda kv: -kv[1]):
        if v:
            lines.append(f"  {h.removeprefix('smsp__pcsamp_warps_issue_stalled_'):32s} {v:10.0f} {100 * v / total:5.1f}%")
    keys = ("gpu__time_duration.sum", "sm__inst_executed.avg.per_cycle_active", "smsp__issue_active.avg.pct_of_peak",
            "sm__warps_active.avg.per_cycle_active", "sm__cycles_elapsed.avg.per_second")
    for h in header:
        if h in keys or ("sm__inst_executed_pipe_" in h and h.endswith("pct_of_peak_sustained_active")) or \
                h.startswith("sm__pipe_") and h.endswith("pct_of_peak_sustained_active"):
            lines.append(f"  {h:70s} {metrics[h]} {units[header.index(h)]}")
    src = _ncu("--import", rep + ".ncu-rep", "--page", "source", "--csv", "--print-source", "sass")
    open(rep + "-source.csv", "w").write(src)
    srows = list(csv.reader(io.StringIO(src[src.find('"'):])))
    if srows:
        sh = srows[0]
        col = next((i for i, h in enumerate(sh) if "Sampling" in h and "All" in h), None)
        if col is not None:
            text = next((i for i, h in enumerate(sh) if h == "Source"), 1)
            addr = next((i for i, h in enumerate(sh) if h == "Address"), 0)
            body = [r for r in srows[1:] if len(r) > col and num(r[col]) is not None]
            lines.append(f"--- top instructions by '{sh[col]}'")
            for r in sorted(body, key=lambda r: -num(r[col]))[:40]:
                lines.append(f"  {num(r[col]):8.0f} {r[addr]} {r[text]}")
    open(rep + "-stalls.txt", "w").write("\n".join(lines) + "\n")
    print("\n".join(lines[:60]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
