"""Torch operations and Triton launches each entry point makes per call, as its GPU path makes
them, counted on a CPU (no GPU needed): the device-to-host read runs the branch it takes for device
tensors (the CPU shortcut of ``validate._host_values`` is cut out of its source, and an unpinned
buffer stands in for the pinned one), every aten operation is counted by a dispatch mode, and every
kernel launch at the interpreter's entry (which runs nothing).

    TRITON_INTERPRET=1 PYTHONPATH=<tree>/src python ops_per_call.py

Columns: allocating ops (empty, empty_strided, _to_copy, cat, arange, clone), copies (copy_;
``sync`` counts the blocking ones, which wait for the stream on a GPU, plus the ``_to_copy`` to
the host, which does too), view ops (view, as_strided, reshape/_reshape_alias, slice, squeeze,
select, unsqueeze, alias), other aten ops, kernel launches.
"""
import collections
import inspect
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
import triton.runtime.interpreter as interp  # noqa: E402

LAUNCHES = [0]


def _stub(self, *a, **k):
    LAUNCHES[0] += 1


interp.InterpretedFunction.run = _stub
import mixmla  # noqa: E402
from mixmla import validate  # noqa: E402
from mixmla.inputs import generate_input  # noqa: E402

source = inspect.getsource(validate._host_values)
cut = source.replace('if all(t.device.type == "cpu" for t in tensors):', "if False:").replace(
    "if all([t.is_cpu for t in flat]):", "if False:")  # the shortcut of either tree
assert cut != source
exec(compile(cut, validate.__file__, "exec"), validate.__dict__)
if hasattr(validate, "_STAGING"):
    validate._STAGING.buffer = torch.empty(1 << 16, dtype=torch.uint8)
    validate._STAGING.array = validate._STAGING.buffer.numpy()
    validate._STAGING.views = {}

# On CPU tensors ``.cpu()`` is the tensor itself; on a GPU it is a copy to the host and a wait.
torch.Tensor.cpu = lambda self, *a, **k: self.to("cpu", copy=True)

ALLOC = {"empty", "empty_strided", "_to_copy", "cat", "arange", "clone", "zeros", "full", "new_empty"}
VIEW = {"view", "as_strided", "_reshape_alias", "reshape", "slice", "squeeze", "select", "unsqueeze", "alias",
        "expand", "_unsafe_view", "t", "permute", "lift_fresh", "detach"}


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.c = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in ALLOC:
            self.c["alloc"] += 1
            if name == "_to_copy" and str(kwargs.get("device", "")) == "cpu":
                self.c["sync"] += 1
        elif name == "copy_":
            self.c["copy"] += 1
            non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
            if not non_blocking:
                self.c["sync"] += 1
        elif name in VIEW:
            self.c["view"] += 1
        else:
            self.c["other"] += 1
            self.c[f"other:{name}"] += 1
        return func(*args, **kwargs)


def count(fn):
    fn()
    fn()
    LAUNCHES[0] = 0
    with Count() as m:
        fn()
    return m.c, LAUNCHES[0]


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from host_cost import HEADS, paged_batch  # noqa: E402

print(f"{'case':<34} {'alloc':>5} {'copy':>5} {'sync':>5} {'view':>5} {'other':>5} {'launch':>6}  other ops")
for shape in ("4x1024", "64x1024"):
    batch, kv_len = (int(x) for x in shape.split("x"))
    q, kv, qo, kvp, _ = generate_input(batch, 1, kv_len, seed=1, num_heads=HEADS, device="cpu")
    for fmt in ("bf16", "fp8"):
        cache = kv[fmt]
        p = mixmla.plan(kvp, qo, HEADS, fmt)
        out = torch.empty(q.shape[0], HEADS, 512, dtype=torch.bfloat16)
        calls = {"run": lambda: p.run(q, cache, out=out), "run(check=True)": lambda: p.run(q, cache, out=out, check=True),
                 "plan": lambda: mixmla.plan(kvp, qo, HEADS, fmt),
                 "mla_decode": lambda: mixmla.mla_decode(q, cache, kvp, qo),
                 "custom_kernel eager": lambda: mixmla.custom_kernel((q, kv, qo, kvp, {}), fmt, use_graphs=False)}
        for name, fn in calls.items():
            c, n = count(fn)
            others = " ".join(f"{k[6:]}={v}" for k, v in sorted(c.items()) if k.startswith("other:"))
            print(f"{shape + ' ' + fmt + ' ' + name:<34} {c['alloc']:>5} {c['copy']:>5} {c['sync']:>5} {c['view']:>5} "
                  f"{c['other']:>5} {n:>6}  {others}")
for shape, page in (("4x1024", 64), ("64x8192", 64)):
    batch, kv_len = (int(x) for x in shape.split("x"))
    d = paged_batch(batch, kv_len, page, "bf16", "cpu")
    q, pool, bt, lens, qo = d["q"], d["pool"], d["block_table"], d["seq_lens"], d["qo_indptr"]
    ind, idx = d["kv_indptr"], d["kv_indices"]
    out = torch.empty(batch, HEADS, 512, dtype=torch.bfloat16)
    p = mixmla.plan_paged(bt, lens, page, qo, HEADS, "bf16")
    calls = {"plan_paged": lambda: mixmla.plan_paged(bt, lens, page, qo, HEADS, "bf16"),
             "paged run": lambda: p.run(q, pool, out=out),
             "mla_decode_paged": lambda: mixmla.mla_decode_paged(q, pool, bt, lens),
             "mla_decode_paged_csr": lambda: mixmla.mla_decode_paged_csr(q, pool, ind, idx, lens)}
    for name, fn in calls.items():
        c, n = count(fn)
        others = " ".join(f"{k[6:]}={v}" for k, v in sorted(c.items()) if k.startswith("other:"))
        print(f"{shape + '/' + str(page) + ' ' + name:<34} {c['alloc']:>5} {c['copy']:>5} {c['sync']:>5} "
              f"{c['view']:>5} {c['other']:>5} {n:>6}  {others}")
