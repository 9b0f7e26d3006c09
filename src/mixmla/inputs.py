"""Benchmark inputs: the GPU MODE ``amd-mixed-mla`` contract of docs/SPEC.md, seeded.

``data = (q, kv_data, qo_indptr, kv_indptr, config)`` with ``kv_data`` holding the same cache in
all three formats: ``{"bf16": Tensor, "fp8": (Tensor, scale), "mxfp4": (Tensor, scales)}``.

Generators (all return that tuple):
- :func:`generate_input`: the benchmark's uniform batch, standard-normal q and cache.
- :func:`generate_ragged`: random per-request lengths, including 0 and 1 (CUDA-graph padding).
- :func:`generate_staircase`: scores that rise and fall across tiles (the online softmax's maximum).
- :func:`generate_realistic`: a non-Gaussian cache (outlier channels, larger rope dims) for
  accuracy studies of the quantized formats (:func:`realistic_cache`: the same cache unrounded).

Shapes are written as spec lines, ``batchsize: 4; qseqlen: 1; kvseqlen: 1024; seed: 4220``
(:func:`parse_spec_line`, :func:`parse_spec_file`); :data:`BENCHMARK_SHAPES` and
:data:`TEST_SHAPES` are the built-in lists and :func:`generate_from_spec` turns one into inputs.
"""

from __future__ import annotations

import math
import os
from typing import Sequence

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


def _lengths(lengths: Sequence[int], device: torch.device) -> torch.Tensor:
    """(batch+1,) int32 prefix sums of per-request lengths."""
    ptr = [0]
    for n in lengths:
        ptr.append(ptr[-1] + int(n))
    return torch.tensor(ptr, dtype=torch.int32, device=device)


def _random_kv_lengths(batchsize: int, max_kvseqlen: int, include_empty: bool, gen: torch.Generator) -> list[int]:
    """Per-request cache lengths in [0, max_kvseqlen]: the maximum always occurs (so it is the
    config's kv_seq_len), 0 and 1 occur when ``include_empty`` and the batch has room, the rest are
    half uniform, half log-uniform (many short requests, as in real serving)."""
    low = 0 if include_empty else 1
    forced = [max_kvseqlen] + ([0, 1] if include_empty else [])
    forced = forced[:batchsize]
    lengths = []
    for _ in range(batchsize - len(forced)):
        u = float(torch.rand((), generator=gen))
        if float(torch.rand((), generator=gen)) < 0.5:
            n = low + int(u * (max_kvseqlen - low + 1))
        else:
            n = int(math.exp(u * math.log(max_kvseqlen + 1))) - 1
        lengths.append(min(max(n, low), max_kvseqlen))
    lengths = forced + lengths
    order = torch.randperm(batchsize, generator=gen).tolist()
    return [lengths[i] for i in order]


def generate_ragged(
    batchsize: int,
    qseqlen: int | Sequence[int],
    max_kvseqlen: int,
    seed: int,
    num_heads: int = 16,
    device=None,
    include_empty: bool = True,
    kvseqlens: Sequence[int] | None = None,
):
    """A ragged batch: every request has its own cache length (and optionally query count).

    batchsize: requests. qseqlen: query tokens per request, one int for all or a sequence of
    ``batchsize`` ints (0 allowed). max_kvseqlen: the longest cache; lengths are drawn from
    [0, max_kvseqlen] (``include_empty=False``: [1, max_kvseqlen]) and the maximum always occurs.
    With ``include_empty`` and ``batchsize >= 3`` the lengths 0 and 1 both occur, as padding slots
    of CUDA-graph batches do. kvseqlens: give the lengths explicitly instead (then
    ``max_kvseqlen`` and ``include_empty`` are ignored). A request with fewer cached tokens than
    query tokens is legal: its first queries see no row and must output zeros.

    Returns ``(q, kv_data, qo_indptr, kv_indptr, config)`` as :func:`generate_input` does: q
    (total_q, num_heads, 576) bf16 and the cache (total_kv, 1, 576) bf16 standard normal plus its
    fp8/MXFP4 forms, int32 indptrs (batchsize+1,). ``config["kv_seq_len"]`` and
    ``config["q_seq_len"]`` are the *maximum* over requests (an upper bound to size buffers by, not
    the total: use the indptrs); the per-request lists are in ``config["kv_seq_lens"]`` and
    ``config["q_seq_lens"]``. Lengths are drawn on the CPU, so they do not depend on ``device``.
    """
    if batchsize < 1 or num_heads < 1:
        raise ValueError(f"need batchsize >= 1 and num_heads >= 1, got {batchsize}, {num_heads}")
    device = _default_device(device)
    length_gen = torch.Generator().manual_seed(seed)
    if kvseqlens is None:
        if max_kvseqlen < 0:
            raise ValueError(f"max_kvseqlen must be >= 0, got {max_kvseqlen}")
        kv_lens = _random_kv_lengths(batchsize, max_kvseqlen, include_empty, length_gen)
    else:
        kv_lens = [int(n) for n in kvseqlens]
    q_lens = [int(qseqlen)] * batchsize if isinstance(qseqlen, int) else [int(n) for n in qseqlen]
    for name, lens in (("kvseqlens", kv_lens), ("qseqlen", q_lens)):
        if len(lens) != batchsize or min(lens) < 0:
            raise ValueError(f"{name} must be {batchsize} non-negative lengths, got {lens}")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    q = torch.randn(sum(q_lens), num_heads, HEAD_DIM, generator=gen, device=device).to(torch.bfloat16)
    kv = torch.randn(sum(kv_lens), 1, HEAD_DIM, generator=gen, device=device).to(torch.bfloat16)
    config = make_config(batchsize, num_heads, max(q_lens), max(kv_lens))
    config["q_seq_lens"], config["kv_seq_lens"] = q_lens, kv_lens
    return q, pack_kv_data(kv), _lengths(q_lens, device), _lengths(kv_lens, device), config


def generate_staircase(levels: Sequence[float], num_heads: int = 16, seed: int = 21, device=None):
    """Three requests whose scores rise and fall across 64-token tiles, for the online softmax's
    running maximum: every key points along one random direction ``u`` that every query row
    shares, scaled so that tile i's largest score in base-2 units (``sm_scale * log2(e) * q.k``) is
    about ``levels[i]`` (each token's level minus up to 2). Request 0 walks the levels in order,
    request 1 holds the second half of request 0's tokens in reverse order (its levels fall),
    request 2 is request 0 again; one query token each.

    levels: per-tile score levels (base-2 units; values near 100 make scores near 2**100 before
    the shift). Returns ``(q, kv_data, qo_indptr, kv_indptr, config)`` as :func:`generate_ragged`
    does (q (3, num_heads, 576) bf16, the cache in all three formats)."""
    device = _default_device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    tiles = len(levels)
    u = torch.randn(HEAD_DIM, generator=gen, device=device)
    q = (u + 0.05 * torch.randn(3, num_heads, HEAD_DIM, generator=gen, device=device)).to(torch.bfloat16)
    # score_t (base 2) = sm_scale * log2(e) * q.k_t ~ a_t when k_t = a_t * u * ln 2 / (sm_scale |u|^2)
    level = torch.tensor(list(levels), dtype=torch.float32, device=device).repeat_interleave(64)
    a = level - 2.0 * torch.rand(tiles * 64, generator=gen, device=device)
    k = a[:, None] * u[None, :] * (math.log(2.0) / (default_sm_scale() * float(u @ u)))
    k = k + 0.02 * torch.randn(k.shape, generator=gen, device=device)
    kv = torch.cat([k, k.flip(0)[: tiles * 32], k])
    kv_lens = [tiles * 64, tiles * 32, tiles * 64]
    config = make_config(3, num_heads, 1, max(kv_lens))
    config["q_seq_lens"], config["kv_seq_lens"] = [1, 1, 1], kv_lens
    return q, pack_kv_data(kv), _lengths([1, 1, 1], device), _lengths(kv_lens, device), config


def realistic_cache(
    num_tokens: int,
    seed: int,
    device=None,
    num_outlier_channels: int = 6,
    outlier_gain: tuple[float, float] = (10.0, 50.0),
    rope_gain: float = 4.0,
) -> tuple[torch.Tensor, list[int]]:
    """The unrounded cache of :func:`generate_realistic`: (num_tokens, 1, 576) float32.

    Before any bf16 rounding, so accuracy studies can compare every format (bf16 included) with
    the exact values. The statistics are described in :func:`generate_realistic`, which rounds
    exactly this tensor to bf16. Returns ``(cache, outlier_channels)``, the outlier latent channel
    indices sorted. Deterministic in ``seed`` for a given device.
    """
    if not 0 <= num_outlier_channels <= VALUE_DIM:
        raise ValueError(f"num_outlier_channels must be in [0, {VALUE_DIM}], got {num_outlier_channels}")
    device = _default_device(device)
    cpu_gen = torch.Generator().manual_seed(seed)
    channel_gain = torch.exp(0.3 * torch.randn(HEAD_DIM, generator=cpu_gen, dtype=torch.float64))
    outliers = torch.randperm(VALUE_DIM, generator=cpu_gen)[:num_outlier_channels]
    lo, hi = outlier_gain
    channel_gain[outliers] = lo + (hi - lo) * torch.rand(num_outlier_channels, generator=cpu_gen, dtype=torch.float64)
    channel_gain[VALUE_DIM:] = rope_gain
    gen = torch.Generator(device=device)
    gen.manual_seed(seed + 1)  # independent of the q that generate_input draws from ``seed``
    token_gain = torch.exp(0.25 * torch.randn(num_tokens, 1, 1, generator=gen, device=device))
    kv = torch.randn(num_tokens, 1, HEAD_DIM, generator=gen, device=device)
    kv = kv * token_gain * channel_gain.to(device=device, dtype=torch.float32)
    return kv, sorted(int(c) for c in outliers)


def generate_realistic(
    batchsize: int,
    qseqlen: int,
    kvseqlen: int,
    seed: int,
    num_heads: int = 16,
    device=None,
    num_outlier_channels: int = 6,
    outlier_gain: tuple[float, float] = (10.0, 50.0),
    rope_gain: float = 4.0,
):
    """A uniform batch whose cache looks more like a trained model's than white noise does.

    Real MLA latents are not i.i.d. Gaussian: a few channels carry outliers one to two orders of
    magnitude larger than the rest, and the rope dims (512..575) are larger than the latent ones.
    That is what separates the formats: an outlier inflates its MXFP4 block's exponent (crushing
    the other 31 values of the block towards zero) and the fp8 per-tensor scale (pushing everything
    else towards the subnormals). Here:

    - latent channels 0..511 have a per-channel gain drawn log-normally around 1 (sigma 0.3), and
      ``num_outlier_channels`` of them, chosen at random, a gain uniform in ``outlier_gain``;
    - rope dims 512..575 have gain ``rope_gain``;
    - every token has its own log-normal gain (sigma 0.25), so token norms vary.

    Shapes, dtypes and the returned tuple are as in :func:`generate_input` (q stays standard
    normal bf16). ``config["outlier_channels"]`` lists the outlier channel indices. Deterministic
    in ``seed`` for a given device. The cache before bf16 rounding is :func:`realistic_cache`.
    """
    q, _, qo_indptr, kv_indptr, config = generate_input(batchsize, qseqlen, kvseqlen, seed, num_heads, device)
    kv, outliers = realistic_cache(batchsize * kvseqlen, seed, q.device, num_outlier_channels, outlier_gain, rope_gain)
    config["outlier_channels"] = outliers
    return q, pack_kv_data(kv.to(torch.bfloat16)), qo_indptr, kv_indptr, config


# ---------------------------------------------------------------------------------------------
# Spec lines and the built-in shape lists
# ---------------------------------------------------------------------------------------------

#: Keys every spec line must have.
SPEC_REQUIRED_KEYS = ("batchsize", "qseqlen", "kvseqlen", "seed")


def _parse_value(text: str):
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def parse_spec_line(line: str) -> dict:
    """Parse ``"batchsize: 4; qseqlen: 1; kvseqlen: 1024; seed: 4220"`` into
    ``{"batchsize": 4, "qseqlen": 1, "kvseqlen": 1024, "seed": 4220}``.

    ``key: value`` pairs separated by ``;``; keys are lower-cased; values become int, else float,
    else stay strings. The four keys ``batchsize, qseqlen, kvseqlen, seed`` are required. Optional
    keys this project understands: ``numheads`` (query heads, default 16) and ``ragged`` (1: random
    per-request lengths up to ``kvseqlen``, see :func:`generate_ragged`); other keys are kept.
    Raises ValueError naming the offending part.
    """
    spec: dict = {}
    for part in line.strip().split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition(":")
        key, value = key.strip().lower(), value.strip()
        if not sep or not key or not value:
            raise ValueError(f"bad spec item {part!r} in {line!r}: expected 'key: value'")
        if key in spec:
            raise ValueError(f"key {key!r} given twice in {line!r}")
        spec[key] = _parse_value(value)
    missing = [k for k in SPEC_REQUIRED_KEYS if k not in spec]
    if missing:
        raise ValueError(f"spec line {line!r} lacks {', '.join(missing)}")
    for key in SPEC_REQUIRED_KEYS + tuple(k for k in ("numheads", "ragged") if k in spec):
        if not isinstance(spec[key], int):
            raise ValueError(f"{key} must be an integer in {line!r}, got {spec[key]!r}")
    return spec


def parse_spec_file(path: str | os.PathLike) -> list[dict]:
    """Every spec line of a text file, in order; blank lines and lines starting with ``#`` are
    skipped. Errors name the file and line number."""
    specs = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                specs.append(parse_spec_line(line))
            except ValueError as e:
                raise ValueError(f"{path}:{number}: {e}") from None
    return specs


def format_spec(spec: dict) -> str:
    """The spec line of a spec dict (inverse of :func:`parse_spec_line`)."""
    return "; ".join(f"{k}: {v}" for k, v in spec.items())


def generate_from_spec(spec: dict, device=None):
    """Inputs for one spec dict: :func:`generate_ragged` when ``spec["ragged"]`` is true (then
    ``kvseqlen`` is the maximum length), else :func:`generate_input`. Returns the benchmark tuple."""
    num_heads = int(spec.get("numheads", 16))
    if spec.get("ragged"):
        return generate_ragged(spec["batchsize"], spec["qseqlen"], spec["kvseqlen"], spec["seed"],
                               num_heads=num_heads, device=device)
    return generate_input(spec["batchsize"], spec["qseqlen"], spec["kvseqlen"], spec["seed"],
                          num_heads=num_heads, device=device)


def _spec(batchsize: int, qseqlen: int, kvseqlen: int, seed: int, **extra) -> dict:
    return {"batchsize": batchsize, "qseqlen": qseqlen, "kvseqlen": kvseqlen, "seed": seed, **extra}


#: The 8 ranked benchmark shapes of docs/SPEC.md (q_seq_len 1, 16 heads), with fixed seeds.
BENCHMARK_SHAPES: list[dict] = [
    _spec(4, 1, 1024, 4220),
    _spec(4, 1, 8192, 4221),
    _spec(32, 1, 1024, 5412),
    _spec(32, 1, 8192, 5415),
    _spec(64, 1, 1024, 6407),
    _spec(64, 1, 8192, 6409),
    _spec(256, 1, 1024, 7301),
    _spec(256, 1, 8192, 7303),
]

#: Small correctness shapes (fast under the Triton interpreter on a CPU): edge lengths (0, 1,
#: non-multiples of any tile), multi-token prediction (qseqlen 4), 32 heads (TP 4), ragged batches.
TEST_SHAPES: list[dict] = [
    _spec(1, 1, 1, 101),
    _spec(2, 1, 0, 102),
    _spec(2, 1, 64, 103),
    _spec(3, 1, 257, 104),
    _spec(8, 1, 33, 105),
    _spec(1, 1, 1024, 106),
    _spec(4, 4, 100, 107),
    _spec(2, 1, 200, 108, numheads=32),
    _spec(2, 4, 130, 109, numheads=32),
    _spec(6, 1, 300, 110, ragged=1),
    _spec(5, 4, 96, 111, ragged=1),
]
