"""Torch operations each paged entry point dispatches per call, and the values it reads on the host
(elements passed to ``mixmla.validate._host_values``), per shape and page size: what a GPU call's
host cost follows, measured without a GPU (the interpreter runs no kernel).

    TRITON_INTERPRET=1 PYTHONPATH=<tree>/src python ops_per_call.py
"""
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"
import torch
from torch.utils._python_dispatch import TorchDispatchMode
import triton.runtime.interpreter as interp

interp.InterpretedFunction.run = lambda self, *a, **k: None
import mixmla
from mixmla import validate

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
from host_cost import HEADS, paged_batch  # noqa: E402


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


read = []
real = validate._host_values
validate._host_values = lambda ts: read.append(sum(t.numel() for t in ts)) or real(ts)
for shape in ("4x1024", "64x8192", "256x8192"):
    batch, kv_len = (int(x) for x in shape.split("x"))
    for page in (1, 64):
        d = paged_batch(batch, kv_len, page, "bf16", "cpu")
        q, pool, bt, lens, qo = d["q"], d["pool"], d["block_table"], d["seq_lens"], d["qo_indptr"]
        ind, idx = d["kv_indptr"], d["kv_indices"]
        p = mixmla.plan_paged(bt, lens, page, qo, HEADS, "bf16")
        calls = {"plan_paged": lambda: mixmla.plan_paged(bt, lens, page, qo, HEADS, "bf16"),
                 "paged run": lambda: p.run(q, pool),
                 "mla_decode_paged": lambda: mixmla.mla_decode_paged(q, pool, bt, lens),
                 "mla_decode_paged_csr": lambda: mixmla.mla_decode_paged_csr(q, pool, ind, idx, lens)}
        for name, fn in calls.items():
            fn()
            read.clear()
            with Count() as c:
                fn()
            print(f"{shape:>9}/{page:<3} {name:<22} torch ops {c.ops:4d}  host values read {sum(read):9d}")
