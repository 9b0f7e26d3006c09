"""CPU checks of the Hopper kernel's decoders and register relabelling (no GPU needed).

The Gluon kernel cannot run in Triton's interpreter, so its two error-prone pieces are checked
here piece by piece: the inline-PTX decoders, evaluated by a small PTX interpreter
(``ptx_subset``), and the join/reshape/permute relabelling that turns decoder outputs into the
values' stored column order and then into the key operand's column order, replayed with the same
shape/order constants in torch. The kernel as a whole is checked on the GPU (test_hopper_gpu.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ptx_subset
from mixmla.formats.mxfp4 import e2m1_decode
from mixmla.kernels.gluon import fp8 as gfp8
from mixmla.kernels.gluon import layouts
from mixmla.kernels.gluon import mxfp4 as gmx

RNG = np.random.default_rng(20261201)


def _halves_bf16(reg):
    lo = torch.from_numpy((reg & 0xFFFF).astype(np.int32)).to(torch.int16).view(torch.bfloat16).float()
    hi = torch.from_numpy((reg >> 16).astype(np.int32)).to(torch.int16).view(torch.bfloat16).float()
    return lo, hi


def _halves_f16(reg):
    lo = torch.from_numpy((reg & 0xFFFF).astype(np.int32)).to(torch.int16).view(torch.float16).float()
    hi = torch.from_numpy((reg >> 16).astype(np.int32)).to(torch.int16).view(torch.float16).float()
    return lo, hi


def _mxfp4_asm(words0, words1, scale_bytes):
    mult = scale_bytes.astype(np.uint64) * 0x800080  # as mxfp4.decode_chunk builds it
    tables = [t & 0xFFFFFFFF for t in (gmx.HI_TABLE_0.value, gmx.HI_TABLE_1.value, gmx.LO_TABLE_0.value,
                                      gmx.LO_TABLE_1.value)]
    inputs = {8: words0, 9: words1, 10: mult, 11: mult}
    for i, t in enumerate(tables):
        inputs[12 + 2 * i] = inputs[13 + 2 * i] = np.full(words0.shape, t, dtype=np.uint64)
    return ptx_subset.run(gmx.DECODE_ASM.value, inputs, 8)


def test_mxfp4_decoder_gives_each_byte_as_one_bf16_pair_exactly():
    n = 4096
    words = RNG.integers(0, 1 << 32, size=(n, 2), dtype=np.uint64)
    scales = RNG.integers(1, 255, size=n, dtype=np.uint64)  # every finite scale byte
    regs = _mxfp4_asm(words[:, 0], words[:, 1], scales)
    codes = np.stack([(words[:, b // 4] >> np.uint64(8 * (b % 4))) & np.uint64(0xFF) for b in range(8)], 1)
    scale = torch.exp2(torch.from_numpy(scales.astype(np.float64)) - 127)
    for b in range(8):
        lo, hi = _halves_bf16(regs[b])
        for nib, got in ((0, lo), (1, hi)):
            code = torch.from_numpy(((codes[:, b] >> np.uint64(4 * nib)) & np.uint64(0xF)).astype(np.int64))
            want = (e2m1_decode(code).double() * scale).to(torch.bfloat16).float()
            assert torch.equal(got, want), f"byte {b} nibble {nib}"


def test_mxfp4_decoder_is_exact_for_every_code_byte_and_finite_scale():
    """All 256 code bytes under every E8M0 byte the quantizer writes but 0 (1..254): each value's
    bf16 bits (signed zeros, and infinity where 2, 3, 4 or 6 times 2**127 overflows, included)
    are those of the exactly scaled E2M1 value rounded to bf16."""
    words = np.arange(256, dtype=np.uint64).reshape(32, 8)  # word-pair i holds bytes 8i .. 8i+7
    w0 = words[:, 0] | (words[:, 1] << 8) | (words[:, 2] << 16) | (words[:, 3] << 24)
    w1 = words[:, 4] | (words[:, 5] << 8) | (words[:, 6] << 16) | (words[:, 7] << 24)
    scales = np.arange(1, 255, dtype=np.uint64)
    w0, w1, sc = (np.broadcast_to(a, (scales.size, 32)).ravel() for a in (w0[None], w1[None], scales[:, None]))
    regs = _mxfp4_asm(w0, w1, sc)
    scale = torch.exp2(torch.from_numpy(sc.astype(np.float64)) - 127)
    for b in range(8):
        byte = torch.from_numpy(((w0, w1)[b // 4] >> np.uint64(8 * (b % 4))) & np.uint64(0xFF)).long()
        for nib in range(2):
            want = (e2m1_decode((byte >> (4 * nib)) & 15).double() * scale).to(torch.bfloat16).view(torch.int16)
            got = torch.from_numpy(((regs[b] >> np.uint64(16 * nib)) & np.uint64(0xFFFF)).astype(np.int32)).to(torch.int16)
            assert torch.equal(got, want), f"byte {b} nibble {nib}"


def test_mxfp4_scale_load_zero_extends_the_byte_or_gives_127():
    memory = np.arange(256, dtype=np.uint8)[::-1].copy()
    addr = np.arange(256, dtype=np.uint64)
    for ok in (0, 1):
        got = ptx_subset.run(gmx.SCALE_LOAD_ASM.value, {1: addr, 2: np.full(256, ok, dtype=np.uint64)}, 1, memory)[0]
        assert np.array_equal(got, memory.astype(np.uint64) if ok else np.full(256, 127, dtype=np.uint64)), ok


def test_mxfp4_decoder_scale_edges():
    """Scale byte 0 (values below 2**-125) decodes to zeros; the NaN byte 255 never gives a finite
    number for a nonzero code."""
    words = RNG.integers(0, 1 << 32, size=(256, 2), dtype=np.uint64)
    for byte, check in ((0, lambda x: torch.all(x == 0)), (255, lambda x: not torch.any(torch.isfinite(x[x != 0])))):
        regs = _mxfp4_asm(words[:, 0], words[:, 1], np.full(256, byte, dtype=np.uint64))
        vals = torch.cat([torch.cat(_halves_bf16(r)) for r in regs])
        assert check(vals), byte


def test_mxfp4_column_decoder_pairs_one_column_of_two_rows_exactly():
    """The value path's decoder (``mxfp4.decode_columns``): a 32-bit register holds two 16-bit
    code pairs, row t's columns 4j .. 4j+3 (low half) and row t+1's (high half); output register i
    must be column 4j + i of rows t and t+1, each scaled by its own row's block scale, bit-exactly
    (every code pair and every finite scale byte but 0)."""
    pairs = np.arange(1 << 16, dtype=np.uint64)
    lo = RNG.permutation(pairs)
    hi = RNG.permutation(pairs)
    s_lo = RNG.integers(1, 255, size=pairs.size, dtype=np.uint64)
    s_hi = RNG.integers(1, 255, size=pairs.size, dtype=np.uint64)
    scale_pair = s_lo | (s_hi << np.uint64(16))  # as mxfp4.value_scales gives it
    tables = [t & 0xFFFFFFFF for t in (gmx.HI_TABLE_0.value, gmx.HI_TABLE_1.value, gmx.LO_TABLE_0.value,
                                      gmx.LO_TABLE_1.value)]
    inputs = {4: lo | (hi << np.uint64(16)), 5: scale_pair}
    for i, t in enumerate(tables):
        inputs[6 + 2 * i] = inputs[7 + 2 * i] = np.full(pairs.shape, t, dtype=np.uint64)
    regs = ptx_subset.run(gmx.COLUMNS_ASM.value, inputs, 4)
    for i in range(4):
        for half, (codes, sc) in enumerate(((lo, s_lo), (hi, s_hi))):
            code = torch.from_numpy(((codes >> np.uint64(4 * i)) & np.uint64(0xF)).astype(np.int64))
            scale = torch.exp2(torch.from_numpy(sc.astype(np.float64)) - 127)
            want = (e2m1_decode(code).double() * scale).to(torch.bfloat16).view(torch.int16)
            got = torch.from_numpy(((regs[i] >> np.uint64(16 * half)) & np.uint64(0xFFFF)).astype(np.int32))
            assert torch.equal(got.to(torch.int16), want), f"column {i} row {half}"


def test_fp8_decoder_converts_every_byte_exactly():
    all_bytes = np.arange(256, dtype=np.uint64)
    all_bytes = all_bytes[(all_bytes & 0x7F) != 0x7F]  # e4m3fn NaN codes are not cache values
    b = RNG.choice(all_bytes, size=(4096, 8))
    w0 = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)
    w1 = b[:, 4] | (b[:, 5] << 8) | (b[:, 6] << 16) | (b[:, 7] << 24)
    regs = ptx_subset.run(gfp8.DECODE_ASM.value, {4: w0, 5: w1}, 4)
    ref = torch.from_numpy(b.astype(np.uint8)).view(torch.float8_e4m3fn).float()
    for k in range(4):
        lo, hi = _halves_f16(regs[k])
        assert torch.equal(lo, ref[:, 2 * k]) and torch.equal(hi, ref[:, 2 * k + 1])


def _join_tree(xs):
    """torch replay of the kernel's nested gl.join: join(a, b) stacks along a new minor axis."""
    while len(xs) > 1:
        xs = [torch.stack([xs[i], xs[i + 1]], -1) for i in range(0, len(xs), 2)]
    return xs[0]


@pytest.mark.parametrize("fmt", ["mxfp4", "fp8"])
def test_decoded_chunk_comes_out_in_stored_column_order(fmt):
    """Replays one chunk through the decoders' element-pair semantics (``inline_asm_elementwise``
    with pack=2 hands an invocation two consecutive register elements of a thread: words 2u and
    2u+1 of one row) and the kernel's join/reshape/permute; the result must be the chunk's values
    in stored order."""
    rows = 64
    if fmt == "mxfp4":
        nbytes, mod = 32, gmx
        codes = torch.randint(0, 256, (rows, nbytes), dtype=torch.int64)
        vals = torch.stack([e2m1_decode(codes & 15), e2m1_decode(codes >> 4)], -1).reshape(rows, 64)
        per_byte = vals.reshape(rows, nbytes, 2)  # the two values a decoder register holds
    else:
        nbytes, mod = 64, gfp8
        codes = torch.randint(0, 256, (rows, nbytes), dtype=torch.int64)
        vals = torch.arange(rows * 64, dtype=torch.float32).reshape(rows, 64)  # any distinct values
        per_byte = vals.reshape(rows, nbytes // 2, 2)  # register k holds bytes 2k, 2k+1
    # Output register x of the invocation on words (2u, 2u+1): element 2u+m gets per_byte[.., x, m]
    # of that invocation's bytes (8 for MXFP4: one register per byte; 8 bytes -> 4 registers for fp8).
    regs_per_call = 8 if fmt == "mxfp4" else 4
    calls = per_byte.reshape(rows, -1, regs_per_call, 2)  # (row, u, x, m)
    xs = [calls[:, :, x, :].reshape(rows, -1) for x in range(regs_per_call)]  # x_x[row, 2u + m]
    joined = _join_tree(xs)
    out = joined.reshape(mod.JOIN_SHAPE.value).permute(mod.JOIN_ORDER.value).reshape(rows, 64)
    assert torch.equal(out, vals)


def test_key_operand_relabelling_matches_the_query_column_order():
    phys = torch.arange(64 * 64).reshape(64, 64)
    logical = phys.reshape(64, *layouts.KEY_SPLIT.value).permute(layouts.KEY_ORDER.value).reshape(64, 64)
    k = torch.arange(64)
    col = layouts.chunk_column_host(k)
    assert sorted(col.tolist()) == list(range(64))
    assert torch.equal(logical, phys[:, col])
