"""The Hopper kernel's work split and merge assignment, as its integer arithmetic computes them.

The kernel (``kernels/gluon/decode.py``) cannot run on the CPU, and the GPU tests reach only some
batch layouts. The rules that decide who computes and who merges what are plain integer
arithmetic, restated here line for line (``_range_bound``, ``_program_of``, ``_piece_count``, the
merger choice at a piece's end, ``_merge_width``) and checked over many layouts and grid sizes:
every unit is computed once, every cut request is merged (every output column slice written by
exactly one merger, or by the last arriver), every merger's range lies inside its request (so it
waits for nothing it holds itself), and the counts the mergers wait for are the pieces there are.
"""

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TILE = 64
C0 = 2  # launch.REQUEST_COST_TILES
VALUE_DIM = 512


def range_bound(i, programs, total):
    return i * total // programs


def program_of(u, programs, total):
    return ((u + 1) * programs + total - 1) // total - 1


def merge_width(count):
    return 128 if count <= 4 else (64 if count <= 8 else 32)


def split(kv_lens, programs):
    """What each program does: {pid: [(request, first tile, end tile)]} and per cut request the
    merge: ('last', nparts) or ('shared', nparts, {merger program: slices})."""
    cost = [(n + TILE - 1) // TILE + C0 for n in kv_lens]
    cum = [sum(cost[:b + 1]) for b in range(len(cost))]
    total = cum[-1]
    work = {}
    for pid in range(programs):
        u_begin, u_end = range_bound(pid, programs, total), range_bound(pid + 1, programs, total)
        if u_begin >= u_end:
            continue
        b_first = sum(c <= u_begin for c in cum)
        b_last = sum(c < u_end for c in cum)
        for b in range(b_first, b_last + 1):
            start_b, n_tiles = cum[b] - cost[b], (kv_lens[b] + TILE - 1) // TILE
            t_begin = min(max(max(u_begin, start_b) - start_b - C0, 0), n_tiles)
            t_end = min(max(min(u_end, cum[b]) - start_b - C0, 0), n_tiles)
            work.setdefault(pid, []).append((b, t_begin, t_end, u_begin))
    merges = {}
    for b in range(len(cost)):
        start_b = cum[b] - cost[b]
        first, last = program_of(start_b, programs, total), program_of(cum[b] - 1, programs, total)
        one_unit = programs >= total
        nparts = cost[b] if one_unit else last - first + 1
        if nparts == 1:
            continue
        inner = nparts if one_unit else nparts - 2
        if inner == 0:
            merges[b] = ("last", nparts)
            continue
        mergers = min(inner, VALUE_DIM // merge_width(nparts))
        owners = {}
        for pid, pieces in work.items():
            for bb, _, _, u_begin in pieces:
                if bb != b:
                    continue
                k = u_begin - start_b if one_unit else pid - first - 1
                if 0 <= k < mergers:
                    owners[pid] = list(range(k, VALUE_DIM // merge_width(nparts), mergers))
        merges[b] = ("shared", nparts, owners, first, last)
    return work, merges, cost


layouts = st.lists(st.integers(0, 20000), min_size=1, max_size=300)


@settings(max_examples=300, deadline=None)
@given(kv_lens=layouts, programs=st.sampled_from([1, 2, 3, 17, 132, 264]))
def test_every_tile_is_computed_once_and_every_cut_request_is_merged_once(kv_lens, programs):
    work, merges, cost = split(kv_lens, programs)
    for b, n in enumerate(kv_lens):
        tiles = sorted(t for pieces in work.values() for bb, t0, t1, _ in pieces if bb == b for t in range(t0, t1))
        assert tiles == list(range((n + TILE - 1) // TILE)), b
        holders = [pid for pid, pieces in work.items() if any(bb == b for bb, *_ in pieces)]
        if len(holders) == 1:
            assert b not in merges
            continue
        merge = merges[b]
        assert merge[1] == len(holders)  # the count every merger waits for is the pieces there are
        if merge[0] == "last":
            assert len(holders) == 2
            continue
        _, nparts, owners, first, last = merge
        slices = sorted(s for ss in owners.values() for s in ss)
        assert slices == list(range(VALUE_DIM // merge_width(nparts))), b  # each slice once
        for pid in owners:  # a merger holds nothing but its piece of this request
            assert [bb for bb, *_ in work[pid]] == [b], (b, pid)


def test_the_layouts_of_the_benchmark_take_the_merges_the_kernel_was_timed_with():
    """At 264 programs: 4x1024 is one unit per program (18 pieces, 16 mergers of 32 columns),
    256x1024 cuts requests into two pieces (the last arriver merges), 32x8192 into about 8 with
    the inner programs sharing the merge."""
    _, merges, _ = split([1024] * 4, 264)
    assert {m[0] for m in merges.values()} == {"shared"} and all(len(m[2]) == 16 for m in merges.values())
    _, merges, _ = split([1024] * 256, 264)
    assert {m[0] for m in merges.values()} == {"last"}
    _, merges, _ = split([8192] * 32, 264)
    assert {m[0] for m in merges.values()} == {"shared"}
    assert all(6 <= len(m[2]) <= 8 for m in merges.values())
