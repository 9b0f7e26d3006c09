"""The Hopper backend's host side without a GPU: its plans copy a layout's compiled
specializations instead of being made again, each takes its partial results from its owner's
workspace and keeps its own zeroed piece counts, and a repeated run launches the same arguments
on the current stream. The kernel launch is replaced by a recorder (the kernel itself is
checked by tests/test_hopper_compile.py on the CPU and tests/test_hopper_gpu.py on the H200)."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import mixmla
from mixmla import api
from mixmla.formats import quantize

from conftest import indptr

H = 16
CPU = torch.device("cpu")


class _Recorder:
    """What ``launch.compile_decode`` returns here: a compiled kernel whose launcher records its
    calls (``launcher_binding`` takes an unknown launcher through ``run`` itself)."""

    def __init__(self, spec, calls, scratch=0):
        self.spec, self.function, self.packed_metadata = spec, object(), object()
        self.metadata = types.SimpleNamespace(global_scratch_size=scratch)
        self.run = lambda *args: calls.append((spec, args))


@pytest.fixture
def hopper(monkeypatch):
    """The real Gluon backend on CPU tensors with recorded launches: ``(backend module, launch
    module, calls, plans made)``."""
    from mixmla.kernels.gluon import backend, launch

    calls, made = [], []
    monkeypatch.setattr(launch, "compile_decode", lambda spec, staged_kernel=None: _Recorder(spec, calls))
    monkeypatch.setattr(launch, "_binding", launch._binding.__wrapped__)  # the recorder is not cached
    monkeypatch.setattr(launch, "current_stream", lambda device: 7)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(
        multi_processor_count=132))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)  # CPU tensors: device.index is None
    monkeypatch.setattr(backend.GluonBackend, "unsupported", lambda self, layout: None)
    real_init = backend.HopperPlan.__init__
    monkeypatch.setattr(backend.HopperPlan, "__init__", lambda self, layout: made.append(1) or real_init(self, layout))
    monkeypatch.setattr(api, "_LAYOUTS", {})
    return backend, launch, calls, made


def _inputs(fmt, kv_lens, seed=0):
    gen = torch.Generator().manual_seed(seed)
    kv = torch.randn(sum(kv_lens), 576, generator=gen)
    q = torch.randn(len(kv_lens), H, 576, generator=gen).to(torch.bfloat16)
    return q, quantize(kv, fmt)


def _pointer_args(args, first=9):
    """The kernel arguments of a recorded launch, by ``compile.SIGNATURE`` name: from ``first``, after
    grid, stream, function, metadata and the three launcher placeholders (9) or, through the
    launcher's own ``launch``, after grid, stream, function, its two flags, the two scratch
    pointers, metadata and the three placeholders (13)."""
    from mixmla.kernels.gluon.compile import SIGNATURE

    return dict(zip(SIGNATURE, args[first:]))


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_one_call_decodes_of_a_known_layout_plan_once_and_launch_one_kernel(hopper, fmt):
    _, _, calls, made = hopper
    kv_lens = [700, 0, 1333]
    q, cache = _inputs(fmt, kv_lens)
    kv = indptr(kv_lens, device=CPU)
    for _ in range(3):
        out = mixmla.mla_decode(q, cache, kv, backend="gluon")
        assert out.shape == (3, H, 512)
    assert len(made) == 1 and len(calls) == 3
    spec, args = calls[-1]
    assert args[:4] == (max(1, -(-(sum((n + 63) // 64 for n in kv_lens) + 2 * 3) // 4)), 1, 1, 7)
    named = _pointer_args(args)
    assert named["q_ptr"] == q.data_ptr() and named["out_ptr"] == out.data_ptr() and named["batch"] == 3


def test_plans_of_a_layout_share_kernels_not_workspace(hopper):
    backend, launch, calls, made = hopper
    kv_lens = [64, 300]
    kv = indptr(kv_lens, device=CPU)
    a, b = mixmla.plan(kv, num_heads=H, fmt="fp8", backend="gluon"), mixmla.plan(kv, num_heads=H, fmt="fp8",
                                                                                 backend="gluon")
    assert len(made) == 1 and a.backend == b.backend == "gluon"
    assert a._plan.decoders is b._plan.decoders  # compiled once, shared
    wa, wb = a._plan.workspace, b._plan.workspace
    assert wa.part_o != wb.part_o and wa.counters != wb.counters
    programs = a._plan.decoders[0, False].programs
    buffer, block = wa.tensors
    # The partial results in the plan's own buffer, after its outputs, 16-byte aligned.
    assert buffer.untyped_storage().data_ptr() == a.out.untyped_storage().data_ptr()
    assert a.lse.data_ptr() + a.lse.numel() * 4 <= wa.part_o and wa.part_o % 16 == 0 and wa.part_lse % 16 == 0
    assert wa.part_lse == wa.part_o + 2 * programs * 16 * 512 * 4
    assert wa.part_lse + 2 * programs * 16 * 4 <= buffer.data_ptr() + buffer.numel() * 4
    at = (wa.counters - block.data_ptr()) // 4  # the counts: zeros in their block, at a 16-byte boundary
    assert wa.counters % 16 == 0 and torch.equal(block[at:at + 2 * len(kv_lens)], torch.zeros(2 * len(kv_lens),
                                                                                            dtype=torch.int32))
    template = api._LAYOUTS[next(iter(api._LAYOUTS))].template
    assert template.workspace is None  # the template never gets a workspace
    q, cache = _inputs("fp8", kv_lens)
    a.run(q, cache)
    b.run(q, cache, return_lse=True)
    for (_, args), w in zip(calls, (wa, wb)):
        named = _pointer_args(args)
        assert (named["part_o_ptr"], named["part_lse_ptr"], named["counter_ptr"]) == w[:3]
    assert _pointer_args(calls[0][1])["lse_ptr"] == wa.part_lse  # no lse: the kernel gets a valid address


def test_a_repeated_run_launches_the_same_arguments(hopper):
    _, _, calls, _ = hopper
    kv_lens = [129, 5]
    q, cache = _inputs("mxfp4", kv_lens, seed=1)
    p = mixmla.plan(indptr(kv_lens, device=CPU), num_heads=H, fmt="mxfp4", backend="gluon")
    p.run(q, cache)
    p.run(q, cache)
    out, lse = p.run(q, cache, return_lse=True)
    assert len(calls) == 3 and calls[0] == calls[1]
    assert calls[0][0].WRITE_LSE is False and calls[2][0].WRITE_LSE is True
    assert _pointer_args(calls[2][1])["lse_ptr"] == lse.data_ptr()
    q2, _ = _inputs("mxfp4", kv_lens, seed=2)
    p.run(q2, cache)  # another q: checked and launched with its address
    assert _pointer_args(calls[3][1])["q_ptr"] == q2.data_ptr()


def _ranges(costs, programs):
    """The kernel's split (decode._range_bound): program i holds cost units [i*T//P, (i+1)*T//P)."""
    total = int(sum(costs))
    return [(i * total // programs, (i + 1) * total // programs) for i in range(programs)]


@pytest.mark.parametrize("batch,length", [(4, 1024), (4, 8192), (32, 1024), (32, 8192), (64, 1024), (64, 8192),
                                          (256, 1024), (256, 8192), (512, 1024), (1000, 64), (3, 5000), (1, 100),
                                          (120, 8192)])
def test_equal_requests_get_whole_ranges(batch, length):
    """Requests of one length: the grid is a multiple or a divisor of the batch that keeps at least
    ALIGNED_MIN_SHARE of the unrounded grid, and no program holds a piece of a request that another
    program holds a piece of as well as a piece of another request: every range lies inside one
    request or starts and ends at request boundaries."""
    from mixmla.kernels.gluon import backend, launch

    full = 264
    lens = np.full(batch, length, dtype=np.int64)
    programs = backend.grid_size(lens, full)
    cost = -(-length // 64) + launch.REQUEST_COST_TILES
    cap = min(full, -(-batch * cost // backend.MIN_UNITS_PER_PROGRAM))
    assert backend.ALIGNED_MIN_SHARE * cap <= programs <= cap
    assert programs % batch == 0 or batch % programs == 0
    ends = set(int(e) for e in cost * np.arange(0, batch + 1))
    for lo, hi in _ranges([cost] * batch, programs):
        inside = not any(lo < e < hi for e in ends)
        assert hi > lo and (inside or (lo in ends and hi in ends)), (lo, hi)


def test_ragged_requests_keep_the_full_grid():
    """Requests of different lengths: the grid is the unrounded one (ranges cannot all align);
    equal ones too where the aligned grid would be much smaller."""
    from mixmla.kernels.gluon import backend

    lens = np.array([8192] * 255 + [8000], dtype=np.int64)
    assert backend.grid_size(lens, 264) == 264
    assert backend.grid_size(np.array([100, 2000, 5000]), 264) == -(-(2 + 32 + 79 + 3 * 2) // 4)
    assert backend.grid_size(np.zeros(0, dtype=np.int64), 264) == 1
    # A batch with no divisor near the grid keeps the grid, and so does one whose aligned grid
    # would give up more than ALIGNED_MIN_SHARE of the programs (100 x 2 = 200 of 264; 133 x 1).
    for batch in (521, 100, 133):
        assert backend.grid_size(np.full(batch, 1024, dtype=np.int64), 264) == 264


def test_a_query_the_kernel_would_misread_is_refused_before_launch(hopper):
    """The kernel loads query rows 16 bytes at a time: a view at an odd address or with row
    strides that are not multiples of 16 elements gets a ValueError naming q, and nothing runs; an
    aligned view of a wider tensor is taken as it is."""
    _, _, calls, _ = hopper
    kv_lens = [129, 5]
    q, cache = _inputs("fp8", kv_lens)
    p = mixmla.plan(indptr(kv_lens, device=CPU), num_heads=H, fmt="fp8", backend="gluon")
    wide = torch.zeros(2, H, 592, dtype=torch.bfloat16)
    aligned = wide[:, :, :576]
    aligned.copy_(q)
    p.run(aligned, cache)
    assert len(calls) == 1 and _pointer_args(calls[0][1])["stride_qh"] == 592
    shifted = wide[:, :, 8:584]  # 16 bytes in: still aligned
    p.run(shifted, cache)
    assert len(calls) == 2
    for bad in (wide[:, :, 1:577], torch.zeros(2, H, 584, dtype=torch.bfloat16)[:, :, :576]):
        bad.copy_(q)
        with pytest.raises(ValueError, match="q: the Hopper kernel needs a 16-byte aligned query"):
            p.run(bad, cache)
        with pytest.raises(ValueError, match="q: the Hopper kernel needs"):
            mixmla.mla_decode(bad, cache, indptr(kv_lens, device=CPU), backend="gluon")
    assert len(calls) == 2
    out = torch.zeros(2 * H * 512 + 1, dtype=torch.bfloat16)[1:].view(2, H, 512)
    with pytest.raises(ValueError, match="out: the Hopper kernel needs a 16-byte aligned output"):
        p.run(q, cache, out=out)
    assert len(calls) == 2


def test_the_staged_fp8_kernel_gets_its_global_scratch_from_the_workspace(hopper, monkeypatch):
    """Contiguous fp8 plans launch ``decode_tma``'s kernel, one program per SM, whose tensor
    descriptors live in global scratch: the launcher is given the plan's workspace for it (256-byte
    aligned, ``programs`` x 512 bytes before the partial results), never an allocation of Triton's;
    a launcher whose scratch handling mixmla does not know is refused with a clear error."""
    backend, launch, calls, _ = hopper
    from mixmla.kernels.gluon.compile import staged
    from mixmla.kernels.triton import launch as triton_launch

    class KnownLauncher:  # stands in for Triton's: bound past its __call__, straight to ``launch``
        launch_cooperative_grid, launch_pdl = True, False
        global_scratch_size, profile_scratch_size = 512, 0

        def launch(self, *args):
            calls.append(("direct", args))

    def compiled(spec, staged_kernel=None):
        k = _Recorder(spec, calls, scratch=512 if staged(spec, staged_kernel) else 0)
        k.run = KnownLauncher()
        return k

    monkeypatch.setattr(launch, "compile_decode", compiled)
    monkeypatch.setattr(triton_launch, "launcher_call_is_known", lambda cls: cls is KnownLauncher)
    kv_lens = [64] * 256
    q, cache = _inputs("fp8", kv_lens)
    p = mixmla.plan(indptr(kv_lens, device=CPU), num_heads=H, fmt="fp8", backend="gluon")
    decoder = p._plan.decoders[0, False]
    programs = backend.grid_size(np.array(kv_lens), 132)  # one per SM of the 132
    assert decoder.scratch_per_program == 512 and decoder.programs == programs == 128
    p.run(q, cache)
    _, args = calls[-1]
    assert args[:4] == (programs, 1, 1, 7)
    work = p._plan.workspace
    scratch = args[7]
    buffer = work.tensors[0]
    assert scratch == work.scratch and (scratch - buffer.data_ptr()) % 256 == 0  # CUDA buffers start 512-aligned
    assert p.lse.data_ptr() + p.lse.numel() * 4 <= scratch and scratch + programs * 512 <= work.part_o
    assert _pointer_args(args, first=13)["part_o_ptr"] == work.part_o
    mx = mixmla.plan(indptr(kv_lens, device=CPU), num_heads=H, fmt="mxfp4", backend="gluon")
    mx_programs = mx._plan.decoders[0, False].programs  # two per SM
    assert mx_programs == backend.grid_size(np.array(kv_lens), 264) == 192 and mx._plan.workspace.scratch is None

    monkeypatch.setattr(triton_launch, "launcher_call_is_known", lambda cls: False)
    with pytest.raises(RuntimeError, match="backend='triton'"):
        mixmla.plan(indptr(kv_lens, device=CPU), num_heads=H, fmt="fp8", backend="gluon").run(q, cache)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
@pytest.mark.parametrize("page_size", [1, 16, 32, 64, 128])
def test_paged_plans_launch_the_form_of_their_page_size(hopper, fmt, page_size):
    """A paged fp8 plan launches the staged kernel's row-copy form (``SMALL_PAGES``) for pages
    smaller than a tile and its TMA form for the others, one program per SM either way; MXFP4 plans
    launch ``decode``'s kernel, two programs per SM, in its form for pages smaller than a tile (rows
    asked of L2 two tiles ahead) or the other. The launch gets the pool's page count and the page
    size as a shift."""
    from mixmla.kernels.gluon.compile import staged
    from mixmla.paged import scatter_to_pages

    _, _, calls, _ = hopper
    kv_lens = [300, 5000, 64]
    q, cache = _inputs(fmt, kv_lens)
    batch = scatter_to_pages(cache, indptr(kv_lens, device=CPU), page_size, generator=torch.Generator().manual_seed(2))
    p = mixmla.plan_paged(batch.block_table, batch.seq_lens, page_size, num_heads=H, fmt=fmt, backend="gluon")
    p.run(q, batch.cache)
    spec, args = calls[-1]
    assert spec.PAGED == 1 and spec.SMALL_PAGES == (page_size < 64)
    assert staged(spec) == (fmt == "fp8")
    assert args[0] <= (132 if fmt == "fp8" else 264)
    named = _pointer_args(args)
    assert named["page_shift"] == page_size.bit_length() - 1 and named["num_pages"] == batch.cache.num_pages


def test_piece_counts_are_disjoint_zeroed_parts_of_shared_blocks(monkeypatch):
    """``new_counters``: each workspace's counts are zeros no other live workspace shares, at 16-byte
    boundaries, cut from one zeroed block per stream until it runs out (then a new block); counts
    of more than a quarter of a block get a tensor of their own."""
    from mixmla.kernels.gluon import launch

    monkeypatch.setattr(launch, "COUNTER_BLOCK", 64)
    monkeypatch.setattr(launch, "_COUNTER_BLOCKS", {})
    parts = [launch.new_counters(b, CPU) for b in (8, 3, 8, 7, 5, 2)]
    for p, b in zip(parts, (8, 3, 8, 7, 5, 2)):
        assert p.shape == (2 * b,) and p.dtype == torch.int32 and p.data_ptr() % 16 == 0
        assert torch.equal(p, torch.zeros(2 * b, dtype=torch.int32))
    for p in parts:
        p.fill_(1)  # a workspace writing its counts reaches no other's
    spans = sorted((p.data_ptr(), p.data_ptr() + 4 * p.numel()) for p in parts)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    blocks = {p.untyped_storage().data_ptr() for p in parts}
    assert 1 < len(blocks) < len(parts)  # shared blocks, and a new one once the first ran out
    fresh = launch.new_counters(40, CPU)
    assert torch.equal(fresh, torch.zeros(80, dtype=torch.int32)) and fresh.untyped_storage().nbytes() == 320


def test_only_decode_tma_reads_fp8():
    """``compile.staged``: fp8 specializations are ``decode_tma``'s, and asking for ``decode``'s
    (which reads MXFP4 only) is a ValueError; MXFP4 is ``decode``'s unless the staged form is asked for."""
    from mixmla.kernels.gluon.compile import staged
    from mixmla.kernels.gluon.launch import shipped_specs

    specs = shipped_specs()
    fp8 = [s for s in specs if s.FORMAT == 1]
    mx = [s for s in specs if s.FORMAT == 2]
    assert fp8 and mx
    assert all(staged(s) and staged(s, True) for s in fp8)
    assert not any(staged(s) or staged(s, False) for s in mx) and all(staged(s, True) for s in mx)
    with pytest.raises(ValueError, match="staged_kernel=False"):
        staged(fp8[0], False)
