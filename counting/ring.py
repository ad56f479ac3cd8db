"""Ring attention's counts (issue 45): who holds which positions, what each step computes, what it sends.

Ring attention (Liu, Zaharia, Abbeel 2023, arXiv 2310.01889) shards one sequence of N positions over P ranks. Each
rank keeps its queries and passes its K/V block to the next rank, P - 1 times, so after P steps every query has met
every key. Step t on rank r works on the block that started on rank (r - t) mod P, its *origin*. The code that runs
it is ring/attention.py; this module is torch-free, so the report can count without it.

Layouts (which positions rank r holds):
  contiguous  positions [⌊rN/P⌋, ⌊(r+1)N/P⌋): lengths differ by at most one when P does not divide N
              (ragged chunks, no padding).
  zigzag      the sequence cut into 2P chunks the same way; rank r holds chunk r (early) and chunk 2P-1-r (late),
              concatenated. Under the causal mask every rank then has the same work at every step (below).

The per-step structure (`step_blocks`), for the causal mask (query i sees key j iff j <= i):
  contiguous  origin = rank: the diagonal block, causal; origin < rank: the whole block, no mask;
              origin > rank: nothing (every key is later than every query).
  zigzag      origin = rank: the diagonal, causal (the concatenation keeps the order, so the local causal mask is
              the global one); origin < rank: all local queries against the origin's early chunk (its late chunk
              comes after both of ours); origin > rank: our late chunk against the origin's whole block (its early
              chunk is after ours, its late chunk before our late one).
Without the mask every step is the whole block against the whole block, in either layout.

Counts (per rank and step; B batch, H query heads, H_kv K/V heads, s the input's itemsize):
  forward   sends K and V of the block in hand, at steps 0..P-2: 2·B·H_kv·n_origin·d·s bytes
  backward  the K/V ring again (P - 1 sends), and dK, dV of the block in hand at every step, float32 (they are
            accumulators travelling with their block, returned to the owner by the last send): 2·B·H_kv·n·d·4
  FLOPs     4·d per visible (query, key) pair forward (counting.headline's convention), 2.5 times that backward
            (the papers' five products against two), times B·H.

Overlap: a step's send is posted before its local attention starts, so it is hidden when the step's compute time
(FLOPs / rate) is at least its transfer time (bytes / link bandwidth, one direction). For the whole block against the
whole block, 4·H·d·n² / rate >= 2·H_kv·n·d·s / link gives n >= H_kv·s·rate / (2·H·link): d cancels, and the block
must hold a fixed number of tokens (`min_tokens_hidden`; about 2,200 for bf16 at the H100's peak over NVLink 4,
twice that causal, where step 0 computes only the diagonal's half).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from counting.headline import visible_pairs

LAYOUTS = ("contiguous", "zigzag")
FLOAT32 = 4  # bytes of the travelling dK/dV accumulators
BACKWARD_PER_PAIR = 10  # FLOPs per visible pair and d in the backward: 2.5 x the forward's 4


def check_layout(layout) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    return layout


def split(n: int, parts: int) -> list[int]:
    """n positions in `parts` chunks, chunk c = [⌊cn/parts⌋, ⌊(c+1)n/parts⌋): sizes differ by at most one."""
    return [(c + 1) * n // parts - c * n // parts for c in range(parts)]


def check_ring(n: int, world: int, layout: str) -> None:
    """Every chunk must hold a position: N >= P (contiguous) or N >= 2P (zigzag)."""
    check_layout(layout)
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"the ring needs at least one rank, got {world!r}")
    chunks = world * (2 if layout == "zigzag" else 1)
    if n < chunks:
        raise ValueError(f"N={n} positions cannot fill the {chunks} chunks of layout {layout!r} over {world} "
                         f"ranks: each chunk needs a position (N >= {chunks})")


def chunks(n: int, world: int, layout: str) -> list[tuple[int, ...]]:
    """Per rank, the sizes of the chunks it holds, in the order it holds them: (n_r,) or (early, late)."""
    return list(_chunks(n, world, layout))


@lru_cache(maxsize=64)  # the closed forms ask for it P² times per problem
def _chunks(n: int, world: int, layout: str) -> tuple:
    check_ring(n, world, layout)
    if layout == "contiguous":
        return tuple((s,) for s in split(n, world))
    c = split(n, 2 * world)
    return tuple((c[r], c[2 * world - 1 - r]) for r in range(world))


def sizes(n: int, world: int, layout: str) -> list[int]:
    """Positions each rank holds."""
    return list(_sizes(n, world, layout))


@lru_cache(maxsize=64)
def _sizes(n: int, world: int, layout: str) -> tuple:
    return tuple(sum(c) for c in _chunks(n, world, layout))


def positions(n: int, world: int, layout: str, rank: int) -> list[tuple[int, int]]:
    """The global [start, stop) ranges rank `rank` holds, in its local order."""
    check_ring(n, world, layout)
    if layout == "contiguous":
        return [(rank * n // world, (rank + 1) * n // world)]
    p2 = 2 * world
    return [(c * n // p2, (c + 1) * n // p2) for c in (rank, p2 - 1 - rank)]


def origin(rank: int, step: int, world: int) -> int:
    """The rank whose K/V block rank `rank` holds at step `step`."""
    return (rank - step) % world


@dataclass(frozen=True)
class Block:
    """One local attention call of a step: local queries [q0, q1) against the block's keys [k0, k1); causal on the
    diagonal only (there the rows and columns are the same positions, Nq = Nk)."""

    q0: int
    q1: int
    k0: int
    k1: int
    causal: bool

    @property
    def pairs(self) -> int:
        return visible_pairs(self.q1 - self.q0, self.k1 - self.k0, self.causal)


def step_blocks(n: int, world: int, layout: str, causal: bool, rank: int, step: int) -> list[Block]:
    """What rank `rank` computes at step `step` (module docstring): zero or one Block."""
    held = chunks(n, world, layout)
    src = origin(rank, step, world)
    n_q, n_k = sum(held[rank]), sum(held[src])
    if not causal:
        return [Block(0, n_q, 0, n_k, False)]
    if src == rank:
        return [Block(0, n_q, 0, n_k, True)]
    if layout == "contiguous":
        return [Block(0, n_q, 0, n_k, False)] if src < rank else []
    if src < rank:
        return [Block(0, n_q, 0, held[src][0], False)]
    return [Block(held[rank][0], n_q, 0, n_k, False)]


# -- closed forms (no loop over blocks: the tests hold them equal to step_blocks and to what the ring does) --------

def step_pairs(n: int, world: int, layout: str, causal: bool, rank: int, step: int) -> int:
    """Visible (query, key) pairs rank `rank` computes at step `step`, per (batch, head)."""
    held = _chunks(n, world, layout)
    src = origin(rank, step, world)
    n_r, n_s = sum(held[rank]), sum(held[src])
    if not causal:
        return n_r * n_s
    if src == rank:
        return n_r * (n_r + 1) // 2
    if layout == "contiguous":
        return n_r * n_s if src < rank else 0
    return n_r * held[src][0] if src < rank else held[rank][1] * n_s


def step_flops(n, world, layout, causal, rank, step, *, batch=1, heads=1, d=64, backward=False) -> int:
    per_pair = BACKWARD_PER_PAIR if backward else 4
    return per_pair * batch * heads * d * step_pairs(n, world, layout, causal, rank, step)


def kv_bytes(n, world, layout, rank, step, *, batch=1, kv_heads=1, d=64, itemsize=2) -> int:
    """K and V bytes rank `rank` sends at step `step` (forward, and again in the backward): its block in hand, to
    rank + 1; nothing at the last step, where every rank holds the block it would otherwise pass on for nothing."""
    if step == world - 1:
        return 0
    return 2 * batch * kv_heads * d * itemsize * _sizes(n, world, layout)[origin(rank, step, world)]


def dkv_bytes(n, world, layout, rank, step, *, batch=1, kv_heads=1, d=64) -> int:
    """dK and dV bytes rank `rank` sends at step `step` of the backward (float32 accumulators, every step: the
    last send returns each block's gradient to its owner). One rank sends nothing."""
    if world == 1:
        return 0
    return 2 * batch * kv_heads * d * FLOAT32 * _sizes(n, world, layout)[origin(rank, step, world)]


def bytes_per_rank(n, world, layout, rank, *, batch=1, kv_heads=1, d=64, itemsize=2) -> dict:
    """Totals over the steps: forward K/V = 2·B·H_kv·d·s·(N - n_{r+1}) (every block but the one it would
    receive last), backward adds the same K/V again and 2·B·H_kv·d·4·N of dK/dV. One rank sends nothing."""
    if world == 1:
        return {"forward": 0, "backward": 0}
    kv = 2 * batch * kv_heads * d * itemsize * (n - sizes(n, world, layout)[(rank + 1) % world])
    return {"forward": kv, "backward": kv + 2 * batch * kv_heads * d * FLOAT32 * n}


def imbalance(n: int, world: int, layout: str, causal: bool) -> float:
    """The ring's critical path over the ideal: Σ_t max_r pairs(r, t) / (Σ_{r,t} pairs(r, t) / P). Each step
    ends when its slowest rank has its next block, so a step lasts as long as its busiest rank computes.
    Contiguous causal: (2P - 1)/P at P | N (about 2: the last rank computes every step, the first once);
    zigzag: 1 up to the odd positions of ragged chunks."""
    steps = [[step_pairs(n, world, layout, causal, r, t) for r in range(world)] for t in range(world)]
    total = sum(map(sum, steps))
    return sum(map(max, steps)) * world / total if total else 1.0


def min_tokens_hidden(layout: str, causal: bool, *, itemsize: int, rate: float, link: float, heads: int = 1,
                      kv_heads: int = 1, backward: bool = False, world: int | None = None) -> float:
    """Tokens per rank from which every step's compute hides the transfer in flight meanwhile (as `overlap`).

    A step that computes f·n² pairs hides b·n·d·H_kv bytes when c·H·d·f·n² / rate >= b·H_kv·n·d / link, i.e.
        n >= b·H_kv·rate / (c·f·H·link)          c = 4 forward, 10 backward; d cancels
    Step 0 computes the diagonal (f = 1/2 causal, else 1) while only K/V travel (b = 2s). The later steps compute
    f = 1 (no mask; contiguous causal's busiest rank) or 1/2 (zigzag causal) while K/V travel, and in the backward
    the previous step's dK/dV too (b = 2s + 2·4); at P = 2 the backward's second step carries dK/dV alone (b = 8).
    The threshold is the larger of the two: forward s·rate/(2·link)·H_kv/H without the mask and twice that causal,
    backward (s + 4)·rate/(5·link)·H_kv/H except zigzag causal, twice that."""
    check_layout(layout)
    c = BACKWARD_PER_PAIR if backward else 4
    f0 = 0.5 if causal else 1.0
    f1 = 0.5 if causal and layout == "zigzag" else 1.0
    b0 = 2 * itemsize
    b1 = (2 * FLOAT32 if world == 2 else 2 * itemsize + 2 * FLOAT32) if backward else 2 * itemsize
    return max(b0 / f0, b1 / f1) * kv_heads * rate / (c * heads * link)


def overlap(n: int, world: int, layout: str, causal: bool, *, batch=1, heads=1, kv_heads=1, d=64, itemsize=2,
            rate: float, link: float, backward: bool = False) -> dict:
    """Step by step: the busiest rank's compute (FLOPs / rate) against the largest transfer in flight meanwhile
    (bytes / link), the ring's time if each step lasts the longer of the two, the one-GPU time of the whole problem
    at the same rate, and whether every transfer is hidden. In flight during step t: the next K/V block (t < P - 1)
    and, in the backward, the dK/dV sent at the end of step t - 1; the last dK/dV send (back to the owners) follows
    the last compute and is never hidden (`tail_s`). A model of the schedule, not of the kernels: the rate is what
    the local attention attains (the GPU's peak overstates it, which makes hiding look harder, not easier)."""
    steps = []
    for t in range(world):
        c = max(step_flops(n, world, layout, causal, r, t, batch=batch, heads=heads, d=d, backward=backward)
                for r in range(world)) / rate
        sent = [kv_bytes(n, world, layout, r, t, batch=batch, kv_heads=kv_heads, d=d, itemsize=itemsize)
                + (dkv_bytes(n, world, layout, r, t - 1, batch=batch, kv_heads=kv_heads, d=d)
                   if backward and t > 0 else 0)
                for r in range(world)]
        x = max(sent) / link
        steps.append({"step": t, "compute_s": c, "transfer_s": x, "bytes": max(sent), "hidden": x <= c})
    tail = max(dkv_bytes(n, world, layout, r, world - 1, batch=batch, kv_heads=kv_heads, d=d)
               for r in range(world)) / link if backward and world > 1 else 0.0
    per_pair = BACKWARD_PER_PAIR if backward else 4
    one_gpu = per_pair * batch * heads * d * visible_pairs(n, n, causal) / rate
    ring = sum(max(s["compute_s"], s["transfer_s"]) for s in steps) + tail
    return {"steps": steps, "tail_s": tail, "ring_s": ring, "one_gpu_s": one_gpu,
            "speedup": one_gpu / ring if ring else 0.0, "hidden": all(s["hidden"] for s in steps),
            "imbalance": imbalance(n, world, layout, causal)}
