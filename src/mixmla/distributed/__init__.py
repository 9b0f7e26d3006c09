"""Decode context parallelism (DCP): one request's KV cache spread over several GPUs by token.

``shard_kv`` gives each rank its tokens (token ``i`` of a request on rank
``(i // interleave) % world_size``); ``dcp_decode`` runs the decode on every rank's shard and
merges the partial results exactly over ``torch.distributed``; ``dcp_plan`` is its plan-once form
for serving loops. The merge itself (``merge``) is plain PyTorch. docs/ARCHITECTURE.md describes
the schedules and what they exchange.

    import torch.distributed as dist, mixmla.distributed as dcp
    shard = dcp.shard_kv(cache, kv_indptr, dist.get_world_size(), dist.get_rank(), interleave=64)
    out, lse = dcp.dcp_decode(q, shard, return_lse=True)     # the full result on every rank
"""

from .dcp import SCHEDULES, DcpPlan, dcp_decode, dcp_plan
from .merge import global_lse, merge_partials, rank_weights
from .shard import KVShard, local_lengths, shard_kv

__all__ = ["shard_kv", "KVShard", "local_lengths", "dcp_decode", "dcp_plan", "DcpPlan", "SCHEDULES",
           "merge_partials", "global_lse", "rank_weights"]
