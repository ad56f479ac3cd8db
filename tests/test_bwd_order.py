"""The step order knob ORDER of the Hopper backward's v3 (kernels/cuda/fa2_wgmma_bwd.cu) and v4
(kernels/cuda/fa2_wgmma_bwd_ws.cu) main kernels, on the CPU: which (query head, Q block i) tile a key block's step t
reads.

ORDER=0 (the default of both): t = h*T + (i - i_first), heads outer, i ascending. ORDER=1: t = (Tr-1 - i)*G + h, i descending,
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


def run_deterministic(order, n_q, n_k, br, bc, g, resident, seed, nwg=2, wait_bias=0, rows=1, lpt=0, reverse=False):
    """DETERMINISTIC on `rows` grid rows ((b, kv head)s, each with its own semaphores): CTAs dispatched in grid order
    (LPT=0: row-major, key block j fastest; LPT=1: j-major), at most `resident` at a time; each step's NWG warpgroups
    each wait (spin) until sem[row, tile] >= j*NWG (+ wait_bias, a fault), then add and release. Random interleaving.
    reverse: the dispatch order reversed (a fault). Returns {(row, tile): [j of each add, in order]}; raises
    RuntimeError on a deadlock."""
    rng = random.Random(seed)
    t_r, t_c = -(-n_q // br), -(-n_k // bc)
    steps = [step_tiles(order, i_first(j, bc, br, n_q, n_k, causal=True), t_r, g) for j in range(t_c)]
    ctas = [(row, j) for j in range(t_c) for row in range(rows)] if lpt else \
        [(row, j) for row in range(rows) for j in range(t_c)]
    ctas = ctas[::-1] if reverse else ctas
    sem, adds = {}, {}
    pos = {c: 0 for c in ctas}            # the CTA's current step
    done_wg = {c: set() for c in ctas}    # warpgroups that added in the current step
    nxt, live = 0, []
    while True:
        live = [c for c in live if pos[c] < len(steps[c[1]])]
        while len(live) < resident and nxt < len(ctas):
            live.append(ctas[nxt])
            nxt += 1
        if not live:
            return adds
        ready = [(c, w) for c in live for w in range(nwg) if w not in done_wg[c]
                 and sem.get((c[0], steps[c[1]][pos[c]]), 0) >= c[1] * nwg + wait_bias]
        if not ready:
            raise RuntimeError(f"deadlock: CTAs {live} at steps {[pos[c] for c in live]}")
        c, w = rng.choice(ready)
        key = (c[0], steps[c[1]][pos[c]])
        sem[key] = sem.get(key, 0) + 1
        adds.setdefault(key, []).append(c[1])
        done_wg[c].add(w)
        if len(done_wg[c]) == nwg:  # the step's __syncthreads: both warpgroups added
            done_wg[c] = set()
            pos[c] += 1


@pytest.mark.parametrize("order,lpt", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("n_q,n_k,br,g", [(1000, 1000, 64, 8), (513, 700, 128, 2), (700, 300, 64, 1),
                                          (256, 1025, 64, 4)])
def test_deterministic_progress_and_key_block_order(order, lpt, n_q, n_k, br, g):
    """fa2_wgmma_bwd.cu's header argument, run: CTA j waits only on lower key blocks of its row, dispatched before it
    in either grid order, each of which reaches the awaited tile (in ORDER=1 at the same step index); so with any
    residency and interleaving every CTA finishes and the adds into each dQ tile come in key-block order."""
    for resident in (1, 2, 5, 64):
        for seed in range(3):
            adds = run_deterministic(order, n_q, n_k, br, 128, g, resident, seed, rows=2, lpt=lpt)
            for key, js in adds.items():
                assert js == sorted(js), (key, js)
                assert js[0] == 0  # every key block's prefix includes block 0


def test_the_progress_model_can_fail():
    """A wait for one reduce more than the lower blocks make never ends: the model reports the deadlock. So does a
    grid order that dispatches a key block before the lower ones it waits for, with one CTA resident."""
    with pytest.raises(RuntimeError, match="deadlock"):
        run_deterministic(1, 512, 512, 64, 128, 2, resident=4, seed=0, wait_bias=1)
    with pytest.raises(RuntimeError, match="deadlock"):
        run_deterministic(1, 512, 512, 64, 128, 2, resident=1, seed=0, reverse=True)


def test_order_knob_is_checked():
    with pytest.raises(ValueError, match="ORDER=2"):
        fa2_wgmma_bwd.defines_for(128, False, dict(fa2_wgmma_bwd.CONFIGS[128], ORDER=2))
    with pytest.raises(ValueError, match="LPT=2"):
        fa2_wgmma_bwd.defines_for(128, False, dict(fa2_wgmma_bwd.CONFIGS[128], LPT=2))
    with pytest.raises(ValueError, match="ROTATE"):
        fa2_wgmma_bwd.defines_for(128, False, dict(fa2_wgmma_bwd.CONFIGS[128], ORDER=1, ROTATE=1))
    assert "ORDER" not in fa2_wgmma_bwd.defines_for(128, False)  # the shipped default is today's order
    assert fa2_wgmma_bwd.defines_for(96, True, fa2_wgmma_bwd.order_config(96, 1), deterministic=True)["ORDER"] == 1


def test_order_ab_plan_and_table():
    """lab/bwd_order_ab.py without a GPU: GQA causal cells first, every build of both kernels precompiled (and the
    shipped deterministic ones the gate runs), the table's ratios to each kernel's default build."""
    from lab import bwd_order_ab as ab

    cells = ab.cells((64, 128), (2048, 8192, 16384))
    assert len(cells) == 24 and cells[0] == (8, True, 128, 2048) and cells[6] == (1, True, 128, 2048)
    assert [c[1] for c in cells] == [True] * 12 + [False] * 12
    jobs = ab.builds((64, 128), (2048,))
    main = {(Path(s).name, d["HEAD_DIM"], d["IS_BF16"], d.get("ORDER", 0), d.get("LPT", 0), d.get("DETERMINISTIC", 0))
            for s, d, _ in jobs if "PASS" not in d and "DQ_BULK" in d or Path(s).name == "fa2_wgmma_bwd_ws.cu"}
    for d in (64, 128):
        for bf16 in (0, 1):
            for order, lpt in ((0, 0), *fa2_wgmma_bwd.ORDER_AB):
                assert ("fa2_wgmma_bwd_ws.cu", d, bf16, order, lpt, 0) in main
                for det in (0, 1):
                    assert ("fa2_wgmma_bwd.cu", d, bf16, order, lpt, det) in main
    assert ab.knobs("shipped") == ("shipped", 0, 0) and ab.knobs("v4_o1_lpt") == ("v4", 1, 1)
    assert ab.knobs("shipped_lpt") == ("shipped", 0, 1)
    tf = dict(zip(ab.CONTENDERS, (200, 250, 300, 320, 300, 330, 360, 390, 280)))
    rows = [dict(group=8, causal=True, d=128, n=2048, contender=c, tflops=t) for c, t in tf.items()]
    rows.append(dict(group=1, causal=True, d=128, n=2048, contender="cudnn", skipped="budget"))
    lines = ab.table(rows).splitlines()
    assert len(lines) == 3
    # shipped_o1 250/200, _lpt 300/200, _o1_lpt 320/200, v4_o1 330/300, v4_lpt 360/300, v4_o1_lpt 390/300; 320/280
    assert lines[1].split()[-7:] == ["1.25", "1.50", "1.60", "1.10", "1.20", "1.30", "1.14"]
    assert lines[2].split()[4:] == ["-"] * 8 + ["skip"] + ["-"] * 7


def test_busy_fraction_model():
    """The A/B's load-balance model: today's row-major dispatch leaves causal GQA8 SMs idle (long CTAs of late rows
    start late), j-major (LPT=1) does not; equal heads and non-causal are balanced either way."""
    from lab.bwd_order_ab import busy_fraction

    assert busy_fraction(128, 2048, 8, True, 0) < 0.7 < 0.95 < busy_fraction(128, 2048, 8, True, 1)
    assert busy_fraction(128, 2048, 1, True, 0) > 0.9 and busy_fraction(128, 2048, 8, False, 0) > 0.9
    assert busy_fraction(64, 16384, 8, True, 0) > 0.95


def test_l2_hit_fraction_model():
    """The A/B's L2 model: ORDER=1 aligns causal GQA's concurrent CTAs on one tile (d=128 N=2k: 0.51 -> 0.88); without
    causal both orders are already aligned; an L2 that holds everything misses each tile once (compulsory only)."""
    from lab.bwd_order_ab import l2_hit_fraction

    assert l2_hit_fraction(128, 2048, 8, True, 1, 0) > l2_hit_fraction(128, 2048, 8, True, 0, 0) + 0.3
    assert l2_hit_fraction(128, 2048, 8, False, 1, 0) == pytest.approx(l2_hit_fraction(128, 2048, 8, False, 0, 0))
    # non-causal: every (row, head, i) tile is read by all Tc = 16 key blocks, the first read misses
    assert l2_hit_fraction(128, 2048, 8, False, 0, 0, l2_mb=1e6) == pytest.approx(15 / 16)


def test_lpt_grid_and_its_limit():
    """LPT=1 launches (B*H_kv, Tc) (key block j = blockIdx.y, at most 65535), LPT=0 (Tc, B*H_kv)."""
    d = fa2_wgmma_bwd.defines_for(128, False, fa2_wgmma_bwd.order_config(128, 0, 1))
    assert fa2_wgmma_bwd.grid(d, 1000, 6) == (6, 8, 1)
    assert fa2_wgmma_bwd.grid(fa2_wgmma_bwd.defines_for(128, False), 1000, 6) == (8, 6, 1)
    with pytest.raises(ValueError, match="LPT=1 puts the Tc = 65536 key blocks on grid.y"):
        fa2_wgmma_bwd.grid(d, 65536 * 128, 1)


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
        def fn(q, k, v, o, lse, do, causal=False, config=None, deterministic=False, out=None, impl=None):
            assert impl == ("v3" if kernel == "shipped" else None), (kernel, impl)  # v3 even where v4 is the default
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
    from lab import bwd_ws

    calls = []
    _fake_kernels(monkeypatch, calls)
    monkeypatch.setattr(ab, "CHECKS", [c for c in ab.CHECKS if c[3] * c[4] < 400 * 400][:2])
    checks = ab.correctness()
    assert len(checks) == 2 * 12 and all(r["ok"] for r in checks), checks
    d = ab.CHECKS[0][5]
    for order, lpt in fa2_wgmma_bwd.ORDER_AB:
        assert ("shipped", fa2_wgmma_bwd.order_config(d, order, lpt), True) in calls
        assert ("v4", bwd_ws.order_config(order, lpt), False) in calls
    assert ("shipped", None, True) in calls and ("v4", None, False) in calls
    monkeypatch.setattr(ab.layouts, "TOKENS", 256)
    monkeypatch.setattr(ab.layouts, "heads_for", lambda d: 8)
    rows, calls[:] = [], []
    ab.run_cell(8, True, 64, 128, float("inf"), rows)
    assert [r["contender"] for r in rows] == ["cudnn", *ab.KERNELS]
    assert all(r["ok"] and r["median_ms"] == 2.0 and r["h_kv"] == 1 for r in rows), rows
    assert rows[1]["tflops"] == pytest.approx(2.5 * ab.harness.flops(2, 8, 128, 128, 64, True) / 2.0 / 1e9)
    assert max(rows[1]["rel_err_vs_cudnn"]) < ab.layouts.TOL["bf16"]
    want = [("shipped", None), *(("shipped", fa2_wgmma_bwd.order_config(64, o, lpt)) for o, lpt in fa2_wgmma_bwd.ORDER_AB),
            ("v4", None), *(("v4", bwd_ws.order_config(o, lpt)) for o, lpt in fa2_wgmma_bwd.ORDER_AB)]
    assert [c[:2] for c in calls] == want and all(c[2] is False for c in calls), calls
    monkeypatch.undo()
    _fake_kernels(monkeypatch, [], broken_order1=True)
    monkeypatch.setattr(ab, "CHECKS", ab.CHECKS[:1])
    checks = ab.correctness()
    broken = [("o1" in r["contender"]) for r in checks]  # KERNELS, then the shipped ones deterministic
    assert [not r["ok"] for r in checks] == broken and any(broken)


@pytest.mark.parametrize("kernel", ["shipped", "v4"])
def test_lpt_launch_plan(monkeypatch, kernel):
    """Through each launcher on CPU tensors that pass as CUDA: LPT=1's main kernel goes on (B*H_kv, Tc), ORDER=1's on
    (Tc, B*H_kv) with its define; a Tc over grid.y's 65535 is refused before any launch."""
    import torch

    from kernels import loader, tma
    from lab import bwd_ws

    launches = []

    def get_function(source, name, *, defines, arch, device):
        class K:
            def launch(self, grid, block, args, shared_mem=0):
                launches.append((name, defines, grid))
        return K()

    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(loader, "require_hopper", lambda *a, **kw: None)
    monkeypatch.setattr(loader, "get_function", get_function)
    monkeypatch.setattr(tma, "tensor_map", lambda t, rows, name=None: b"map")
    monkeypatch.setattr(tma, "tensor_map_args", lambda *a, **kw: None)  # k, v below may be broadcast views

    def call(n_k, config):
        q, o, do = (torch.zeros(2, 4, 70, 128, dtype=torch.float16) for _ in range(3))
        # (2, 2, Nk, 128) without the memory: one row seen Nk times (the launcher checks strides, not overlap)
        k, v = (torch.zeros(1, 1, 1, 128, dtype=torch.float16).expand(2, 2, n_k, 128) for _ in range(2))
        lse = torch.zeros(2, 4, 70)
        if kernel == "shipped":
            fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=True, impl="v3",
                                   config=None if config is None else fa2_wgmma_bwd.order_config(128, *config))
        else:
            bwd_ws.backward(q, k, v, o, lse, do, causal=True,
                            config=None if config is None else bwd_ws.order_config(*config))
        main = [x for x in launches if x[0] in (fa2_wgmma_bwd.KERNEL, bwd_ws.KERNEL)]
        assert len(main) == 1
        launches.clear()
        return main[0]

    assert call(300, None)[2] == (3, 4, 1)
    name, defines, grid = call(300, (0, 1))
    assert grid == (4, 3, 1) and defines["LPT"] == 1 and defines.get("ORDER", 0) == 0
    name, defines, grid = call(300, (1, 0))
    assert grid == (3, 4, 1) and defines["ORDER"] == 1 and "LPT" not in defines
    assert call(300, (1, 1))[2] == (4, 3, 1)
    monkeypatch.setattr(fa2_wgmma_bwd, "_grads", lambda *a: pytest.fail("gradients allocated before the refusal"))
    with pytest.raises(ValueError, match="65535"):
        call(65536 * 128, (0, 1))
    assert launches == []  # refused before the pre kernel (and before the gradients are allocated)
