"""compute-sanitizer target: the staged Hopper kernel on paged fp8 (pages 1, 16, 64 and 128, block table
and CSR), then with page entries outside the pool (-1, num_pages); checks the first result against
the reference. Run: compute-sanitizer --tool memcheck python bench/studies/sanitize_paged_fp8.py"""
import torch
from mixmla.formats import as_cache
from mixmla.inputs import generate_ragged
from mixmla.paged import scatter_to_pages
from mixmla.reference import default_sm_scale, mla_decode_reference
from mixmla.check import check_strict
from mixmla.kernels.gluon.launch import HopperDecoder

for ps in (1, 16, 64, 128):
    q, kv, qo, kvp, _ = generate_ragged(7, 1, 2000, seed=ps, device="cuda")
    cache = as_cache(kv["fp8"])
    b = scatter_to_pages(cache, kvp, ps, generator=torch.Generator().manual_seed(1), spare_pages=2)
    for form, pages in ((1, b.block_pages), (2, b.csr_pages)):
        d = HopperDecoder(7, 16, "fp8", q.device, paged=form, page_size=ps)
        out = torch.full((q.shape[0], 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
        lse = torch.full((q.shape[0], 16), float("nan"), device="cuda")
        d.launch(q, b.cache.rows, pages.seq_lens, qo, out, lse, default_sm_scale(), table=pages.table,
                 page_indptr=pages.page_indptr, page_size=ps)
        ref, _ = mla_decode_reference(q, cache, kvp, qo)
        r = check_strict(out, ref)
        print("page", ps, "form", form, r.passed, r.message)
        t = pages.table.clone()
        flat = t.view(-1)
        flat[flat.numel() // 3] = -1
        flat[flat.numel() // 2] = b.cache.num_pages
        d.launch(q, b.cache.rows, pages.seq_lens, qo, out, lse, default_sm_scale(), table=t,
                 page_indptr=pages.page_indptr, page_size=ps)
        torch.cuda.synchronize()
        print("bad entries ran; finite:", bool(torch.isfinite(out.float()).all()))
