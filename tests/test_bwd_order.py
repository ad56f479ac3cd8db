"""The step order knob ORDER of the Hopper backward (kernels/cuda/fa2_wgmma_bwd.cu) and the lab's v4
(lab/cuda/fa2_wgmma_bwd_ws.cu), on the CPU: which (query head, Q block i) tile a key block's step t reads.

ORDER=0 (shipped): t = h*T + (i - i_first), heads outer, i ascending. ORDER=1: t = (Tr-1 - i)*G + h, i descending,
heads inner, so every key block of a kv head reads tile (h, i) at the same step (issue 42: L2 reuse of Q_i, dO_i
across the concurrent CTAs). Checked here: each order visits every visible tile exactly once; ORDER=1 aligns the
steps across key blocks (ORDER=0 does not, the drift the issue describes); v4's incremental loader and reducer
counters (hand-mirrored from the .cu) follow the same map; and DETERMINISTIC's semaphore waits (key block j waits
until j*NWG reduces reached the tile) make progress in either order, adding into each dQ tile in key-block order.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import fa2_wgmma_bwd
from kernels.fa2_wgmma_bwd import step_tiles


def i_first(j: int, bc: int, br: int, n_q: int, n_k: int, causal: bool) -> int:
    """fa2_wgmma_bwd.cu's first Q block that sees key block j (bottom-right causal)."""
    return max(0, j * bc - (n_k - n_q)) // br if causal else 0


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(1, 40), st.integers(0, 45), st.integers(1, 9), st.sampled_from([0, 1]))
def test_every_visible_tile_exactly_once(t_r, first, g, order):
    first = min(first, t_r - 1)
    tiles = step_tiles(order, first, t_r, g)
    assert len(tiles) == g * (t_r - first)
    assert sorted(tiles) == [(h, i) for h in range(g) for i in range(first, t_r)]


def test_order1_is_i_descending_heads_inner():
    assert step_tiles(1, 1, 4, 2) == [(0, 3), (1, 3), (0, 2), (1, 2), (0, 1), (1, 1)]
    assert step_tiles(0, 1, 4, 2) == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]
    with pytest.raises(ValueError, match="ORDER=2"):
        step_tiles(2, 0, 4, 2)


@pytest.mark.parametrize("g", [1, 2, 8])
def test_order1_reads_a_tile_at_one_step_in_every_key_block(g):
    """ORDER=1: tile (h, i) is step (Tr-1 - i)*G + h of every key block that sees it; ORDER=0 drifts by i_first*(h+1)."""
    n_q = n_k = 2048
    br, bc = 64, 128
    t_r, t_c = n_q // br, n_k // bc
    for order in (0, 1):
        at = {}
        for j in range(t_c):
            for t, tile in enumerate(step_tiles(order, i_first(j, bc, br, n_q, n_k, True), t_r, g)):
                at.setdefault(tile, set()).add(t)
        if order:
            assert all(steps == {(t_r - 1 - i) * g + h} for (h, i), steps in at.items())
        else:
            assert any(len(steps) > 1 for steps in at.values())


def v4_loader(order, first, t_r, g, hk):
    """fa2_wgmma_bwd_ws.cu's producer warp 0: (i, hq) stepped along with t."""
    t_n = t_r - first
    i, hq, out = (first + t_n - 1 if order else first), hk * g, []
    for _ in range(g * t_n if t_n > 0 else 0):
        out.append((hq - hk * g, i))
        if order:
            hq += 1
            if hq == hk * g + g:
                hq -= g
                i -= 1
        else:
            i += 1
            if i == first + t_n:
                i = first
                hq += 1
    return out


def v4_reducer(order, first, t_r, g, b, h, hk, tr_pad):
    """fa2_wgmma_bwd_ws.cu's producer warp 1: the dQacc tile index (b*H + hq)*Tr_pad + i stepped along with t."""
    t_n = t_r - first
    tile = (b * h + hk * g) * tr_pad + (first + t_n - 1 if order else first)
    i, out = (0 if order else first), []
    for _ in range(g * t_n if t_n > 0 else 0):
        out.append(tile)
        if order:
            i += 1
            if i == g:
                i = 0
                tile -= (g - 1) * tr_pad + 1
            else:
                tile += tr_pad
        else:
            i += 1
            if i == first + t_n:
                i = first
                tile += tr_pad - t_n + 1
            else:
                tile += 1
    return out


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(1, 20), st.integers(0, 25), st.sampled_from([1, 2, 4, 8]), st.integers(0, 3), st.integers(0, 2),
       st.sampled_from([0, 1]))
def test_v4_counters_follow_the_map(t_r, first, g, hk, b, order):
    first = min(first, t_r - 1)
    h_kv = 4
    h, tr_pad = g * h_kv, t_r + 1  # Nq_pad / Br >= Tr
    want = step_tiles(order, first, t_r, g)
    assert v4_loader(order, first, t_r, g, hk) == want
    assert v4_reducer(order, first, t_r, g, b, h, hk, tr_pad) == [(b * h + hk * g + hq) * tr_pad + i
                                                                  for hq, i in want]


def run_deterministic(order, n_q, n_k, br, bc, g, resident, seed, nwg=2, wait_bias=0):
    """DETERMINISTIC on one grid row (one (b, kv head)): key blocks dispatched in j order, at most `resident` at a time;
    each step's NWG warpgroups each wait (spin) until sem[tile] >= j*NWG (+ wait_bias, a fault), then add and release.
    Random interleaving. Returns {tile: [j of each add, in order]}; raises RuntimeError on a deadlock."""
    rng = random.Random(seed)
    t_r, t_c = -(-n_q // br), -(-n_k // bc)
    steps = [step_tiles(order, i_first(j, bc, br, n_q, n_k, causal=True), t_r, g) for j in range(t_c)]
    sem, adds = {}, {}
    pos = [0] * t_c          # the block's current step
    done_wg = [set() for _ in range(t_c)]  # warpgroups that added in the current step
    nxt, live = 0, []
    while True:
        while len(live) < resident and nxt < t_c:
            live.append(nxt)
            nxt += 1
        live = [j for j in live if pos[j] < len(steps[j])]
        while len(live) < resident and nxt < t_c:
            live.append(nxt)
            nxt += 1
        if not live:
            return adds
        ready = [(j, w) for j in live for w in range(nwg) if w not in done_wg[j]
                 and sem.get(steps[j][pos[j]], 0) >= j * nwg + wait_bias]
        if not ready:
            raise RuntimeError(f"deadlock: blocks {live} at steps {[pos[j] for j in live]}")
        j, w = rng.choice(ready)
        tile = steps[j][pos[j]]
        sem[tile] = sem.get(tile, 0) + 1
        adds.setdefault(tile, []).append(j)
        done_wg[j].add(w)
        if len(done_wg[j]) == nwg:  # the step's __syncthreads: both warpgroups added
            done_wg[j] = set()
            pos[j] += 1


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("n_q,n_k,br,g", [(1000, 1000, 64, 8), (513, 700, 128, 2), (700, 300, 64, 1),
                                          (256, 1025, 64, 4)])
def test_deterministic_progress_and_key_block_order(order, n_q, n_k, br, g):
    """fa2_wgmma_bwd.cu's header argument, run: block j waits only on lower blocks, each of which reaches the awaited
    tile (in ORDER=1 at the same step index); so with any residency and interleaving every block finishes and the adds
    into each dQ tile come in key-block order."""
    for resident in (1, 2, 5, 64):
        for seed in range(4):
            adds = run_deterministic(order, n_q, n_k, br, 128, g, resident, seed)
            for tile, js in adds.items():
                assert js == sorted(js), (tile, js)
                assert js[0] == 0  # every key block's prefix includes block 0


def test_the_progress_model_can_fail():
    """A wait for one reduce more than the lower blocks make never ends: the model reports the deadlock."""
    with pytest.raises(RuntimeError, match="deadlock"):
        run_deterministic(1, 512, 512, 64, 128, 2, resident=4, seed=0, wait_bias=1)


def test_order_knob_is_checked():
    with pytest.raises(ValueError, match="ORDER=2"):
        fa2_wgmma_bwd.defines_for(128, False, dict(fa2_wgmma_bwd.CONFIGS[128], ORDER=2))
    with pytest.raises(ValueError, match="ROTATE"):
        fa2_wgmma_bwd.defines_for(128, False, dict(fa2_wgmma_bwd.CONFIGS[128], ORDER=1, ROTATE=1))
    assert "ORDER" not in fa2_wgmma_bwd.defines_for(128, False)  # the shipped default is today's order
    assert fa2_wgmma_bwd.defines_for(96, True, fa2_wgmma_bwd.order_config(96, 1), deterministic=True)["ORDER"] == 1


def test_order_ab_plan_and_table():
    """lab/bwd_order_ab.py without a GPU: GQA causal cells first, both kernels' ORDER 0 and 1 builds precompiled (and
    the shipped deterministic ones the gate runs), the table's ORDER1/ORDER0 ratios."""
    from lab import bwd_order_ab as ab

    cells = ab.cells((64, 128), (2048, 8192, 16384))
    assert len(cells) == 24 and cells[0] == (8, True, 128, 2048) and cells[6] == (1, True, 128, 2048)
    assert [c[1] for c in cells] == [True] * 12 + [False] * 12
    jobs = ab.builds((64, 128), (2048,))
    main = {(Path(s).name, d["HEAD_DIM"], d["IS_BF16"], d.get("ORDER", 0), d.get("DETERMINISTIC", 0))
            for s, d, _ in jobs if "PASS" not in d and "DQ_BULK" in d or Path(s).name == "fa2_wgmma_bwd_ws.cu"}
    for d in (64, 128):
        for bf16 in (0, 1):
            for order in (0, 1):
                assert ("fa2_wgmma_bwd_ws.cu", d, bf16, order, 0) in main
                for det in (0, 1):
                    assert ("fa2_wgmma_bwd.cu", d, bf16, order, det) in main
    rows = [dict(group=8, causal=True, d=128, n=2048, contender=c, tflops=t)
            for c, t in zip(ab.CONTENDERS, (200, 250, 300, 330, 280))]
    rows.append(dict(group=1, causal=True, d=128, n=2048, contender="cudnn", skipped="budget"))
    lines = ab.table(rows).splitlines()
    assert len(lines) == 3
    assert lines[1].split()[-3:] == ["1.25", "1.10", "0.89"]  # shipped 250/200, v4 330/300, shipped1/cudnn 250/280
    assert lines[2].split()[4:] == ["-", "-", "-", "-", "skip", "-", "-", "-"]


def _fake_kernels(monkeypatch, calls, broken_order1=False):
    """lab/bwd_order_ab.py's kernels replaced by the float64 oracle on the CPU (gradients rounded to the input dtype as
    a kernel's are; SDPA by torch's on float32); calls records (kernel, config, deterministic); broken_order1: an ORDER=1
    build that drops dK."""
    import torch

    from kernels import fa2_wgmma
    from lab import bwd_order_ab as ab
    from lab import bwd_ws
    from variants.reference import attention_reference, backward_reference

    monkeypatch.setattr(ab, "DEVICE", "cpu")

    def forward(q, k, v, causal=False):
        rep = q.shape[1] // k.shape[1]
        o, lse = attention_reference(q.double(), k.double().repeat_interleave(rep, 1),
                                     v.double().repeat_interleave(rep, 1), causal=causal)
        return o.to(q.dtype), lse.float()

    def backward(kernel):
        def fn(q, k, v, o, lse, do, causal=False, config=None, deterministic=False, out=None):
            calls.append((kernel, config, deterministic))
            grads = backward_reference(q, k, v, do, causal=causal, round_to=q.dtype)
            out = out or tuple(torch.empty_like(t) for t in (q, k, v))
            for dst, g in zip(out, grads):
                dst.copy_(g)
            if broken_order1 and config and config.get("ORDER"):
                out[1].zero_()
            return out
        return fn

    def make(b, h, h_kv, n, d, dtype, bnhd, seed):
        g = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(b, hh, n, d, generator=g).to(dtype) for hh in (h, h_kv, h_kv, h))

    def sdpa(backend, q, k, v, causal, **kw):
        return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                                is_causal=causal).to(q.dtype)

    monkeypatch.setattr(fa2_wgmma, "forward", forward)
    monkeypatch.setattr(fa2_wgmma_bwd, "backward", backward("shipped"))
    monkeypatch.setattr(bwd_ws, "backward", backward("v4"))
    monkeypatch.setattr(ab.layouts, "make", make)
    monkeypatch.setattr(ab.harness, "sdpa", sdpa)
    monkeypatch.setattr(ab.harness, "time_fn", lambda fn, sets, **kw: dict(median_ms=2.0))


def test_order_ab_glue_on_the_cpu(monkeypatch):
    """lab/bwd_order_ab.py's gate and one GQA causal cell end to end with the kernels replaced by the oracle: each
    contender reaches its kernel with its ORDER (ORDER=0: the default build, config=None), the gate covers both
    kernels and the shipped deterministic mode, every contender is checked against cuDNN and timed; an ORDER=1 build
    that loses dK fails the gate."""
    from lab import bwd_order_ab as ab

    calls = []
    _fake_kernels(monkeypatch, calls)
    monkeypatch.setattr(ab, "CHECKS", [c for c in ab.CHECKS if c[3] * c[4] < 400 * 400][:2])
    checks = ab.correctness()
    assert len(checks) == 2 * 6 and all(r["ok"] for r in checks), checks
    d = ab.CHECKS[0][5]
    assert ("shipped", fa2_wgmma_bwd.order_config(d, 1), True) in calls and ("shipped", None, True) in calls
    assert ("v4", {"ORDER": 1}, False) in calls and ("v4", None, False) in calls
    monkeypatch.setattr(ab.layouts, "TOKENS", 256)
    monkeypatch.setattr(ab.layouts, "heads_for", lambda d: 8)
    rows, calls[:] = [], []
    ab.run_cell(8, True, 64, 128, float("inf"), rows)
    assert [r["contender"] for r in rows] == ["cudnn", "v4_o1", "v4_o0", "shipped_o1", "shipped_o0"]
    assert all(r["ok"] and r["median_ms"] == 2.0 and r["h_kv"] == 1 for r in rows), rows
    assert rows[1]["tflops"] == pytest.approx(2.5 * ab.harness.flops(2, 8, 128, 128, 64, True) / 2.0 / 1e9)
    assert max(rows[1]["rel_err_vs_cudnn"]) < ab.layouts.TOL["bf16"]
    for want in (("v4", {"ORDER": 1}), ("v4", None), ("shipped", fa2_wgmma_bwd.order_config(64, 1)), ("shipped", None)):
        assert want in [c[:2] for c in calls], (want, calls)
    assert all(c[:2] in [("v4", {"ORDER": 1}), ("v4", None), ("shipped", fa2_wgmma_bwd.order_config(64, 1)),
                         ("shipped", None)] and c[2] is False for c in calls), calls
    monkeypatch.undo()
    _fake_kernels(monkeypatch, [], broken_order1=True)
    monkeypatch.setattr(ab, "CHECKS", ab.CHECKS[:1])
    checks = ab.correctness()
    assert [r["ok"] for r in checks] == [True, False, True, False, True, False]  # o0, o1, v4 o0, v4 o1, det o0, det o1
