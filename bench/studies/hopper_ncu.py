"""Where the Hopper kernel's warps stall: ncu's per-reason stall samples for one launch, and the
instructions that collect most of them.

``PYTHONPATH=src python3 bench/studies/hopper_ncu.py OUT FMT BATCH KV_LEN [VARIANT]`` (VARIANT: a
variant module's path, profiled instead of the shipped kernel; or ``--summarize
OUT/FMT-BATCHxKV_LEN`` to redo the summary from the CSV files)

Runs ``ncu --set full`` on the third launch of ``hopper_profile_target.py`` (clocks not locked, so
the kernel runs as in the benchmark), keeps the report, and writes from it: ``raw.csv`` (every
metric), ``source.csv`` (the SASS source page: samples per instruction), and ``stalls.txt``: the
stall reasons' shares of all warp samples (``smsp__pcsamp_warps_issue_stalled_*``), the issue
rate and pipe utilizations of the raw page, and the 40 instructions with the most samples.
"""

import csv
import os
import subprocess
import sys


def _ncu(*args):
    return subprocess.run(["ncu", *args], capture_output=True, text=True, check=True).stdout


def _num(v):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return None


def summarize(rep: str) -> list[str]:
    """The lines of ``stalls.txt`` from ``REP-raw.csv`` and, where kept, ``REP-source.csv``."""
    rows = list(csv.reader(open(rep + "-raw.csv")))
    header, units, values = rows[0], rows[1], rows[2]
    metrics = dict(zip(header, values))
    prefix = "smsp__pcsamp_warps_issue_stalled_"
    # Each reason also has a ``_not_issued`` count: the part of its samples in which the scheduler
    # issued nothing; a subset, so the shares are of the plain counts only.
    stalls = {h.removeprefix(prefix): _num(v) for h, v in metrics.items()
              if h.startswith(prefix) and not h.endswith("_not_issued") and _num(v)}
    total = sum(stalls.values()) or 1.0
    lines = [f"warp state samples by reason ({prefix}*), total {total:.0f}"]
    for name, v in sorted(stalls.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {name:24s} {v:10.0f} {100 * v / total:5.1f}%")
    keys = ("gpu__time_duration.sum", "sm__inst_executed.avg.per_cycle_active", "sm__warps_active.avg.per_cycle_active",
            "sm__cycles_elapsed.avg.per_second")
    for h in header:
        if h in keys or (h.startswith("sm__pipe_") and h.endswith("cycles_active.avg.pct_of_peak_sustained_active")) \
                or (h.startswith("sm__inst_executed_pipe_") and h.endswith(".avg.pct_of_peak_sustained_active")) \
                or (h.startswith("l1tex__data_pipe_lsu_wavefronts_mem_shared") and h.endswith(".sum.pct_of_peak_sustained_elapsed")) \
                or h == "l1tex__throughput.avg.pct_of_peak_sustained_active":
            lines.append(f"  {h:70s} {metrics[h]} {units[header.index(h)]}")
    if os.path.exists(rep + "-source.csv"):
        srows = [r for r in csv.reader(open(rep + "-source.csv")) if r]
        at = next((i for i, r in enumerate(srows) if "Address" in r and "Source" in r), None)
        if at is not None:
            sh = srows[at]
            col, text, addr = sh.index("Warp Stall Sampling (All Samples)"), sh.index("Source"), sh.index("Address")
            body = [r for r in srows[at + 1:] if len(r) == len(sh) and _num(r[col]) is not None]
            # Shared-memory wavefronts per opcode (and the ideal count: more means bank conflicts).
            waves = {}
            wave, ideal_col = sh.index("L1 Wavefronts Shared"), sh.index("L1 Wavefronts Shared Ideal")
            for r in body:
                op = r[text].split()
                if op and _num(r[wave]):
                    name = (op[1] if op[0].startswith("@") else op[0]).split(".")[0]
                    w = waves.setdefault(name, [0.0, 0.0])
                    w[0] += _num(r[wave])
                    w[1] += _num(r[ideal_col]) or 0.0
            lines.append("--- shared-memory wavefronts by opcode (ideal)")
            for name, (w, ideal) in sorted(waves.items(), key=lambda kv: -kv[1][0]):
                lines.append(f"  {name:10s} {w:14.0f} ({ideal:.0f})")
            lines.append("--- the 40 instructions with the most samples")
            for r in sorted(body, key=lambda r: -_num(r[col]))[:40]:
                lines.append(f"  {_num(r[col]):8.0f} {r[addr]} {r[text].strip()}")
    return lines


def main(out, fmt, batch, kv_len, variant=None):
    os.makedirs(out, exist_ok=True)
    label = "" if variant is None else "-" + os.path.splitext(os.path.basename(variant))[0]
    rep = os.path.join(out, f"{fmt}-{batch}x{kv_len}{label}")
    target = os.path.join(os.path.dirname(__file__), "hopper_profile_target.py")
    subprocess.run(["ncu", "--set", "full", "--import-source", "no", "--clock-control", "none", "-k",
                    "regex:mla_decode_hopper", "--launch-skip", "2", "--launch-count", "1", "-f", "-o", rep,
                    sys.executable, target, fmt, str(batch), str(kv_len)] + ([variant] if variant else []),
                   check=True)
    open(rep + "-raw.csv", "w").write(_ncu("--import", rep + ".ncu-rep", "--page", "raw", "--csv"))
    open(rep + "-source.csv", "w").write(_ncu("--import", rep + ".ncu-rep", "--page", "source", "--csv",
                                              "--print-source", "sass"))
    lines = summarize(rep)
    open(rep + "-stalls.txt", "w").write("\n".join(lines) + "\n")
    print("\n".join(lines[:60]))


if __name__ == "__main__":
    if sys.argv[1] == "--summarize":  # again, from the CSV files of an earlier run
        print("\n".join(summarize(sys.argv[2])))
    else:
        main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else None)
