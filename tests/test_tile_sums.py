"""tiling.tile_sums (closed form, time independent of N) equals its per-block definition exactly;
headline.visible_pairs / attention_flops count the work the mask lets through."""
from __future__ import annotations

import time

from hypothesis import given, strategies as st

from counting import closed_forms as cf
from counting.headline import attention_flops, paper_flops, visible_pairs
from counting.tiling import TileSums, Tiling, _tile_sums_loop, floor_sums, tile_sums


@st.composite
def tilings(draw, max_n=400):
    n_q, n_k = draw(st.integers(1, max_n)), draw(st.integers(1, max_n))
    return Tiling(n_q, n_k, draw(st.integers(1, n_q + 9)), draw(st.integers(1, n_k + 9)),
                  draw(st.booleans()))


@given(t=tilings())
def test_closed_form_equals_the_loop(t):
    assert tile_sums(t) == _tile_sums_loop(t), t


@given(t=tilings(max_n=40), k=st.integers(1, 10**15))
def test_huge_sizes_scale_exactly(t, k):
    """Scaling Nq, Nk, Br, Bc by k scales every tile by k: tile counts stay, Σr, Σc, Σr·n(n-1)/2 grow
    by k and Σr·c, Σr·c0 by k². Holds tile_sums at sizes far past any loop against the small loop."""
    big = Tiling(t.n_q * k, t.n_k * k, t.block_q * k, t.block_k * k, t.causal)
    s, b = _tile_sums_loop(t), tile_sums(big)
    assert b == TileSums(s.tiles, k * s.r, k * s.c, k * k * s.rc, k * s.r_later, k * s.r_tri,
                         k * k * s.r_c0, s.k_blocks), (t, k)


@given(n_q=st.integers(1, 2**62), n_k=st.integers(1, 2**62), br=st.integers(1, 2**40),
       bc=st.integers(1, 2**40), causal=st.booleans())
def test_huge_sizes_keep_the_invariants(n_q, n_k, br, bc, causal):
    t = Tiling(n_q, n_k, br, bc, causal)
    t0 = time.perf_counter()
    s = tile_sums(t)
    assert time.perf_counter() - t0 < 0.5  # O(log N) steps: ~1 ms; the margin is for a loaded 2-core CI
    c_first = min(bc, n_k)
    pairs = visible_pairs(n_q, n_k, causal)
    assert pairs <= s.rc <= n_q * n_k  # visited tiles cover every visible pair, no more than all
    assert s.k_blocks == t.t_c and s.tiles <= t.t_r * t.t_c
    assert s.r <= s.tiles * br and s.c <= s.tiles * bc and s.rc <= s.r * bc
    assert s.r_c0 % c_first == 0 and s.r_later == s.r - s.r_c0 // c_first  # rows of visiting blocks
    assert 0 <= 2 * s.r_tri <= s.r * (t.t_c - 1)
    if not causal:
        assert s.rc == n_q * n_k and s.tiles == t.t_r * t.t_c


@given(a=st.integers(0, 50), b=st.integers(0, 80), c=st.integers(1, 50), n=st.integers(0, 60))
def test_floor_sums(a, b, c, n):
    f = [(a * x + b) // c for x in range(n + 1)]
    assert floor_sums(a, b, c, n) == (sum(f), sum(x * v for x, v in enumerate(f)), sum(v * v for v in f))


@given(n_q=st.integers(1, 300), n_k=st.integers(1, 300), causal=st.booleans())
def test_visible_pairs_count_the_mask(n_q, n_k, causal):
    want = sum(min(n_k, max(0, i + n_k - n_q + 1)) if causal else n_k for i in range(n_q))
    assert visible_pairs(n_q, n_k, causal) == want
    assert attention_flops(2, 3, n_q, n_k, 8, causal) == 4 * 8 * 6 * want
    if not causal:
        assert paper_flops(2, 3, n_q, n_k, 8) == attention_flops(2, 3, n_q, n_k, 8)  # exact unmasked


def test_causal_long_queries_short_keys_is_not_half_the_square():
    """The issue's case: Nq = 16k, Nk = 1k causal has 1k·1025/2 visible pairs, not 16k·1k/2."""
    assert visible_pairs(16384, 1024, True) == 1024 * 1025 // 2
    assert paper_flops(1, 1, 16384, 1024, 128, True) == 16 * attention_flops(1, 1, 16384, 1024, 128, True) \
        * 1024 / 1025


@given(n_q=st.integers(1, 5000), n_k=st.integers(1, 5000), d=st.integers(1, 256), causal=st.booleans(),
       br=st.integers(1, 300), bc=st.integers(1, 300), variant=st.sampled_from(cf.VARIANT_NAMES))
def test_work_never_exceeds_the_executed_matmul_flops(n_q, n_k, d, causal, br, bc, variant):
    tr = cf.counts(variant, 1, 2, n_q, n_k, d, causal=causal, block_q=br, block_k=bc)
    assert tr.attention_flops <= tr.flops["matmul"]
