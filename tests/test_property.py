"""Hypothesis-driven random small problems vs the reference (issue 5, part 6).

Each example draws a cache format, a head count, a batch of 1..3 requests with 1..4 query tokens
and 0..40 cached tokens each, a seed, the indptr dtype and how q's rows are laid out, then runs
``mixmla.api.mla_decode`` (the Triton interpreter on CPU, the kernels on a GPU) into a
NaN-poisoned buffer and applies the strict check (relative L2 <= 1e-2, no NaN) to the output, and
checks the log-sum-exp. A second property runs the same problem through ``plan``/``run`` and
requires the bits to match ``mla_decode``'s. A third checks the paged entry check
(``paged.validate._check_entries``) against a loop over the requests. ``max_examples`` is small
so CI stays fast; ``MIXMLA_HYPOTHESIS_EXAMPLES`` raises it for a longer soak.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mixmla import api  # noqa: E402
from mixmla.check import check_strict  # noqa: E402
from mixmla.formats import quantize  # noqa: E402
from mixmla.reference import mla_decode_reference  # noqa: E402

from conftest import DEVICE, FORMATS, indptr, poisoned_out  # noqa: E402

EXAMPLES = int(os.environ.get("MIXMLA_HYPOTHESIS_EXAMPLES", "15"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def problems(draw):
    """A random small decode problem, as a dict of plain values (printable on failure)."""
    batch = draw(st.integers(1, 3))
    return dict(
        fmt=draw(st.sampled_from(FORMATS)),
        num_heads=draw(st.sampled_from([16, 32])),
        q_lens=draw(st.lists(st.integers(1, 4), min_size=batch, max_size=batch)),
        kv_lens=draw(st.lists(st.integers(0, 40), min_size=batch, max_size=batch)),
        seed=draw(st.integers(0, 2**31 - 1)),
        int64=draw(st.booleans()),
        strided_q=draw(st.booleans()),
        spare_rows=draw(st.integers(0, 3)),
        q_scale=draw(st.sampled_from([1.0, 1.0, 30.0])),
    )


def materialize(prob):
    gen = torch.Generator(device=DEVICE).manual_seed(prob["seed"])
    total_q, total_kv = sum(prob["q_lens"]), sum(prob["kv_lens"])
    q = (torch.randn(total_q, prob["num_heads"], 576, generator=gen, device=DEVICE) * prob["q_scale"])
    q = q.to(torch.bfloat16)
    if prob["strided_q"]:
        big = torch.zeros(total_q, prob["num_heads"], 600, dtype=torch.bfloat16, device=DEVICE)
        big[..., :576] = q
        q = big[..., :576]
    cache = quantize(torch.randn(total_kv + prob["spare_rows"], 576, generator=gen, device=DEVICE), prob["fmt"])
    dtype = torch.int64 if prob["int64"] else torch.int32
    return q, cache, indptr(prob["kv_lens"], dtype), indptr(prob["q_lens"], dtype)


@SETTINGS
@given(prob=problems())
def test_random_problem_matches_reference(prob):
    q, cache, kv_indptr, qo_indptr = materialize(prob)
    out = poisoned_out(q.shape[0], q.shape[1])
    _, lse = api.mla_decode(q, cache, kv_indptr, qo_indptr, out=out, return_lse=True)
    ref, ref_lse = mla_decode_reference(q, cache, kv_indptr, qo_indptr)
    result = check_strict(out, ref)
    assert result, f"{prob}: {result.message}"
    empty = torch.isneginf(ref_lse).to(DEVICE)
    assert torch.equal(torch.isneginf(lse), empty), f"{prob}: lse must be -inf exactly where nothing is seen"
    assert (out[empty] == 0).all(), f"{prob}: queries that see nothing must output zeros"
    err = (lse[~empty].double() - ref_lse.to(DEVICE)[~empty]).abs()
    assert (err <= 1e-2 + 1e-3 * ref_lse.to(DEVICE)[~empty].abs()).all(), f"{prob}: lse off by {err.max()}"


@settings(SETTINGS, max_examples=max(3, EXAMPLES // 3))
@given(prob=problems())
def test_plan_run_equals_mla_decode_bitwise(prob):
    q, cache, kv_indptr, qo_indptr = materialize(prob)
    a = api.mla_decode(q, cache, kv_indptr, qo_indptr)
    p = api.plan(kv_indptr, qo_indptr, num_heads=prob["num_heads"], fmt=prob["fmt"], device=DEVICE)
    b = p.run(q, cache, out=torch.full_like(a, float("nan")))
    assert torch.equal(a.view(torch.int16), b.view(torch.int16)), f"{prob}: plan.run differs from mla_decode"


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_entry_check_names_the_first_bad_used_entry(data):
    """``_check_entries`` (vectorized, run on every one-call decode of a small table) against a loop
    over the requests: in both table forms it raises exactly when an entry some request reads lies
    outside the pool, and names the first such entry (row-major for a block table, by position
    for CSR); entries no request reads may hold anything."""
    from mixmla.paged.validate import _check_entries

    batch_size = data.draw(st.integers(1, 6))
    num_pages = data.draw(st.integers(1, 9))
    used = np.array(data.draw(st.lists(st.integers(0, 4), min_size=batch_size, max_size=batch_size)), np.int64)
    entries = st.integers(-2, num_pages + 1)
    block = data.draw(st.booleans())
    if block:
        width = int(used.max()) + data.draw(st.integers(0, 2))
        table = np.array(data.draw(st.lists(entries, min_size=batch_size * width, max_size=batch_size * width)),
                         np.int64).reshape(batch_size, width)
        starts = np.zeros(batch_size, np.int64)
        read = [(b, j) for b in range(batch_size) for j in range(used[b])]
        first = next((f"[{b}, {j}] = {table[b, j]}" for b, j in read if not 0 <= table[b, j] < num_pages), None)
    else:
        spare = data.draw(st.lists(st.integers(0, 2), min_size=batch_size, max_size=batch_size))
        starts = np.concatenate([[0], np.cumsum(used + spare)])[:-1].astype(np.int64)
        length = int((used + spare).sum()) + data.draw(st.integers(0, 2))
        table = np.array(data.draw(st.lists(entries, min_size=length, max_size=length)), np.int64)
        read = sorted(int(starts[b]) + j for b in range(batch_size) for j in range(used[b]))
        first = next((f"[{i}] = {table[i]}" for i in read if not 0 <= table[i] < num_pages), None)
    if first is None:
        _check_entries("t", table, starts, used, num_pages, block)
    else:
        with pytest.raises(ValueError, match=re.escape("t" + first + " is not a page of the cache")):
            _check_entries("t", table, starts, used, num_pages, block)
