"""python -m ring [P]: the causal ring on P CPU processes (gloo), both layouts, against one process and the counts."""
from __future__ import annotations

import sys

import torch

from counting import ring as counts
from ring.attention import _demo_rank


def main(argv=None) -> int:
    """P CPU processes (gloo) run the causal ring on N = 61 positions, both layouts: the error against one process,
    and what rank 0 sent and computed per step against counting/ring.py."""
    from ring.launch import spawn
    from ring.layout import unshard
    from variants import attention

    world, n = int((argv or sys.argv[1:] or ["4"])[0]), 61
    res = spawn(_demo_rank, world, n)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 16, generator=g).requires_grad_() for _ in range(3))
    o1 = attention(q, k, v, causal=True)
    o1.sum().backward()
    for layout in counts.LAYOUTS:
        o = unshard([r[layout]["o"] for r in res], layout)
        dq = unshard([r[layout]["dq"] for r in res], layout)
        print(f"{layout}: N={n} over P={world} ranks holding {counts.sizes(n, world, layout)} positions; "
              f"|o - one process| = {(o - o1).abs().max():.1e}, |dq - one process| = {(dq - q.grad).abs().max():.1e}")
        for t in range(world):
            sent = sum(x["bytes"] for x in res[0][layout]["log"] if x.get("step") == t and x["pass"] == "forward"
                       and "bytes" in x)
            pairs = counts.step_pairs(n, world, layout, True, 0, t)
            print(f"  rank 0, step {t}: block of rank {counts.origin(0, t, world)}, {pairs:4d} (query, key) pairs "
                  f"computed, {sent:5d} bytes sent (closed form "
                  f"{counts.kv_bytes(n, world, layout, 0, t, kv_heads=2, d=16, itemsize=4)})")
        print(f"  load imbalance of the causal ring: {counts.imbalance(n, world, layout, True):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
