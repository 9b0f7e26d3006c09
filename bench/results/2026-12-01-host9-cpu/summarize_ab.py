import sys, re, collections, statistics
rows = collections.defaultdict(list)
tree = None
for line in open(sys.argv[1]):
    if line.startswith("tree"):
        tree = line.split()[1].replace("/src", "") + (" C" if "compiled" in line else " I"); continue
    f = line.split(); shape, fmt = f[0], f[1]
    for kv in f[2:]:
        k, v = kv.split("="); rows[(tree.split()[1], shape, fmt, k, tree.split()[0])].append(float(v))
trees = list(dict.fromkeys(k[4] for k in rows))
keys = sorted(set(k[:4] for k in rows))
print("mode shape fmt entry | " + " | ".join(f"{t} min/med" for t in trees))
for k in keys:
    print(" ".join(k) + " | " + " | ".join(f"{min(rows[k + (t,)]):.1f}/{statistics.median(rows[k + (t,)]):.1f}" for t in trees))
