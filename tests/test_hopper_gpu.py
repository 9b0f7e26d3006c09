"""The Hopper (Gluon) kernel on an H200: strict correctness, log-sum-exp, determinism.

Every case compares with the float64 reference on the same dequantized cache, writes into
NaN-poisoned outputs, and draws fresh random inputs from its own seed.
"""

from __future__ import annotations

import pytest
import torch

from mixmla.check import check_strict
from mixmla.formats import as_cache
from mixmla.inputs import generate_input, generate_ragged, generate_staircase
from mixmla.paged import scatter_to_pages
from mixmla.reference import default_sm_scale, mla_decode_reference

pytestmark = pytest.mark.gpu


def _hopper():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    from mixmla.kernels.gluon.launch import HopperDecoder
    return HopperDecoder


def _run(decoder, q, cache, kv_indptr, qo_indptr):
    out = torch.full((q.shape[0], q.shape[1], 512), float("nan"), dtype=torch.bfloat16, device=q.device)
    lse = torch.full((q.shape[0], q.shape[1]), float("nan"), dtype=torch.float32, device=q.device)
    decoder.launch(q, cache, kv_indptr, qo_indptr, out, lse, default_sm_scale())
    return out, lse


def _check(q, cache, kv_indptr, qo_indptr, out, lse):
    ref, ref_lse = mla_decode_reference(q, cache, kv_indptr, qo_indptr)
    result = check_strict(out, ref)
    assert result.passed, result.message
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite), "lse is -inf exactly where no cached token is seen"
    assert torch.allclose(lse[finite].double(), ref_lse[finite], rtol=1e-3, atol=1e-3)
    assert torch.all(out[~finite].float() == 0)


CASES = [(1, 1), (1, 64), (1, 65), (2, 1000), (4, 1024), (64, 1024), (3, 8192), (300, 100), (1, 131072)]


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
@pytest.mark.parametrize("batch,kv_len", CASES)
def test_uniform_batches(fmt, batch, kv_len):
    HopperDecoder = _hopper()
    q, kv, qo_indptr, kv_indptr, _ = generate_input(batch, 1, kv_len, seed=1000 * batch + kv_len, device="cuda")
    cache = as_cache(kv[fmt])
    decoder = HopperDecoder(batch, 16, fmt, q.device)
    out, lse = _run(decoder, q, cache, kv_indptr, qo_indptr)
    _check(q, cache, kv_indptr, qo_indptr, out, lse)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
@pytest.mark.parametrize("kv_len", [1000, 64, 8191])
def test_rows_of_the_next_request_do_not_reach_a_request(fmt, kv_len):
    """A tile of 64 rows reaches past its request's end into the next request's rows (the copies
    and loads are of whole tiles): those rows are NaN here, and the first request must not see
    them."""
    HopperDecoder = _hopper()
    q, kv, qo_indptr, kv_indptr, _ = generate_input(2, 1, kv_len, seed=77 + kv_len, device="cuda")
    cache = as_cache(kv[fmt])
    if fmt == "fp8":
        cache.data.view(torch.uint8)[kv_len:] = 0x7F  # e4m3fn NaN
    else:
        cache.scales.view(torch.uint8)[kv_len:2 * kv_len] = 0xFF  # E8M0 NaN
    decoder = HopperDecoder(2, 16, fmt, q.device)
    out, lse = _run(decoder, q, cache, kv_indptr, qo_indptr)
    ref, ref_lse = mla_decode_reference(q[:1], cache, kv_indptr[:2], qo_indptr[:2])
    result = check_strict(out[:1], ref)
    assert result.passed, result.message
    assert torch.allclose(lse[:1].double(), ref_lse, rtol=1e-3, atol=1e-3)
    assert torch.isnan(out[1].float()).all(), "the second request reads its own NaN rows"


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_ragged_with_empty_requests_and_new_lengths(fmt):
    HopperDecoder = _hopper()
    decoder = HopperDecoder(37, 16, fmt, torch.device("cuda"))
    for seed in (11, 12):  # the same decoder, two batch layouts: lengths are read on the device
        q, kv, qo_indptr, kv_indptr, _ = generate_ragged(37, 1, 5000, seed=seed, device="cuda")
        cache = as_cache(kv[fmt])
        out, lse = _run(decoder, q, cache, kv_indptr, qo_indptr)
        _check(q, cache, kv_indptr, qo_indptr, out, lse)


def test_staged_kernel_reads_mxfp4_caches():
    """``decode_tma``'s form for contiguous MXFP4 caches (built, not yet the one served: slower than
    ``decode``): ragged batches with empty requests, two layouts, the strict check of the reference,
    NaN-poisoned outputs, and bitwise repeatable."""
    HopperDecoder = _hopper()
    decoder = HopperDecoder(37, 16, "mxfp4", torch.device("cuda"), staged_kernel=True)
    assert decoder.programs == torch.cuda.get_device_properties(0).multi_processor_count
    for seed in (13, 14):
        q, kv, qo_indptr, kv_indptr, _ = generate_ragged(37, 1, 5000, seed=seed, device="cuda")
        cache = as_cache(kv["mxfp4"])
        out, lse = _run(decoder, q, cache, kv_indptr, qo_indptr)
        _check(q, cache, kv_indptr, qo_indptr, out, lse)
        again = _run(decoder, q, cache, kv_indptr, qo_indptr)
        assert torch.equal(out.view(torch.int16), again[0].view(torch.int16)) and torch.equal(lse, again[1])


#: Per-tile maximum score (log2 units) of the staircase test: steps below the kernel's rescale
#: threshold (the stale maximum is kept, probabilities up to 2**8 enter the products) and jumps above
#: it (the accumulators are rescaled), rising and falling.
STAIRCASE = [0, 3, 6, 7.5, 30, 31, 33, 60, 61, 62, 63, 90, 92, 20, 95]


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_scores_rising_across_tiles(fmt):
    """Keys built so that each 64-token tile's largest score (base 2) follows STAIRCASE: the
    online softmax's running maximum is kept through small rises and moved on large ones."""
    HopperDecoder = _hopper()
    q, kv, qo_indptr, kv_indptr, _ = generate_staircase(STAIRCASE, device="cuda")
    cache = as_cache(kv[fmt])
    for programs in (1, 4):  # one program walks every tile; four cut each request into merged pieces
        decoder = HopperDecoder(3, 16, fmt, q.device, programs=programs)
        out, lse = _run(decoder, q, cache, kv_indptr, qo_indptr)
        _check(q, cache, kv_indptr, qo_indptr, out, lse)
        assert float(lse.max()) > 60  # the scores are as large as built (natural log of 2**95..)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
@pytest.mark.parametrize("page_size", [1, 16, 64, 128])
def test_paged_cache_gives_the_contiguous_bits(fmt, page_size):
    """A request's tokens read through a block table or CSR page indices from shuffled pages: the
    tiles hold the same tokens in the same order, so the result is the same for both table forms,
    bit for bit, and within the strict check of the reference; and bitwise the contiguous result,
    which the same kernel reads (MXFP4: ``decode``; fp8: the staged kernel, ``decode_tma``, whose
    tiles come by TMA from pages of at least a tile and by row copies from smaller ones)."""
    HopperDecoder = _hopper()
    gen = torch.Generator().manual_seed(page_size)
    q, kv, qo_indptr, kv_indptr, _ = generate_ragged(9, 1, 3000, seed=100 + page_size, device="cuda")
    cache = as_cache(kv[fmt])
    # Rows no request owns decode to NaN, so a token read from the wrong row shows.
    batch = scatter_to_pages(cache, kv_indptr, page_size, generator=gen, spare_pages=5)
    want = _run(HopperDecoder(9, 16, fmt, q.device, programs=20), q, cache, kv_indptr, qo_indptr)
    _check(q, cache, kv_indptr, qo_indptr, *want)
    # The paged kernel's own bits: its block-table form, checked, then the CSR form.
    decoder = HopperDecoder(9, 16, fmt, q.device, programs=20, paged=1, page_size=page_size)
    assert decoder.staged == (fmt == "fp8") and decoder.spec.SMALL_PAGES == (page_size < 64)
    pages = batch.block_pages
    contiguous = want
    want = (torch.full_like(want[0], float("nan")), torch.full_like(want[1], float("nan")))
    decoder.launch(q, batch.cache.rows, pages.seq_lens, qo_indptr, *want, default_sm_scale(),
                   table=pages.table, page_indptr=pages.page_indptr, page_size=page_size)
    _check(q, cache, kv_indptr, qo_indptr, *want)
    assert torch.equal(want[0].view(torch.int16), contiguous[0].view(torch.int16))
    assert torch.equal(want[1], contiguous[1])
    for form, pages in ((1, batch.block_pages), (2, batch.csr_pages)):
        decoder = HopperDecoder(9, 16, fmt, q.device, programs=20, paged=form, page_size=page_size)
        out = torch.full_like(want[0], float("nan"))
        lse = torch.full_like(want[1], float("nan"))
        decoder.launch(q, batch.cache.rows, pages.seq_lens, qo_indptr, out, lse, default_sm_scale(),
                       table=pages.table, page_indptr=pages.page_indptr, page_size=page_size)
        assert torch.equal(out.view(torch.int16), want[0].view(torch.int16)), f"paged form {form}"
        assert torch.equal(lse, want[1]), f"paged form {form}"


@pytest.mark.parametrize("page_size", [1, 16, 64, 128])
@pytest.mark.parametrize("entry", [-1, "num_pages"])
def test_page_entries_outside_the_pool_read_zeros(page_size, entry):
    """An fp8 page entry outside the pool (the caller's error: the checked entry points refuse it)
    reads nothing outside it: that page's tokens read as zero rows, by the staged kernel's row
    copies (pages smaller than a tile: filled with zeros) and by its copy engine (a copy past the
    pool's rows)."""
    from mixmla.formats import Fp8Cache
    HopperDecoder = _hopper()
    q, kv, qo_indptr, kv_indptr, _ = generate_input(3, 1, 1000, seed=31 + page_size, device="cuda")
    cache = as_cache(kv["fp8"])
    batch = scatter_to_pages(cache, kv_indptr, page_size, generator=torch.Generator().manual_seed(3), spare_pages=4)
    pages = batch.block_pages
    table = pages.table.clone()
    table[1, 2] = -1 if entry == -1 else batch.cache.num_pages
    decoder = HopperDecoder(3, 16, "fp8", q.device, paged=1, page_size=page_size)
    out = torch.full((q.shape[0], 16, 512), float("nan"), dtype=torch.bfloat16, device=q.device)
    lse = torch.full((q.shape[0], 16), float("nan"), dtype=torch.float32, device=q.device)
    decoder.launch(q, batch.cache.rows, pages.seq_lens, qo_indptr, out, lse, default_sm_scale(), table=table,
                   page_size=page_size)
    seen = cache.data.clone()
    first = int(kv_indptr[1]) + 2 * page_size
    seen[first:first + page_size] = torch.zeros((), dtype=seen.dtype, device=seen.device)
    _check(q, Fp8Cache(seen, cache.scale), kv_indptr, qo_indptr, out, lse)


def test_a_decoder_for_whole_tile_pages_refuses_smaller_pages():
    HopperDecoder = _hopper()
    decoder = HopperDecoder(2, 16, "fp8", torch.device("cuda"), paged=1, page_size=64)
    q, kv, qo_indptr, kv_indptr, _ = generate_input(2, 1, 100, seed=5, device="cuda")
    batch = scatter_to_pages(as_cache(kv["fp8"]), kv_indptr, 16)
    out = torch.empty((2, 16, 512), dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="page_size"):
        decoder.launch(q, batch.cache.rows, batch.block_pages.seq_lens, qo_indptr, out, None, default_sm_scale(),
                       table=batch.block_pages.table, page_size=16)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_bitwise_deterministic(fmt):
    HopperDecoder = _hopper()
    q, kv, qo_indptr, kv_indptr, _ = generate_input(5, 1, 20000, seed=7, device="cuda")
    cache = as_cache(kv[fmt])
    decoder = HopperDecoder(5, 16, fmt, q.device)
    first = _run(decoder, q, cache, kv_indptr, qo_indptr)
    for _ in range(3):
        again = _run(decoder, q, cache, kv_indptr, qo_indptr)
        assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


# ------------------------------------------------------------------------------------------------
# Through the public API.

@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_mla_decode_backend_gluon_ragged(fmt):
    _hopper()
    import mixmla
    q, kv, qo_indptr, kv_indptr, _ = generate_ragged(50, 1, 9000, seed=21, device="cuda")
    cache = as_cache(kv[fmt])
    out = torch.full((q.shape[0], 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    out, lse = mixmla.mla_decode(q, cache, kv_indptr, qo_indptr, out=out, return_lse=True, backend="gluon")
    _check(q, cache, kv_indptr, qo_indptr, out, lse)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_auto_plan_takes_the_hopper_kernel_for_large_batches_and_replays_in_a_graph(fmt):
    _hopper()
    import mixmla
    q, kv, qo_indptr, kv_indptr, _ = generate_input(32, 1, 8192, seed=5, device="cuda")
    cache = as_cache(kv[fmt])
    p = mixmla.plan(kv_indptr, qo_indptr, num_heads=16, fmt=fmt)
    assert p.backend == "gluon"
    small = mixmla.plan(kv_indptr[:5], qo_indptr[:5], num_heads=16, fmt=fmt)
    assert small.backend == "triton"
    out = torch.full((q.shape[0], 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    p.run(q, cache, out=out)  # compile outside the capture
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        p.run(q, cache, out=out)
    q.copy_(torch.randn(q.shape, device="cuda").to(torch.bfloat16))  # new contents, same addresses
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref, _ = mla_decode_reference(q, cache, kv_indptr, qo_indptr)
    result = check_strict(out, ref)
    assert result.passed, result.message


def test_custom_kernel_auto_picks_the_hopper_kernel_for_large_batches():
    """From AUTO_HOPPER_MIN_TOKENS 'auto' takes the first format of this device's order (fp8, or
    MXFP4 where AUTO_HOPPER_ORDER_BY_DEVICE says so), the other when only it is present, and bf16
    on small shapes; the call's output is that format's."""
    _hopper()
    import mixmla
    from mixmla.api import AUTO_HOPPER_MIN_TOKENS, _hopper_order, choose_format
    data = generate_input(64, 1, 8192, seed=9, device="cuda")
    first, second = _hopper_order(data[0])
    assert 64 * 8192 >= AUTO_HOPPER_MIN_TOKENS and choose_format(data[1], data[0]) == first
    assert choose_format({"bf16": data[1]["bf16"], second: data[1][second]}, data[0]) == second
    small = generate_input(4, 1, 1024, seed=9, device="cuda")
    assert choose_format(small[1], small[0]) == "bf16"
    out = mixmla.custom_kernel(data)
    q, kv, qo_indptr, kv_indptr, _ = data
    ref, _ = mla_decode_reference(q, as_cache(kv[first]), kv_indptr, qo_indptr)
    result = check_strict(out, ref)
    assert result.passed, result.message
