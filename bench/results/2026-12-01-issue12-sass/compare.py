"""Compare the SASS of two capture runs case by case.

python compare.py BEFORE_DIR AFTER_DIR [--show N]
Prints per case and kernel: identical (instruction text), identical modulo constant-bank
parameter offsets, or the instruction-level diff summary.
"""
import difflib
import json
import os
import re
import sys

before, after = sys.argv[1], sys.argv[2]
show = int(sys.argv[sys.argv.index("--show") + 1]) if "--show" in sys.argv else 0
ib = json.load(open(os.path.join(before, "index.json")))
ia = json.load(open(os.path.join(after, "index.json")))


def instructions(path):
    text = open(path).read()
    out = []
    for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", text):
        out.append(re.sub(r"\s+", " ", m.group(1)).strip())
    return out


def params_normalized(ins):
    return [re.sub(r"c\[0x0\]\[0x[0-9a-f]+\]", "c[0x0][P]", i) for i in ins]


summary = {"identical": 0, "params-only": 0, "different": 0}
for case, names_b in ib["index"].items():
    names_a = ia["index"].get(case)
    if names_a is None or len(names_a) != len(names_b):
        print(f"{case}: kernels differ: {names_b} vs {names_a}")
        summary["different"] += 1
        continue
    for nb, na in zip(names_b, names_a):
        sb = instructions(os.path.join(before, nb + ".sass"))
        sa = instructions(os.path.join(after, na + ".sass"))
        rb, ra = ib["compiled"][nb]["resources"], ia["compiled"][na]["resources"]
        if sb == sa:
            kind = "identical"
        elif params_normalized(sb) == params_normalized(sa):
            kind = "params-only"
        else:
            kind = "different"
        summary[kind] += 1
        line = f"{case:28s} {nb.split('-')[0]:20s} {kind:12s} {len(sb):5d} -> {len(sa):5d} instr"
        if rb != ra:
            line += f"  resources {rb.split('REG')[1] if 'REG' in rb else rb} -> {ra.split('REG')[1] if 'REG' in ra else ra}"
        print(line)
        if kind == "different" and show:
            d = [l for l in difflib.unified_diff(params_normalized(sb), params_normalized(sa), lineterm="", n=0)
                 if not l.startswith(("---", "+++"))]
            print("\n".join("    " + l for l in d[:show]))
print(summary)


def loop_body(path):
    """Instructions of the longest backward branch's body (the token loop)."""
    text = open(path).read()
    lines = [(int(a, 16), re.sub(r"\s+", " ", t).strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", text)]
    best = None
    for addr, t in lines:
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", t)
        if m and int(m[1], 16) < addr and (best is None or addr - int(m[1], 16) > best[1] - best[0]):
            best = (int(m[1], 16), addr)
    return [t for a, t in lines if best and best[0] <= a <= best[1]]


def anon(ins):
    out = []
    for i in ins:
        i = re.sub(r"\bU?R\d+\b", "R", i)
        i = re.sub(r"\bU?P\d\b", "P", i)
        i = re.sub(r"0x[0-9a-f]+", "X", i)
        out.append(i)
    return out


if "--loops" in sys.argv:
    import collections
    res = collections.Counter()
    for case, names_b in ib["index"].items():
        for nb, na in zip(names_b, ia["index"][case]):
            lb, la = loop_body(os.path.join(before, nb + ".sass")), loop_body(os.path.join(after, na + ".sass"))
            if lb == la:
                k = "loop identical"
            elif anon(lb) == anon(la):
                k = "loop identical modulo register numbers/offsets"
            elif sorted(anon(lb)) == sorted(anon(la)):
                k = "loop same instructions, other order"
            else:
                k = "loop different"
            res[k] += 1
            print(f"{case:28s} {nb.split('-')[0]:20s} {k} ({len(lb)} -> {len(la)})")
    print(dict(res))

if "--spills" in sys.argv:
    def res(d, n):
        r = d["compiled"][n]["resources"]
        m = re.search(r"REG:(\d+) STACK:(\d+)", r)
        return f"{m[1]}/{m[2]}"
    for case, names_b in ib["index"].items():
        for nb, na in zip(names_b, ia["index"][case]):
            if not nb.startswith("mla_decode"):
                continue
            lb, la = loop_body(os.path.join(before, nb + ".sass")), loop_body(os.path.join(after, na + ".sass"))
            cnt = lambda l: (sum(i.startswith(("STL", "@")) and "STL" in i for i in l), sum("LDL" in i for i in l))
            same = "same" if anon(lb) == anon(la) else ("reordered" if sorted(anon(lb)) == sorted(anon(la)) else "differs")
            print(f"{case:28s} regs/stack {res(ib, nb):>7s} -> {res(ia, na):<7s} loop {len(lb):5d} -> {len(la):5d} "
                  f"STL/LDL in loop {cnt(lb)} -> {cnt(la)}  {same}")
