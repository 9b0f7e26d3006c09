"""Paged decode (``mixmla.paged``) against the float64 reference, on pools whose pages are shuffled
and whose every row no request owns decodes to NaN (``scatter_to_pages``), so that a token read
from the wrong row fails the strict check; outputs are poisoned before every call."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

import mixmla
from mixmla.check import check_strict
from mixmla.formats import as_paged_cache, empty_paged_cache, quantize
from mixmla.kernels.backend import Layout
from mixmla.kernels.triton import launch
from mixmla.kernels.triton.paging import loop_stages, windowed_gather
from mixmla.paged import PageTable, scatter_to_pages
from mixmla.reference import mla_decode_paged_reference

from conftest import DEVICE, FORMATS, indptr, poisoned_out


def batch(fmt, kv_lens, q_lens, page_size, seed=0, heads=16, spare_pages=3):
    """(q, PagedBatch, qo_indptr or None) of a random batch laid out in shuffled pages."""
    gen = torch.Generator().manual_seed(seed)
    kv = torch.randn(sum(kv_lens), 576, generator=gen).to(DEVICE)
    cache = quantize(kv, fmt)
    paged = scatter_to_pages(cache, indptr(kv_lens), page_size, generator=gen, spare_pages=spare_pages)
    q = torch.randn(sum(q_lens), heads, 576, generator=gen).to(DEVICE, torch.bfloat16)
    qo = indptr(q_lens) if any(n != 1 for n in q_lens) else None
    return q, paged, qo


def assert_matches(out, lse, q, paged, pages, qo):
    ref, ref_lse = mla_decode_paged_reference(q, paged.cache, pages, qo)
    result = check_strict(out, ref)
    assert result, result.message
    empty = torch.isneginf(ref_lse).to(lse.device)
    assert torch.equal(torch.isneginf(lse), empty), "lse must be -inf exactly where a query sees nothing"
    assert (out[empty] == 0).all()
    err = (lse[~empty].double() - ref_lse.to(lse.device)[~empty]).abs()
    assert (err <= 1e-2 + 1e-3 * ref_lse.to(lse.device)[~empty].abs()).all(), f"lse off by {err.max()}"


@pytest.fixture
def gather(request, monkeypatch):
    """The gather of pages smaller than a tile, forced in every launch of the test to the param
    ('window': a window of page-table entries a tile, 'token': an entry per token; see
    ``paging.windowed_gather``), or None: the launcher's choice (small grids like these take the
    window). The launcher must have asked for it."""
    choice = getattr(request, "param", None)
    if choice is None:
        yield None
        return
    asked = []
    with _asking_for_the_gather(monkeypatch, lambda *args: asked.append(args) or choice == "window"):
        yield choice
    assert asked, "no launch asked which gather to take"


@contextlib.contextmanager
def _asking_for_the_gather(monkeypatch, chooser):
    """``launch.windowed_gather`` replaced by ``chooser`` inside, with the launcher's cache of its
    answers emptied on the way in and out."""
    launch._gather_choice.cache_clear()
    monkeypatch.setattr(launch, "windowed_gather", chooser)
    try:
        yield
    finally:
        monkeypatch.undo()
        launch._gather_choice.cache_clear()


def gathers(*page_sizes):
    """``(page_size, gather)`` params: both gathers for pages smaller than the 64-token tile."""
    return [pytest.param(p, g, id=f"{p}-{g}" if g else str(p)) for p in page_sizes
            for g in (("window", "token") if p < 64 else (None,))]


# Ragged: an empty request, lengths that are not multiples of the page size, one long enough to be
# cut into several chunks (the split-K path and its merge).
KV_LENS = [37, 0, 300, 5]
Q_LENS = [1, 1, 3, 2]


@pytest.mark.parametrize("page_size,gather", gathers(1, 16, 64, 128), indirect=["gather"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_block_table_matches_reference(fmt, page_size, gather):
    q, paged, qo = batch(fmt, KV_LENS, Q_LENS, page_size, seed=page_size)
    out = poisoned_out(q.shape[0], q.shape[1])
    _, lse = mixmla.mla_decode_paged(q, paged.cache, paged.block_table, paged.seq_lens, qo_indptr=qo, out=out,
                                     return_lse=True)
    assert_matches(out, lse, q, paged, paged.block_pages, qo)


@pytest.mark.parametrize("page_size,gather", gathers(1, 64), indirect=["gather"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_csr_matches_reference(fmt, page_size, gather):
    q, paged, qo = batch(fmt, [70, 0, 129], [1, 1, 1], page_size, seed=7 + page_size)
    out = poisoned_out(q.shape[0], q.shape[1])
    _, lse = mixmla.mla_decode_paged_csr(q, paged.cache, paged.kv_indptr, paged.kv_indices, paged.seq_lens, out=out,
                                         return_lse=True)
    assert_matches(out, lse, q, paged, paged.csr_pages, qo)


def test_paged_equals_contiguous_bitwise():
    """The same tokens give the same bits wherever they are stored: the page table changes only
    where the kernel reads, not what it computes."""
    gen = torch.Generator().manual_seed(3)
    kv_lens = [100, 33]
    cache = quantize(torch.randn(sum(kv_lens), 576, generator=gen).to(DEVICE), "mxfp4")
    q = torch.randn(2, 32, 576, generator=gen).to(DEVICE, torch.bfloat16)
    paged = scatter_to_pages(cache, indptr(kv_lens), 16, generator=gen)
    contiguous = mixmla.mla_decode(q, cache, indptr(kv_lens))
    assert torch.equal(mixmla.mla_decode_paged(q, paged.cache, paged.block_table, paged.seq_lens), contiguous)


@pytest.mark.parametrize("fmt", FORMATS)
def test_plan_reads_tables_in_place(fmt):
    """A serving step: plan once, then grow a request by a token (and a new page) by writing the
    plan's own table tensors in place, and run again: the new token is attended to."""
    page_size = 16
    q, paged, qo = batch(fmt, [31, 16, 9], [1, 1, 1], page_size, seed=11, spare_pages=4)
    p = mixmla.plan_paged(paged.block_table, paged.seq_lens, page_size, num_heads=16, fmt=fmt)
    assert p.backend == "triton" and p.page_size == page_size
    out = poisoned_out(3, 16)
    p.run(q, paged.cache, out=out, check=True)
    assert_matches(out, p.run(q, paged.cache, return_lse=True)[1], q, paged, paged.block_pages, qo)
    # Request 1 had exactly one full page: its 17th token goes to a spare page.
    used = set(paged.block_table[paged.block_table >= 0].tolist())
    spare = next(i for i in range(paged.cache.num_pages) if i not in used)
    new_row = torch.randn(1, 576).to(DEVICE)
    mixmla.append_kv(paged.cache, new_row.to(torch.bfloat16),
                     torch.tensor([spare * page_size], dtype=torch.int64, device=DEVICE))
    paged.block_table[1, 1] = spare
    paged.seq_lens[1] += 1
    out2, lse2 = p.run(q, paged.cache, return_lse=True)
    assert_matches(out2, lse2, q, paged, paged.block_pages, qo)
    assert not torch.equal(out2[1], out[1]), "the appended token must change request 1's output"


@pytest.mark.parametrize("gather", ["window", "token"], indirect=True)
def test_page_table_entries_past_the_tokens_are_not_read(gather):
    """vLLM pads block tables; entries past a request's pages may hold anything."""
    q, paged, _ = batch("bf16", [20, 3], [1, 1], 16, seed=5)
    table = paged.block_table.clone()
    table_wide = torch.full((2, 6), -7, dtype=torch.int32, device=DEVICE)
    table_wide[:, :table.shape[1]] = table
    table_wide[0, 2:] = 10 ** 6
    out = mixmla.mla_decode_paged(q, paged.cache, table_wide, paged.seq_lens)
    ref = mixmla.mla_decode_paged(q, paged.cache, paged.block_table, paged.seq_lens)
    assert torch.equal(out, ref)


# ---------------------------------------------------------------------------------------------
# Bad input: a ValueError naming the argument, before anything is written.

def _bad_cases():
    def shift(fn):
        return fn

    return {
        "negative entry": (lambda b: b.block_table.__setitem__((0, 0), -1), "block_table[0, 0]"),
        "entry past the pool": (lambda b: b.block_table.__setitem__((0, 1), b.cache.num_pages), "block_table[0, 1]"),
        "length past the table": (lambda b: b.seq_lens.__setitem__(0, b.block_table.shape[1] * 16 + 1), "seq_lens[0]"),
        "negative length": (lambda b: b.seq_lens.__setitem__(1, -1), "seq_lens[1]"),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_block_table_is_a_value_error(case):
    change, named = _bad_cases()[case]
    q, paged, _ = batch("fp8", [20, 3], [1, 1], 16, seed=2)
    change(paged)
    out = poisoned_out(2, 16)
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        mixmla.mla_decode_paged(q, paged.cache, paged.block_table, paged.seq_lens, out=out)
    assert torch.isnan(out.float()).all(), "nothing may be written when a check fails"
    # The plan's checked run says the same; the unchecked one reads nothing outside the pool.
    if case != "negative length" and case != "length past the table":
        p = mixmla.plan_paged(paged.block_table, paged.seq_lens, 16, fmt="fp8")
        with pytest.raises(ValueError, match="block_table"):
            p.run(q, paged.cache, check=True)
        p.run(q, paged.cache)


@pytest.mark.parametrize("gather", ["window", "token"], indirect=True)
@pytest.mark.parametrize("wide", [False, True], ids=["small-table", "wide-table"])
@pytest.mark.parametrize("entry", [-1, "num_pages", 2 ** 30])
def test_unchecked_run_skips_pages_outside_the_pool(entry, wide, gather):
    """Without check=True a bad page entry is the caller's error, yet the kernel reads nothing
    outside the pool: that page's tokens are not seen, the request's other tokens are. Request 0
    is shorter than a tile and its first page is the bad one, so the row that replaces its
    positions past the end must be found among its other pages (``paging.gather_fill``), in a
    table too small for a tile's window of entries and in one that holds it."""
    from mixmla.kernels.triton.paging import wide_table

    q, paged, _ = batch("bf16", [20, 3, 200] if wide else [20, 3], [1] * (3 if wide else 2), 16, seed=6)
    assert wide_table(16, paged.block_table.numel()) == wide
    good_page = int(paged.block_table[0, 1])
    p = mixmla.plan_paged(paged.block_table, paged.seq_lens, 16)
    paged.block_table[0, 0] = paged.cache.num_pages if entry == "num_pages" else entry
    out = p.run(q, paged.cache)
    rows = torch.arange(good_page * 16, good_page * 16 + 4, device=DEVICE)  # tokens 16..19 of request 0
    seen = mixmla.Bf16Cache(paged.cache.rows.data[rows])
    ref, _ = mixmla.mla_decode_reference(q[:1], seen, indptr([4]))
    result = check_strict(out[:1], ref)
    assert result, result.message


@pytest.mark.parametrize("page_size,gather", gathers(16, 64), indirect=["gather"])
def test_unchecked_run_skips_wide_int64_entries(page_size, gather):
    """An int64 page entry past 2**31 lies outside the pool whatever its low 32 bits say (here
    they name a page of the pool): its tokens are not seen, on the gathered and the whole-tile path."""
    q, paged, _ = batch("bf16", [page_size + 4, 3], [1, 1], page_size, seed=7)
    table = paged.block_table.to(torch.int64)
    good_page = int(table[0, 1])
    p = mixmla.plan_paged(table, paged.seq_lens, page_size)
    table[0, 0] = (1 << 32) + good_page
    out = p.run(q, paged.cache)
    rows = torch.arange(good_page * page_size, good_page * page_size + 4, device=DEVICE)
    seen = mixmla.Bf16Cache(paged.cache.rows.data[rows])
    ref, _ = mixmla.mla_decode_reference(q[:1], seen, indptr([4]))
    result = check_strict(out[:1], ref)
    assert result, result.message


def test_window_rule():
    """The chooser's rule (PERF step 54): a gathered tile (pages smaller than a tile of at most 64
    tokens) reads a window of page-table entries where ``loop_stages`` deepens the loop (at most
    one program per SM) and in larger grids at two stages; elsewhere one entry per token."""
    import itertools

    sms = 132
    assert windowed_gather(1, 64, 3, 128, sms) and windowed_gather(16, 64, 2, sms, sms)
    assert not windowed_gather(1, 64, 3, sms + 1, sms)  # more programs than SMs at three stages
    assert not windowed_gather(1, 64, 3, 256, sms) and windowed_gather(1, 64, 2, 256, sms)  # MXFP4's two stages
    assert not windowed_gather(64, 64, 3, 8, sms) and not windowed_gather(128, 64, 3, 8, sms)  # whole tiles
    assert not windowed_gather(1, 128, 2, 8, sms)  # 128-token tiles keep the launch's stages
    assert not windowed_gather(0, 64, 3, 8, sms)  # contiguous
    for args in itertools.product((0, 1, 2, 16, 32, 64, 128), (16, 32, 64, 128), (1, 2, 3), (1, 132, 133, 264),
                                  (sms,)):
        page, block_t, stages = args[:3]
        gathered = page % block_t != 0 and block_t <= 64
        assert windowed_gather(*args) == ((loop_stages(*args) is not None) or (gathered and stages <= 2)), args


@pytest.mark.parametrize("batch_size,window", [(40, True), (140, False)])
def test_the_grid_chooses_the_gather(batch_size, window, monkeypatch):
    """Unforced: a plan of at most one program per SM (132 on CPU) launches the window, a larger
    one the per-token gather, and both match the reference (ragged, empty requests, pages of 1)."""
    chosen = []
    kv_lens = ([0, 5, 70, 1, 33, 64, 0] * 20)[:batch_size]
    q, paged, qo = batch("bf16", kv_lens, [1] * batch_size, 1, seed=12)
    p = mixmla.plan_paged(paged.block_table, paged.seq_lens, 1)
    assert (p.schedule.num_work <= 132) == window
    with _asking_for_the_gather(monkeypatch, lambda *args: chosen.append(windowed_gather(*args)) or chosen[-1]):
        out, lse = p.run(q, paged.cache, return_lse=True)
    assert chosen and set(chosen) == {window}
    assert_matches(out, lse, q, paged, paged.block_pages, qo)


@pytest.mark.parametrize("what,named", [
    ("index past the pool", r"kv_indices\[\d+\]"),
    ("indptr past the indices", "kv_indptr ends"),
    ("length past the pages", r"kv_len\[2\]"),
])
def test_bad_csr_is_a_value_error(what, named):
    q, paged, _ = batch("bf16", [20, 0, 40], [1, 1, 1], 16, seed=4)
    kv_indptr, kv_indices, kv_len = paged.kv_indptr.clone(), paged.kv_indices.clone(), paged.seq_lens.clone()
    if what == "index past the pool":
        kv_indices[-1] = paged.cache.num_pages + 3
    elif what == "indptr past the indices":
        kv_indptr[-1] = kv_indices.shape[0] + 1
    else:
        kv_len[2] = 49
    with pytest.raises(ValueError, match=named):
        mixmla.mla_decode_paged_csr(q, paged.cache, kv_indptr, kv_indices, kv_len)


@pytest.mark.parametrize("gather", ["window", "token"], indirect=True)
def test_csr_indices_past_the_tokens_are_not_read(gather):
    """A request's CSR segment may hold more pages than its tokens fill; those entries may hold
    anything (here -1 and a page past the pool) and are neither checked nor read."""
    q, paged, _ = batch("bf16", [20, 3, 40], [1, 1, 1], 16, seed=7)
    ptr = paged.kv_indptr.cpu().tolist()
    idx = paged.kv_indices.cpu().tolist()
    wide_idx, wide_ptr = [], [0]
    for b, junk in enumerate(([-1], [-1, 10 ** 6], [paged.cache.num_pages])):
        wide_idx += idx[ptr[b]:ptr[b + 1]] + junk
        wide_ptr.append(len(wide_idx))
    i32 = dict(dtype=torch.int32, device=DEVICE)
    out = mixmla.mla_decode_paged_csr(q, paged.cache, torch.tensor(wide_ptr, **i32), torch.tensor(wide_idx, **i32),
                                      paged.seq_lens)
    ref = mixmla.mla_decode_paged_csr(q, paged.cache, paged.kv_indptr, paged.kv_indices, paged.seq_lens)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("form", ["block", "csr"])
@pytest.mark.parametrize("entry", [-1, "num_pages"])
@pytest.mark.parametrize("where", ["host", "device"])
def test_bad_entry_of_a_later_request_is_named(form, entry, where, monkeypatch):
    """The check covers every request's used entries, not just the first request's, whether the
    small table is compared on the host or reduced on the device first (``HOST_TABLE_BYTES`` 0): a
    bad entry in the last page request 2 reads is found and named exactly, and the last page of
    the pool (num_pages - 1) is a good one."""
    from mixmla.paged import validate as pvalidate

    if where == "device":
        monkeypatch.setattr(pvalidate, "HOST_TABLE_BYTES", 0)
    q, paged, _ = batch("bf16", [20, 0, 40], [1, 1, 1], 16, seed=8)
    bad = -1 if entry == -1 else paged.cache.num_pages
    table, idx = paged.block_table.clone(), paged.kv_indices.clone()
    last = int(paged.kv_indptr[3]) - 1  # request 2's third (last used) page
    for good in (paged.cache.num_pages - 1, bad):
        table[2, 2], idx[last] = good, good
        call = (lambda: mixmla.mla_decode_paged(q, paged.cache, table, paged.seq_lens)) if form == "block" else \
            (lambda: mixmla.mla_decode_paged_csr(q, paged.cache, paged.kv_indptr, idx, paged.seq_lens))
        if good == bad:
            named = r"block_table\[2, 2\]" if form == "block" else rf"kv_indices\[{last}\]"
            with pytest.raises(ValueError, match=named + f" = {bad} is not a page of the cache"):
                call()
        else:
            call()


def test_plans_and_runs_read_no_page_table(monkeypatch):
    """plan_paged reads the lengths (and qo_indptr) on the host, not the table; run reads
    nothing; a checked one-call decode reads O(batch) values (a table larger than
    ``HOST_TABLE_BYTES`` reduced on the device to its used range), and such a table itself only to
    name a bad entry; a small table is read whole in the same one transfer."""
    from mixmla import validate
    from mixmla.kernels.triton.backend import TritonPlan
    from mixmla.paged import validate as pvalidate

    q, paged, _ = batch("bf16", [20, 0, 40], [1, 1, 1], 16, seed=9)
    wide = torch.full((3, 50), -1, dtype=torch.int32, device=DEVICE)
    wide[:, :paged.block_table.shape[1]] = paged.block_table
    reads = []
    real = validate._host_values
    monkeypatch.setattr(validate, "_host_values", lambda ts: reads.append(sum(t.numel() for t in ts)) or real(ts))
    p = mixmla.plan_paged(wide, paged.seq_lens, 16)
    pc = mixmla.plan_paged_csr(paged.kv_indptr, paged.kv_indices, paged.seq_lens, 16)
    assert reads == [3, 3 + 4]
    reads.clear()
    monkeypatch.setattr(TritonPlan, "run_paged", lambda self, *args: None)
    for name in ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__index__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, lambda *a, **k: pytest.fail("run read a value on the host"))
    p.run(q, paged.cache)
    pc.run(q, paged.cache)
    monkeypatch.undo()
    monkeypatch.setattr(validate, "_host_values", lambda ts: reads.append(sum(t.numel() for t in ts)) or real(ts))
    assert reads == []
    mixmla.mla_decode_paged(q, paged.cache, wide, paged.seq_lens)
    mixmla.mla_decode_paged_csr(q, paged.cache, paged.kv_indptr, paged.kv_indices, paged.seq_lens)
    assert reads == [3 + wide.numel(), 3 + 4 + paged.kv_indices.numel()]  # small tables: read along, once
    monkeypatch.setattr(pvalidate, "HOST_TABLE_BYTES", wide.numel() * 4 - 1)  # the block table is now large
    reads.clear()
    mixmla.mla_decode_paged(q, paged.cache, wide, paged.seq_lens)
    assert reads == [3 + 2]
    wide[1, 0] = -1  # request 1 has no tokens: its entries are not read
    wide[2, 1] = -1
    reads.clear()
    with pytest.raises(ValueError, match=r"block_table\[2, 1\] = -1"):
        mixmla.mla_decode_paged(q, paged.cache, wide, paged.seq_lens)
    assert reads == [3 + 2, wide.numel()]


@pytest.mark.gpu
def test_paged_run_does_not_synchronize():
    q, paged, _ = batch("fp8", [20, 0, 40], [1, 1, 1], 16, seed=9)
    p = mixmla.plan_paged(paged.block_table, paged.seq_lens, 16, fmt="fp8")
    pc = mixmla.plan_paged_csr(paged.kv_indptr, paged.kv_indices, paged.seq_lens, 16, fmt="fp8")
    p.run(q, paged.cache), pc.run(q, paged.cache)  # compiles
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        p.run(q, paged.cache)
        pc.run(q, paged.cache, return_lse=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_page_size_must_match_the_plan():
    q, paged, _ = batch("bf16", [40, 3], [1, 1], 16, seed=1)
    p = mixmla.plan_paged(paged.block_table, paged.seq_lens, 32)
    with pytest.raises(ValueError, match="page_size is 32 but the cache's pages hold 16"):
        p.run(q, paged.cache)


def test_mxfp4_scales_of_the_wrong_shape():
    pool = empty_paged_cache(4, 16, "mxfp4", device=DEVICE)
    q = torch.zeros(1, 16, 576, dtype=torch.bfloat16, device=DEVICE)
    table = torch.zeros(1, 1, dtype=torch.int32, device=DEVICE)
    lens = torch.ones(1, dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="cache: mxfp4 scales"):
        mixmla.mla_decode_paged(q, (pool.rows.data.view(4, 16, 288), torch.zeros(4, 16, 17, dtype=torch.uint8,
                                                                                 device=DEVICE)), table, lens)
    with pytest.raises(ValueError, match="cache: mxfp4 scales have pages of 8"):
        mixmla.mla_decode_paged(q, (pool.rows.data.view(4, 16, 288), torch.zeros(8, 8, 18, dtype=torch.uint8,
                                                                                 device=DEVICE)), table, lens)


def test_structural_errors_name_the_argument():
    q, paged, _ = batch("bf16", [20, 3], [1, 1], 16)
    with pytest.raises(TypeError, match="block_table must have dtype"):
        mixmla.mla_decode_paged(q, paged.cache, paged.block_table.float(), paged.seq_lens)
    with pytest.raises(ValueError, match="seq_lens must have 2 entries"):
        mixmla.mla_decode_paged(q, paged.cache, paged.block_table, paged.seq_lens[:1])
    with pytest.raises(ValueError, match="block_table must be 2-D"):
        mixmla.mla_decode_paged(q, paged.cache, paged.block_table[0], paged.seq_lens)
    with pytest.raises(ValueError, match="qo_indptr is None"):
        mixmla.mla_decode_paged(q[:1], paged.cache, paged.block_table, paged.seq_lens)
    with pytest.raises(ValueError, match="page_size must be in"):
        mixmla.plan_paged(paged.block_table, paged.seq_lens, 0)


# ---------------------------------------------------------------------------------------------
# The pool's forms.

def test_pool_forms_read_the_same_rows():
    data = torch.randn(3, 8, 576).to(torch.bfloat16)
    four_d = as_paged_cache(data.view(3, 8, 1, 576))
    assert four_d.page_size == 8 and four_d.num_pages == 3 and torch.equal(four_d.rows.data, data.view(24, 576))
    assert four_d.rows.data.data_ptr() == data.data_ptr(), "no copy"
    codes = torch.zeros(3, 8, 288, dtype=torch.uint8)
    scales_rows = torch.zeros(24 + 8, 24, dtype=torch.uint8)  # 2-D rows, padded as quantize_mxfp4 pads
    assert as_paged_cache((codes, scales_rows)).rows.scales.shape == (32, 24)
    with pytest.raises(ValueError, match="pages must follow each other"):
        as_paged_cache(torch.zeros(3, 16, 576, dtype=torch.bfloat16)[:, :8])


def test_gluon_reads_pages_of_a_power_of_two_tokens():
    from mixmla.kernels.gluon.launch import layout_unsupported
    for page_size in (1, 16, 64, 128, 256):
        assert layout_unsupported((9, 0), "fp8", 16, 16, 4, page_size) is None
    assert "power-of-two" in layout_unsupported((9, 0), "mxfp4", 16, 16, 4, 48)
    gluon = pytest.importorskip("mixmla.kernels.gluon.backend")
    layout = Layout(torch.device("cpu"), 16, "fp8", 0.04, np.array([64]), np.array([1]), page_size=48)
    with pytest.raises(ValueError, match="backend='gluon' cannot run this plan"):
        from mixmla.kernels.backend import get_backend
        get_backend("gluon", layout)
    assert gluon.BACKEND.unsupported(layout) is not None


def test_readme_serving_loop_runs():
    """README's serving-loop lines, on a pool of 3 pages and two requests, then checked."""
    import os
    import re

    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "append_kv" in b)
    gen = torch.Generator().manual_seed(8)
    env = dict(mixmla=mixmla, num_pages=3,
               block_table=torch.tensor([[2, 0], [1, -1]], dtype=torch.int32, device=DEVICE),
               seq_lens=torch.tensor([70, 5], dtype=torch.int32, device=DEVICE),
               new_kv=torch.randn(75, 576, generator=gen).to(DEVICE, torch.bfloat16),
               q=torch.randn(2, 16, 576, generator=gen).to(DEVICE, torch.bfloat16))
    env["slot_mapping"] = torch.tensor([2 * 64 + t for t in range(64)] + list(range(6)) + [64 + t for t in range(5)],
                                       device=DEVICE)
    exec(block.replace('device="cuda"', f'device="{DEVICE.type}"'), env)
    ref, _ = mixmla.mla_decode_reference(env["q"], mixmla.quantize_mxfp4(env["new_kv"]), indptr([70, 5]))
    result = check_strict(env["out"], ref)
    assert result, result.message


@pytest.mark.parametrize("form", ["block", "csr"])
def test_one_call_decodes_check_every_call_and_plan_new_lengths(form):
    """One-call paged decodes keep no plan that could go stale and skip no check: the same
    tensors rewritten in place with a page outside the pool or a length beyond the table are
    rejected on the next call; new lengths (other chunk counts) decode as the reference does."""
    q, paged, _ = batch("bf16", [37, 0, 300, 5], [1, 1, 1, 1], 16, seed=11)
    table = paged.block_table if form == "block" else paged.kv_indices
    pages = paged.block_pages if form == "block" else paged.csr_pages

    def decode():
        if form == "block":
            return mixmla.mla_decode_paged(q, paged.cache, paged.block_table, paged.seq_lens, return_lse=True)
        return mixmla.mla_decode_paged_csr(q, paged.cache, paged.kv_indptr, paged.kv_indices, paged.seq_lens,
                                           return_lse=True)

    out, lse = decode()
    assert_matches(out, lse, q, paged, pages, None)
    flat = table.view(-1)  # entry 0: request 0's first page in either form
    kept = flat[0].item()
    flat[0] = paged.cache.num_pages  # one past the pool
    with pytest.raises(ValueError, match="is not a page of the cache"):
        decode()
    flat[0] = kept
    lens = paged.seq_lens.clone()
    paged.seq_lens[2] = 10 ** 6  # beyond its pages
    with pytest.raises(ValueError, match="beyond the table's capacity"):
        decode()
    paged.seq_lens.copy_(lens)
    paged.seq_lens[2] = 60  # new lengths: another chunk count for request 2
    out, lse = decode()
    assert_matches(out, lse, q, paged, pages, None)


def test_page_entry_checks_of_concurrent_threads_stay_apart():
    """The page-entry extremes are written into a buffer per thread: a thread whose table is bad
    is rejected and one whose table is good is not, however their calls interleave."""
    import threading

    q, good, _ = batch("bf16", [37, 0, 300, 5], [1, 1, 1, 1], 16, seed=12)
    bad_table = good.block_table.clone()
    bad_table[0, 0] = good.cache.num_pages
    errors = {"good": [], "bad": []}

    def loop(name, table):
        for _ in range(20):
            try:
                mixmla.mla_decode_paged(q, good.cache, table, good.seq_lens)
            except ValueError as err:
                errors[name].append(err)

    threads = [threading.Thread(target=loop, args=("good", good.block_table)),
               threading.Thread(target=loop, args=("bad", bad_table))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors["good"] and len(errors["bad"]) == 20
