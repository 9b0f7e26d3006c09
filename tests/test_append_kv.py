"""``mixmla.append_kv``: the bits it writes are the torch quantizers' bits (bf16 as given, fp8
``encode_fp8`` with the cache's scale, MXFP4 ``quantize_mxfp4``), at exactly the slots given; -1
skips a row; every other row of the pool keeps its bytes; bad input writes nothing."""

from __future__ import annotations

import os

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import mixmla  # noqa: E402
from mixmla.formats import as_paged_cache, quantize_mxfp4  # noqa: E402
from mixmla.formats.fp8 import encode_fp8  # noqa: E402
from mixmla.writer import cache_rows  # noqa: E402

from conftest import DEVICE  # noqa: E402

EXAMPLES = int(os.environ.get("MIXMLA_HYPOTHESIS_EXAMPLES", "15"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FP8 = {"fp8": torch.float8_e4m3fn, "fp8-fnuz": torch.float8_e4m3fnuz}
# Values where rounding decides: E2M1 midpoints (ties), fp8 steps, zeros of both signs.
SPECIAL = [0.0, -0.0, 0.25, 0.75, -1.25, 1.75, 2.5, -3.5, 5.0, 6.0, 7.0, 1e-40, -3e-39, 448.0, 3e38]


def random_pool(fmt, num_pages, page_size, gen, scale=0.03):
    """A pool of random bytes (so an unwritten row cannot pass for a written one) in ``fmt``."""
    rows = num_pages * page_size

    def noise(width):
        return torch.randint(0, 256, (num_pages, page_size, width), generator=gen, dtype=torch.uint8).to(DEVICE)

    if fmt == "bf16":
        return as_paged_cache(noise(1152).view(torch.bfloat16))
    if fmt in FP8:
        return as_paged_cache((noise(576).view(FP8[fmt]), torch.tensor([scale], device=DEVICE)))
    return as_paged_cache((noise(288), torch.randint(0, 256, (rows + 5, 24), generator=gen, dtype=torch.uint8)
                           .to(DEVICE)))


def expected_rows(fmt, pool, kv):
    """(codes (n, width) uint8, MXFP4 scale bytes (n, 18) or None) the quantizers give for kv."""
    if fmt == "bf16":
        return kv.view(torch.uint8).reshape(kv.shape[0], 1152), None
    if fmt in FP8:
        return encode_fp8(kv, pool.rows.scale, FP8[fmt]).view(torch.uint8), None
    q = quantize_mxfp4(kv, pad_scales=False)
    return q.data, q.scales


def snapshot(pool):
    rows = pool.rows
    return [t.view(torch.uint8).clone() for t in ((rows.data,) + ((rows.scales,) if rows.format == "mxfp4" else ()))]


@st.composite
def appends(draw):
    page_size = draw(st.sampled_from([1, 16, 64]))
    num_pages = draw(st.integers(1, 4)) * (64 // page_size if page_size < 64 else 1)
    slots_total = num_pages * page_size
    n = draw(st.integers(0, min(24, slots_total)))
    return dict(fmt=draw(st.sampled_from(["bf16", "fp8", "fp8-fnuz", "mxfp4"])), page_size=page_size,
                num_pages=num_pages, n=n, seed=draw(st.integers(0, 2**31 - 1)),
                log_scale=draw(st.sampled_from([-130, -20, 0, 0, 10, 120])),
                skips=draw(st.lists(st.integers(0, max(0, n - 1)), max_size=3)), int32=draw(st.booleans()),
                specials=draw(st.booleans()))


@SETTINGS
@given(case=appends())
def test_append_writes_the_quantizers_bits(case):
    gen = torch.Generator().manual_seed(case["seed"])
    pool = random_pool(case["fmt"], case["num_pages"], case["page_size"], gen)
    n = case["n"]
    kv = torch.randn(n, 576, generator=gen) * 2.0 ** case["log_scale"]
    if case["specials"] and n:
        kv[0, :len(SPECIAL)] = torch.tensor(SPECIAL)
    if case["fmt"] != "bf16":  # quantizers need finite values: keep bf16's largest magnitudes finite
        kv = kv.clamp(-3e38, 3e38)
    kv = kv.to(torch.bfloat16).to(DEVICE)
    slots = torch.randperm(pool.num_slots, generator=gen)[:n]
    for i in case["skips"]:
        if i < n:
            slots[i] = -1
    slots = slots.to(DEVICE, torch.int32 if case["int32"] else torch.int64)
    before = snapshot(pool)
    mixmla.append_kv(pool, kv, slots)
    after = snapshot(pool)
    keep = slots >= 0
    codes, scales = expected_rows(case["fmt"], pool, kv[keep])
    written = slots[keep].long()
    assert torch.equal(after[0][written], codes.reshape(after[0][written].shape)), f"{case}: codes differ"
    if scales is not None:
        assert torch.equal(after[1][written, :18], scales), f"{case}: scale bytes differ"
        untouched_cols = torch.ones_like(after[1], dtype=torch.bool)
        untouched_cols[written, :18] = False
        assert torch.equal(after[1][untouched_cols], before[1][untouched_cols]), f"{case}: other scale bytes changed"
    others = torch.ones(after[0].shape[0], dtype=torch.bool, device=DEVICE)
    others[written] = False
    assert torch.equal(after[0][others], before[0][others]), f"{case}: rows that were not slotted changed"


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_fp8_ties_round_to_even(dtype):
    """Midpoints between neighbouring fp8 values, subnormal and normal, under a scale of 1."""
    sub = 2.0 ** (-9 if dtype == torch.float8_e4m3fn else -10)
    ties = [k * sub / 2 for k in range(1, 16, 2)] + [1.0625, 1.1875, 3.25, 3.75, 100.0, 104.0]
    row = torch.zeros(1, 576)
    row[0, :len(ties)] = torch.tensor(ties)
    row[0, 288:288 + len(ties)] = -torch.tensor(ties)
    kv = row.to(torch.bfloat16).to(DEVICE)
    assert torch.equal(kv.float().cpu(), row), "the ties must be exact in bf16"
    pool = as_paged_cache((torch.zeros(1, 4, 576, dtype=dtype, device=DEVICE), torch.ones(1, device=DEVICE)))
    mixmla.append_kv(pool, kv, torch.tensor([2], device=DEVICE))
    assert torch.equal(pool.rows.data[2].view(torch.uint8), encode_fp8(kv, pool.rows.scale, dtype)[0].view(torch.uint8))


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_fp8_every_bf16_value(dtype):
    """Every finite bf16 value under scales with full 24-bit significands (and one subnormal, one
    huge): the writer's quotient rounds as torch's division does, so its fp8 bits are the same."""
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    values = bits[torch.isfinite(bits.float())]
    values = torch.cat([values, values[:(-values.numel()) % 576]]).reshape(-1, 576).to(DEVICE)
    gen = torch.Generator().manual_seed(7)
    odd = (1.0 + torch.randint(1, 1 << 23, (3, ), generator=gen).double() * 2.0 ** -23) * 2.0 ** torch.tensor([-7, 0, 9])
    for scale in [*odd.float().tolist(), 0.0299999993, 3e-41, 1.5e30]:
        pool = as_paged_cache((torch.zeros(1, values.shape[0], 576, dtype=dtype, device=DEVICE),
                               torch.tensor([scale], dtype=torch.float32, device=DEVICE)))
        mixmla.append_kv(pool, values, torch.arange(values.shape[0], device=DEVICE))
        want = encode_fp8(values, pool.rows.scale, dtype).view(torch.uint8)
        assert torch.equal(pool.rows.data[:values.shape[0]].view(torch.uint8), want), f"scale {scale}"


@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
def test_contiguous_cache_rows_are_slots(fmt):
    """A contiguous container is written by row: the same bits as quantizing the new rows."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(40, 576, generator=gen).to(DEVICE)
    cache = mixmla.quantize(x, fmt)
    new = torch.randn(3, 576, generator=gen).to(DEVICE, torch.bfloat16)
    mixmla.append_kv(cache, new, torch.tensor([7, -1, 39], device=DEVICE))
    rows, slots = cache_rows(cache)
    assert slots == 40
    if fmt == "mxfp4":
        q = quantize_mxfp4(new[[0, 2]], pad_scales=False)
        assert torch.equal(cache.data[[7, 39]], q.data) and torch.equal(cache.scales[[7, 39], :18], q.scales)
    elif fmt == "fp8":
        assert torch.equal(cache.data[[7, 39]], encode_fp8(new[[0, 2]], cache.scale))
    else:
        assert torch.equal(cache.data[[7, 39]], new[[0, 2]])


@pytest.mark.parametrize("what,error,named", [
    ("slot past the pool", ValueError, r"slot_mapping\[1\] = 64 is not a slot"),
    ("slot below -1", ValueError, r"slot_mapping\[0\] = -2"),
    ("NaN row", ValueError, "kv holds NaN"),
    ("float32 rows", TypeError, "kv must have dtype torch.bfloat16"),
    ("narrow rows", ValueError, r"kv must have shape \(n, 576\)"),
    ("one slot short", ValueError, "slot_mapping must be 1-D with one slot per row"),
    ("float slots", TypeError, "slot_mapping must have dtype"),
    ("zero fp8 scale", ValueError, "cache: fp8 scale must be finite and > 0"),
])
def test_bad_input_writes_nothing(what, error, named):
    gen = torch.Generator().manual_seed(2)
    pool = random_pool("fp8", 4, 16, gen, scale=0.0 if what == "zero fp8 scale" else 0.03)
    kv = torch.randn(2, 576, generator=gen).to(DEVICE, torch.bfloat16)
    slots = torch.tensor([3, 10], device=DEVICE)
    if what == "slot past the pool":
        slots[1] = 64
    elif what == "slot below -1":
        slots[0] = -2
    elif what == "NaN row":
        kv[1, 5] = float("nan")
    elif what == "float32 rows":
        kv = kv.float()
    elif what == "narrow rows":
        kv = kv[:, :512]
    elif what == "one slot short":
        slots = slots[:1]
    elif what == "float slots":
        slots = slots.float()
    before = snapshot(pool)
    with pytest.raises(error, match=named):
        mixmla.append_kv(pool, kv, slots)
    assert all(torch.equal(a, b) for a, b in zip(before, snapshot(pool))), "nothing may be written"


def test_unchecked_slots_outside_the_pool_are_skipped():
    gen = torch.Generator().manual_seed(3)
    pool = random_pool("mxfp4", 2, 16, gen)
    before = snapshot(pool)
    kv = torch.randn(3, 576, generator=gen).to(DEVICE, torch.bfloat16)
    mixmla.append_kv(pool, kv, torch.tensor([32, -5, 5], device=DEVICE), check=False)
    after = snapshot(pool)
    changed = (after[0] != before[0]).any(1).nonzero().flatten().tolist()
    assert changed == [5], f"only slot 5 may be written, rows {changed} changed"


_COMPILE_CHILD = """
import json, sys, tempfile, os
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()  # a cached compile would not ask for the target again
import torch
from mixmla.formats import Fp8Cache
from mixmla.kernels.triton import compile as tc
from mixmla.writer import append_launch
for fnuz in json.loads(sys.argv[1]):
    dtype = torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn
    rows = Fp8Cache(torch.zeros(64, 576, dtype=dtype), torch.ones(1))
    one = append_launch(rows, 64, torch.zeros(16, 576, dtype=torch.bfloat16), torch.arange(16))
    ptx = tc.compile_launch(one).asm["ptx"]
    print(json.dumps(dict(fnuz=fnuz, cvt=ptx.count("cvt.rn.satfinite.e4m3x2.f32"), div32=ptx.count("div.rn.f32"))))
"""


def test_fp8_writer_compiles_to_the_hardware_conversion():
    """On sm_90 the e4m3fn writer converts with ``cvt.rn.satfinite.e4m3x2`` and divides by no
    float32 division; e4m3fnuz, which NVIDIA hardware does not convert, keeps the integer encoder."""
    from conftest import compile_in_child

    rows = {r["fnuz"]: r for r in compile_in_child(_COMPILE_CHILD, [False, True])}
    assert rows[False]["cvt"] > 0 and rows[False]["div32"] == 0, rows
    assert rows[True]["cvt"] == 0 and rows[True]["div32"] == 0, rows
