"""Benchmark inputs: the GPU MODE ``amd-mixed-mla`` contract of SPEC.md, seeded.

``data = (q, kv_data, qo_indptr, kv_indptr, config)`` with ``kv_data`` holding the same cache in
all three formats: ``{"bf16": Tensor, "fp8": (Tensor, scale), "mxfp4": (Tensor, scales)}``.
"""

from __future__ import annotations

import torch

from .formats import HEAD_DIM, ROPE_DIM, VALUE_DIM, quantize_fp8, quantize_mxfp4
from .reference import default_sm_scale


def _default_device(device) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def make_config(batch: int, num_heads: int, q_seq_len: int, kv_seq_len: int, sm_scale: float | None = None) -> dict:
    """The benchmark's ``config`` dict for a uniform batch."""
    return {
        "batch_size": batch,
        "num_heads": num_heads,
        "num_kv_heads": 1,
        "qk_head_dim": HEAD_DIM,
        "kv_lora_rank": VALUE_DIM,
        "qk_rope_head_dim": ROPE_DIM,
        "v_head_dim": VALUE_DIM,
        "q_seq_len": q_seq_len,
        "kv_seq_len": kv_seq_len,
        "sm_scale": default_sm_scale() if sm_scale is None else sm_scale,
    }


def pack_kv_data(kv_bf16: torch.Tensor) -> dict:
    """All three formats of one cache: bf16 (N, 1, 576), fp8 (data, scale), mxfp4 (data, scales)."""
    kv_bf16 = kv_bf16.reshape(-1, 1, HEAD_DIM).to(torch.bfloat16)
    fp8 = quantize_fp8(kv_bf16)
    mx = quantize_mxfp4(kv_bf16)
    return {
        "bf16": kv_bf16,
        "fp8": (fp8.data.reshape(-1, 1, HEAD_DIM), fp8.scale),
        "mxfp4": (mx.data.reshape(-1, 1, HEAD_DIM // 2), mx.scales),
    }


def generate_input(
    batchsize: int,
    qseqlen: int,
    kvseqlen: int,
    seed: int,
    num_heads: int = 16,
    device=None,
):
    """One benchmark case: every request has ``qseqlen`` query tokens and ``kvseqlen`` cached tokens.

    Returns ``(q, kv_data, qo_indptr, kv_indptr, config)``: q (batch*qseqlen, num_heads, 576)
    bf16 standard normal; the bf16 cache (batch*kvseqlen, 1, 576) standard normal, and its fp8 and
    MXFP4 quantizations; int32 indptrs of shape (batch+1,); the config dict. Deterministic in
    ``seed`` for a given device.
    """
    if batchsize < 1 or qseqlen < 1 or kvseqlen < 0 or num_heads < 1:
        raise ValueError(f"need batchsize >= 1, qseqlen >= 1, kvseqlen >= 0, num_heads >= 1; got "
                         f"{batchsize}, {qseqlen}, {kvseqlen}, {num_heads}")
    device = _default_device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    total_q, total_kv = batchsize * qseqlen, batchsize * kvseqlen
    q = torch.randn(total_q, num_heads, HEAD_DIM, generator=gen, device=device).to(torch.bfloat16)
    kv = torch.randn(total_kv, 1, HEAD_DIM, generator=gen, device=device).to(torch.bfloat16)
    qo_indptr = torch.arange(0, total_q + 1, qseqlen, dtype=torch.int32, device=device)
    kv_indptr = torch.arange(0, total_kv + 1, max(kvseqlen, 1), dtype=torch.int32, device=device)
    if kvseqlen == 0:
        kv_indptr = torch.zeros(batchsize + 1, dtype=torch.int32, device=device)
    config = make_config(batchsize, num_heads, qseqlen, kvseqlen)
    return q, pack_kv_data(kv), qo_indptr, kv_indptr, config
