"""MXFP4 codes to e4m3 bytes with one exponent per token: the decoders of design steps 103-104,
checked bit-exactly on the CPU.

Step 97's key operand (``mxfp4_token_exponent.py``) is ``K'[t, d] = e4m3(c[t, d] * 2**-D)`` with
``D = r(t) - s(t, b)`` >= 0 the binades between the token's largest block exponent and the block's.
A code's three magnitude bits are a byte-permute selector, so one ``prmt`` looks up four e4m3
magnitudes at once in an 8-entry table of two words; the table depends only on ``D`` (``tables()``:
the 8 E2M1 magnitudes times ``2**-D``, rounded to e4m3, nearest even, as the emulation's cast
rounds them). The sign bits go into bit 7 of each byte as the bf16 decoder puts them into bit 15
(a byte permute of ``(word << 4, word)`` and one ``lop3``): ``MXFP4_TO_E4M3``, nine instructions
per 8 codes, no multiply. Gluon on triton 3.6 cannot gather from shared memory, so a kernel makes
its tables by arithmetic: ``arithmetic_tables``, exact to ``ARITHMETIC_SHIFTS`` binades only (the
e4m3 subnormals break the pattern; design step 103's first form used them). The exact forms go
through f16, whose tables by arithmetic are exact to
``F16_SHIFTS`` binades: ``MXFP4_TO_F16X2_E4M3`` decodes to f16 and rounds to e4m3 in hardware,
``E4M3_TABLES_FROM_F16`` makes the exact e4m3 tables from the f16 ones the same way.

``PYTHONPATH=src:tests python bench/studies/mxfp4_e4m3_decoder.py``: runs the checks in the PTX
subset interpreter of the test suite (every code byte in every byte position, every ``D`` from 0 to
20) and prints the instruction counts and the tables.
"""

from __future__ import annotations

import numpy as np
import torch

from mixmla.formats.mxfp4 import e2m1_decode

#: Largest ``D`` with its own table; larger ones use this one (every entry 0: 6 * 2**-15 is below
#: half of e4m3's smallest subnormal, 2**-9).
MAX_SHIFT = 15


def tables() -> np.ndarray:
    """(MAX_SHIFT + 1, 2) uint32: row D holds the e4m3 bytes of the E2M1 magnitudes 0, 0.5, 1, 1.5
    (word 0, byte i = magnitude i) and 2, 3, 4, 6 (word 1), times ``2**-D``."""
    mags = e2m1_decode(torch.arange(8)).double()
    rows = []
    for d in range(MAX_SHIFT + 1):
        b = (mags * 2.0**-d).to(torch.float8_e4m3fn).view(torch.uint8).numpy().astype(np.uint64)
        rows.append([int(b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24), int(b[4] | b[5] << 8 | b[6] << 16 | b[7] << 24)])
    return np.array(rows, dtype=np.uint64)


#: ``tables()[D]`` by arithmetic, for a kernel that cannot gather from shared memory (Gluon on
#: triton 3.6 has no such load): every nonzero magnitude's e4m3 byte drops by ``8 D`` while it stays
#: normal, which holds for ``D <= ARITHMETIC_SHIFTS`` (0.5 * 2**-5 = 2**-6, e4m3's smallest normal).
ARITHMETIC_BASE = (0x3C383000, 0x4C484440)
ARITHMETIC_STEP = (0x08080800, 0x08080808)
ARITHMETIC_SHIFTS = 5


def arithmetic_tables(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two table words for shifts ``d`` (0 .. ARITHMETIC_SHIFTS) as ``base - d * step``."""
    d = np.asarray(d, dtype=np.uint64)
    return tuple((np.uint64(b) - d * np.uint64(st)) & np.uint64(0xFFFFFFFF)
                 for b, st in zip(ARITHMETIC_BASE, ARITHMETIC_STEP))


#: ``$0, $1`` <- the e4m3 bytes of the 8 E2M1 codes of ``$2`` (byte k of the word: codes 2k (low
#: nibble) and 2k+1), values 0..3 in ``$0`` and 4..7 in ``$1``, byte i = value i; magnitudes from
#: the table words ``$3 $4`` (``tables()[D]``). Constraints ``"=r,=r,r,r,r"``.
MXFP4_TO_E4M3 = """
{
.reg .b32 sel, c4, sg, mag;
and.b32 sel, $2, 0x77777777;
shl.b32 c4, $2, 4;
prmt.b32 sg, c4, $2, 0x5140;
prmt.b32 mag, $3, $4, sel;
lop3.b32 $0, mag, sg, 0x80808080, 0xF8;
shr.b32 sel, sel, 16;
prmt.b32 sg, c4, $2, 0x7362;
prmt.b32 mag, $3, $4, sel;
lop3.b32 $1, mag, sg, 0x80808080, 0xF8;
}
"""


#: The exact form for a kernel: codes to f16 by one table lookup per four values (the f16 of an
#: E2M1 magnitude has a zero low byte, and ``2**-D`` takes ``4 D`` off its high byte while it stays
#: normal: ``D <= F16_SHIFTS``, 0.5 * 2**-13 = 2**-14), then the e4m3 bytes by the hardware's
#: rounding of those exact values. Beyond F16_SHIFTS the tables are zeros: such a block's e4m3
#: bytes are zeros anyway (6 * 2**-14 rounds to 0), and its f16 keys lie below 2**-11 of the
#: token's largest.
F16_BASE = (0x3E3C3800, 0x46444240)
F16_STEP = (0x04040400, 0x04040404)
F16_SHIFTS = 13


def f16_tables(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The f16 high-byte table words for shifts ``d``, zeros beyond F16_SHIFTS."""
    d = np.asarray(d, dtype=np.uint64)
    live = d <= F16_SHIFTS
    return tuple(np.where(live, (np.uint64(b) - d * np.uint64(st)) & np.uint64(0xFFFFFFFF), np.uint64(0))
                 for b, st in zip(F16_BASE, F16_STEP))


def _f16_word(word: str, t0: str, t1: str, lo: str, hi: str, f16: tuple[str, str, str, str]) -> str:
    """One code word to four f16x2 registers (byte k's two values in ``f16[k]``) and their e4m3
    bytes (values 0..3 in ``lo``, 4..7 in ``hi``)."""
    half = ("prmt.b32 sg, c4, W, SIGNS;\nprmt.b32 hi4, T0, T1, sel;\nlop3.b32 hi4, hi4, sg, 0x80808080, 0xF8;\n"
            "prmt.b32 FIRST, z, hi4, 0x5140;\nprmt.b32 SECOND, z, hi4, 0x7362;\n").replace("W", word)
    half = half.replace("T0", t0).replace("T1", t1)
    return (f"and.b32 sel, {word}, 0x77777777;\nshl.b32 c4, {word}, 4;\n"
            + half.replace("SIGNS", "0x5140").replace("FIRST", f16[0]).replace("SECOND", f16[1])
            + "shr.b32 sel, sel, 16;\n"
            + half.replace("SIGNS", "0x7362").replace("FIRST", f16[2]).replace("SECOND", f16[3])
            + "".join(f"cvt.rn.satfinite.e4m3x2.f16x2 {e}, {x};\n" for e, x in zip(("e0", "e1", "e2", "e3"), f16))
            + f"mov.b32 {lo}, {{e0, e1}};\nmov.b32 {hi}, {{e2, e3}};\n")


#: The exact decoder, for ``inline_asm_elementwise`` with ``pack=2`` on two code words of one
#: block: ``$0 .. $7`` <- one f16x2 register per byte of the code words ``$12 $13`` (low nibble in
#: the low half), the key operand's registers as the shipped bf16 decoder gives them; ``$8 $9`` <-
#: the e4m3 bytes of values 0..3 of each word, ``$10 $11`` of values 4..7 (the value tile's words);
#: ``f16_tables`` words ``$14 $15`` (first word, one per code word) and ``$16 $17`` (second).
#: Constraints 12 x ``=r`` then 6 x ``r``.
MXFP4_TO_F16X2_E4M3 = ("{\n.reg .b32 sel, c4, sg, hi4, z;\n.reg .b16 e0, e1, e2, e3;\nmov.b32 z, 0;\n"
                       + _f16_word("$12", "$14", "$16", "$8", "$10", ("$0", "$1", "$2", "$3"))
                       + _f16_word("$13", "$15", "$17", "$9", "$11", ("$4", "$5", "$6", "$7")) + "}")


#: ``$0, $1`` <- the exact e4m3 table words (``tables()[D]``) from the f16 ones ``$2 $3``
#: (``f16_tables``): the eight f16 magnitudes (high bytes over zero low bytes) rounded by the
#: hardware. Exact to F16_SHIFTS; zeros beyond, as ``tables()`` is from 13 on. Constraints
#: ``"=r,=r,r,r"``.
E4M3_TABLES_FROM_F16 = """
{
.reg .b32 z, m;
.reg .b16 e0, e1, e2, e3;
mov.b32 z, 0;
prmt.b32 m, z, $2, 0x5140;
cvt.rn.satfinite.e4m3x2.f16x2 e0, m;
prmt.b32 m, z, $2, 0x7362;
cvt.rn.satfinite.e4m3x2.f16x2 e1, m;
prmt.b32 m, z, $3, 0x5140;
cvt.rn.satfinite.e4m3x2.f16x2 e2, m;
prmt.b32 m, z, $3, 0x7362;
cvt.rn.satfinite.e4m3x2.f16x2 e3, m;
mov.b32 $0, {e0, e1};
mov.b32 $1, {e2, e3};
}
"""


def check_tables_from_f16() -> int:
    """``E4M3_TABLES_FROM_F16`` of ``f16_tables(D)`` equals ``tables()[D]`` for every D in 0..20
    (clamped to MAX_SHIFT on the exact side, where both are zeros). Returns the shifts checked."""
    import ptx_subset

    d = np.arange(21)
    t0, t1 = f16_tables(d)
    got = ptx_subset.run(E4M3_TABLES_FROM_F16, {2: t0, 3: t1}, 2)
    want = tables()[np.minimum(d, MAX_SHIFT)]
    assert np.array_equal(got[0], want[:, 0]) and np.array_equal(got[1], want[:, 1]), (got, want)
    return d.size


def instructions(asm: str = MXFP4_TO_E4M3) -> int:
    """PTX instructions of ``asm`` (declarations and braces not counted)."""
    body = [s.strip() for s in asm.replace("{", ";").replace("}", ";").split(";")]
    return sum(1 for s in body if s and not s.startswith(".reg"))


def check(seed: int = 0) -> int:
    """Every code byte in each of a word's four positions (the other three random), for every ``D``
    in 0..20 (clamped to MAX_SHIFT as a kernel would): the decoder's bytes equal torch's e4m3
    rounding of the exactly scaled E2M1 value, signed zeros included. Returns the cases checked."""
    import ptx_subset  # tests/ptx_subset.py

    rng = np.random.default_rng(seed)
    table = tables()
    d = np.arange(ARITHMETIC_SHIFTS + 2)
    w0, w1 = arithmetic_tables(d)
    exact = (w0 == table[d, 0]) & (w1 == table[d, 1])
    assert exact[:-1].all() and not exact[-1], "arithmetic tables: exact up to ARITHMETIC_SHIFTS, not beyond"
    cases = 0
    for pos in range(4):
        words = rng.integers(0, 1 << 32, size=(21, 256), dtype=np.uint64)
        words &= ~np.uint64(0xFF << (8 * pos))
        words |= np.arange(256, dtype=np.uint64)[None, :] << np.uint64(8 * pos)
        shift = np.broadcast_to(np.arange(21)[:, None], words.shape)
        row = table[np.minimum(shift, MAX_SHIFT).ravel()]
        got = ptx_subset.run(MXFP4_TO_E4M3, {2: words.ravel(), 3: row[:, 0], 4: row[:, 1]}, 2)
        for v in range(8):
            code = torch.from_numpy(((words.ravel() >> np.uint64(4 * v)) & np.uint64(0xF)).astype(np.int64))
            scale = torch.from_numpy(np.exp2(-shift.ravel().astype(np.float64)))
            want = (e2m1_decode(code).double() * scale).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
            byte = (got[v // 4] >> np.uint64(8 * (v % 4))) & np.uint64(0xFF)
            bad = np.flatnonzero(byte != want)
            assert bad.size == 0, (f"value {v}: word {int(words.ravel()[bad[0]]):#x} D={int(shift.ravel()[bad[0]])}: "
                                   f"{int(byte[bad[0]]):#04x} != {int(want[bad[0]]):#04x}")
            cases += byte.size
    return cases


def check_exact(seed: int = 2) -> int:
    """``MXFP4_TO_F16X2_E4M3`` on random word pairs and every shift 0..20 (tables from
    ``f16_tables``): each f16 is the E2M1 value times ``2**-D`` exactly for ``D <= F16_SHIFTS`` and
    zero beyond, and the e4m3 words equal ``MXFP4_TO_E4M3``'s with the exact ``tables()``. Returns
    the values checked."""
    import ptx_subset

    rng = np.random.default_rng(seed)
    n = 1 << 14
    words = rng.integers(0, 1 << 32, size=(2, n), dtype=np.uint64)
    shift = rng.integers(0, 21, size=(2, n))
    rows = [f16_tables(shift[i]) for i in range(2)]
    inputs = {12: words[0], 13: words[1], 14: rows[0][0], 15: rows[1][0], 16: rows[0][1], 17: rows[1][1]}
    got = ptx_subset.run(MXFP4_TO_F16X2_E4M3, inputs, 12)
    exact = tables()
    for i in range(2):
        t = exact[np.minimum(shift[i], MAX_SHIFT)]
        lo, hi = ptx_subset.run(MXFP4_TO_E4M3, {2: words[i], 3: t[:, 0], 4: t[:, 1]}, 2)
        assert np.array_equal(got[8 + i], lo) and np.array_equal(got[10 + i], hi), f"e4m3 words of word {i}"
        scale = torch.from_numpy(np.where(shift[i] <= F16_SHIFTS, np.exp2(-shift[i].astype(np.float64)), 0.0))
        for v in range(8):
            code = torch.from_numpy(((words[i] >> np.uint64(4 * v)) & np.uint64(0xF)).astype(np.int64))
            value = e2m1_decode(code).double() * scale
            # Zero codes and flushed blocks keep the code's sign (-0.0 for a negative code).
            want = torch.where(value == 0, torch.copysign(torch.zeros_like(value), e2m1_decode(code).double()), value)
            want = want.to(torch.float16).view(torch.int16).numpy().astype(np.uint64) & np.uint64(0xFFFF)
            half = (got[4 * i + v // 2] >> np.uint64(16 * (v % 2))) & np.uint64(0xFFFF)
            assert np.array_equal(half, want), f"word {i} value {v}"
    return 16 * n


def main() -> int:
    k = check_tables_from_f16()
    print(f"E4M3_TABLES_FROM_F16: {instructions(E4M3_TABLES_FROM_F16)} instructions per table; equal to tables() "
          f"for {k} shifts")
    e = check_exact()
    print(f"MXFP4_TO_F16X2_E4M3: {instructions(MXFP4_TO_F16X2_E4M3)} instructions per 16 codes; {e} values checked "
          f"(f16 exact to D = {F16_SHIFTS}, e4m3 equal to the exact tables' for D = 0..20)")
    n = check()
    print(f"MXFP4_TO_E4M3: {instructions()} instructions per 8 codes; {n} decoded values equal torch's e4m3 "
          f"rounding (D = 0..20)")
    for d, (w0, w1) in enumerate(tables()):
        print(f"  D={d:2d}: {int(w0):#010x} {int(w1):#010x}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
