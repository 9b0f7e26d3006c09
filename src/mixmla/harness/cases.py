"""Benchmark cases: which shapes, their inputs and references, and the bytes they must move.

A *spec* is the dict of ``mixmla.inputs.parse_spec_line`` (``batchsize, qseqlen, kvseqlen, seed``
and optionally ``numheads``, ``ragged``). A :class:`Case` holds one spec's generated inputs and,
computed on first use and kept, the exact reference output for each cache format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..formats import HEAD_DIM, VALUE_DIM, Bf16Cache, Fp8Cache, Mxfp4Cache

__all__ = [
    "BYTES_PER_TOKEN", "parse_shape", "spec_label", "load_specs", "min_bytes", "Case",
]

#: KV bytes read per cached token (docs/SPEC.md): bf16 576 x 2; fp8 576 x 1; MXFP4 288 code bytes + 18
#: E8M0 scale bytes.
BYTES_PER_TOKEN = {c.format: c.bytes_per_token for c in (Bf16Cache, Fp8Cache, Mxfp4Cache)}

#: Seed of a shape given on the command line without one (``--shape B,Lq,Lk``).
DEFAULT_SEED = 4242


def parse_shape(text: str) -> dict:
    """``"B,Lq,Lk"`` or ``"B,Lq,Lk,H"`` (also ``x`` as separator) -> a spec dict.

    B: requests, Lq: query tokens per request, Lk: cached tokens per request, H: query heads
    (default 16). The seed is :data:`DEFAULT_SEED`. Raises ValueError for anything else.
    """
    parts = [p.strip() for p in text.replace("x", ",").split(",") if p.strip()]
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        nums = []
    if len(nums) not in (3, 4) or nums[0] < 1 or nums[1] < 1 or nums[2] < 0 or (len(nums) == 4 and nums[3] < 1):
        raise ValueError(f"--shape wants B,Lq,Lk or B,Lq,Lk,H with B, Lq, H >= 1 and Lk >= 0; got {text!r}")
    spec = {"batchsize": nums[0], "qseqlen": nums[1], "kvseqlen": nums[2], "seed": DEFAULT_SEED}
    if len(nums) == 4:
        spec["numheads"] = nums[3]
    return spec


def spec_label(spec: dict) -> str:
    """Short readable name: ``"256x8192"`` for the benchmark's Lq=1, H=16 uniform shapes, else
    e.g. ``"4x1024 q4 h32 ragged"``."""
    label = f"{spec['batchsize']}x{spec['kvseqlen']}"
    if spec.get("qseqlen", 1) != 1:
        label += f" q{spec['qseqlen']}"
    if spec.get("numheads", 16) != 16:
        label += f" h{spec['numheads']}"
    if spec.get("ragged"):
        label += " ragged"
    if spec.get("page_size"):
        label += f" p{spec['page_size']}"
    return label


def load_specs(shapes: Sequence[str] | None = None, spec_file: str | None = None) -> list[dict]:
    """The specs to run: ``--shape`` texts, plus the lines of ``--spec FILE``; with neither, the 8
    ranked benchmark shapes of docs/SPEC.md (``mixmla.inputs.BENCHMARK_SHAPES``)."""
    from ..inputs import BENCHMARK_SHAPES, parse_spec_file

    specs = [parse_shape(s) for s in (shapes or [])]
    if spec_file:
        specs += parse_spec_file(spec_file)
    return specs or [dict(s) for s in BENCHMARK_SHAPES]


def min_bytes(total_q: int, total_kv: int, num_heads: int, fmt: str) -> int:
    """Bytes a decode call must move at least: every cached token once in ``fmt``
    (:data:`BYTES_PER_TOKEN`), q read once (bf16, 576 per head), out written once (bf16, 512 per
    head). Index arrays and the fp8 scalar are ignored (a few bytes)."""
    if fmt not in BYTES_PER_TOKEN:
        raise ValueError(f"unknown format {fmt!r}")
    return total_kv * BYTES_PER_TOKEN[fmt] + total_q * num_heads * 2 * (HEAD_DIM + VALUE_DIM)


@dataclass
class Case:
    """One spec's inputs on ``device`` and its references.

    data: the benchmark tuple ``(q, kv_data, qo_indptr, kv_indptr, config)`` of docs/SPEC.md.
    ``ref(fmt)``: float64 reference output (total_q, H, 512) on ``device`` for the cache in format
    ``fmt``, computed once by ``mixmla.reference.mla_decode_reference``.
    """

    spec: dict
    data: tuple
    _refs: dict = field(default_factory=dict, repr=False)
    _paged: dict = field(default_factory=dict, repr=False)

    @classmethod
    def generate(cls, spec: dict, device=None) -> "Case":
        from ..inputs import generate_from_spec

        return cls(dict(spec), generate_from_spec(spec, device=device))

    @property
    def label(self) -> str:
        return spec_label(self.spec)

    @property
    def page_size(self) -> int:
        """Tokens per page of the paged layout this case is timed in (``mixmla bench --paged``), 0
        for the benchmark's contiguous layout."""
        return int(self.spec.get("page_size", 0))

    def with_pages(self, page_size: int) -> "Case":
        """This case's inputs (and references, computed once for both) timed in pages of
        ``page_size`` tokens."""
        return Case(dict(self.spec, page_size=page_size), self.data, self._refs)

    def paged(self, fmt: str):
        """The cache in ``fmt`` laid out in pages of ``page_size`` tokens in a random order
        (``mixmla.paged.PagedBatch``, seeded by the spec; made once), for every paged path."""
        if fmt not in self._paged:
            import torch

            from ..paged import scatter_to_pages

            gen = torch.Generator().manual_seed(int(self.spec.get("seed", 0)) + self.page_size)
            self._paged[fmt] = scatter_to_pages(self.cache(fmt), self.data[3], self.page_size, generator=gen)
        return self._paged[fmt]

    @property
    def q(self):
        return self.data[0]

    @property
    def config(self) -> dict:
        return self.data[4]

    @property
    def num_heads(self) -> int:
        return int(self.q.shape[1])

    @property
    def total_q(self) -> int:
        return int(self.q.shape[0])

    @property
    def total_kv(self) -> int:
        return int(self.data[3][-1].item())

    @property
    def sm_scale(self) -> float:
        return float(self.config["sm_scale"])

    def cache(self, fmt: str):
        """The cache container (``mixmla.formats``) for ``fmt`` in 'bf16', 'fp8', 'mxfp4'."""
        from ..formats import as_cache

        return as_cache(self.data[1][fmt])

    def ref(self, fmt: str):
        if fmt not in self._refs:
            from ..reference import mla_decode_reference

            q, _, qo_indptr, kv_indptr, _ = self.data
            self._refs[fmt], _ = mla_decode_reference(q, self.cache(fmt), kv_indptr, qo_indptr, self.sm_scale)
        return self._refs[fmt]

    def bytes(self, fmt: str) -> int:
        """:func:`min_bytes` of this case in ``fmt``."""
        return min_bytes(self.total_q, self.total_kv, self.num_heads, fmt)
