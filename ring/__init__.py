"""Ring attention over torch.distributed (issue 45): one sequence sharded over a process group.

    from ring import ring_attention, shard, unshard
    o_r = ring_attention(shard(q, r, P, "zigzag"), shard(k, r, P, "zigzag"), shard(v, r, P, "zigzag"),
                         causal=True, layout="zigzag")          # on every rank r of the group
    o = unshard([o_0, ..., o_{P-1}], "zigzag")                  # equals the one-process attention

ring/attention.py (the ring, the merge, the backward), ring/layout.py (shard, unshard), ring/comm.py (the sends and
receives, their errors), ring/launch.py (a local launcher whose failures end the job). The counts (bytes per step,
FLOPs, the overlap condition) are counting/ring.py; docs/ring-attention.md tells the whole story.
"""
from __future__ import annotations

from ring.attention import merge, ring_attention
from ring.comm import RingError
from ring.layout import shard, unshard

__all__ = ["RingError", "merge", "ring_attention", "shard", "unshard"]
