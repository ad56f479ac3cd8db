"""The GPU model's per-block work in array operations (gpumodel.gpu_model _per_block, _schedule, Tiling.block_counts):
the same numbers to the bit as the per-block loops they replaced (kept as the oracles: _per_block_loop,
_schedule_loop below, Tiling's methods), and fast where those took seconds (a causal row of 65,536 Q blocks)."""
from __future__ import annotations

import dataclasses
import heapq
import json
import math
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumodel import gpu_model as gm
from analysis.cli import main
from gpumodel.descriptors import describe
from counting.tiling import Tiling


def _schedule_loop(pattern, repeats, slots, cost) -> tuple[float, float]:
    """The list schedule by its definition, one heap operation per CTA (what gpumodel.gpu_model used until it moved to
    _schedule's batches): the makespan of CTAs taking cost(n) cycles each, in launch order onto `slots`, and the
    number of waves."""
    n_ctas = len(pattern) * repeats
    waves = n_ctas / slots
    if len(set(pattern)) == 1:  # equal CTAs: whole waves
        return -(-n_ctas // slots) * cost(pattern[0]), waves
    if n_ctas <= slots:
        return max(cost(n) for n in pattern), waves
    costs = [cost(n) for n in pattern]
    heap = [0.0] * int(slots)
    for _ in range(repeats):
        for c in costs:
            start = heapq.heappop(heap)
            heapq.heappush(heap, start + c)
    return max(heap), waves


def _bits(xs) -> list:
    """Each number as its exact value and the sign of a zero: a bit-for-bit comparison of lists of ints and floats."""
    return [(x, math.copysign(1.0, x)) for x in xs]


@given(n_q=st.integers(1, 5000), n_k=st.integers(1, 5000), block_q=st.integers(1, 300), block_k=st.integers(1, 300),
       causal=st.booleans(), every=st.booleans())
def test_block_counts_are_tilings_methods(n_q, n_k, block_q, block_k, causal, every):
    t = Tiling(n_q, n_k, block_q, block_k, causal)
    steps, masked = t.block_counts(every)
    assert steps.tolist() == [len(t.k_blocks(i)) for i in range(t.t_r)]
    assert masked.tolist() == [t.masked_steps(i, every) for i in range(t.t_r)]


BASE = describe("fa2_wgmma", 128, "fp16", True, n_q=512, n_k=512)


@given(n_q=st.integers(1, 5000), n_k=st.integers(1, 5000), block_q=st.sampled_from([64, 96, 128, 192, 256]),
       block_k=st.sampled_from([7, 16, 64, 80, 96, 128, 176]), causal=st.booleans(), idle=st.booleans(),
       walk=st.booleans(), half=st.booleans(), every=st.booleans())
def test_per_block_is_the_loop(n_q, n_k, block_q, block_k, causal, idle, walk, half, every):
    desc = dataclasses.replace(BASE, block_q=block_q, block_k=block_k, idle_skip=idle, causal_walk=walk,
                               half_diag=half, mask_every_step_if_ragged=every)
    t = Tiling(n_q, n_k, block_q, block_k, causal)
    for fast, loop in zip(gm._per_block(t, desc), gm._per_block_loop(t, desc)):
        assert _bits(fast) == _bits(loop)


@st.composite
def schedules(draw):
    """Patterns of CTA work as the model makes them: runs of equal CTAs, causal rows longest first, ragged tails,
    ties, and anything; repeated over heads; onto 1-600 slots."""
    kind = draw(st.sampled_from(["runs", "descending", "ragged", "any"]))
    size = draw(st.integers(1, 300))
    if kind == "runs":
        values = draw(st.lists(st.integers(0, 6), min_size=1, max_size=6))
        tiles = [v for v in values for _ in range(draw(st.integers(1, 200)))][:2000]
    elif kind == "descending":
        tiles = sorted(draw(st.lists(st.integers(0, 400), min_size=1, max_size=size)), reverse=True)
    elif kind == "ragged":
        tiles = [draw(st.integers(1, 50))] * size + [draw(st.floats(0, 50))]
    else:
        tiles = draw(st.lists(st.floats(0, 1e4), min_size=1, max_size=size))
    masked = [draw(st.sampled_from([0, 1, 0.5])) if draw(st.booleans()) else 0 for _ in tiles]
    return tiles, masked, draw(st.integers(1, 40)), draw(st.sampled_from([1, 2, 3, 7, 132, 264, 396, 528]))


@given(case=schedules(), per_tile=st.floats(1, 1e5), per_mask=st.floats(0, 1e4), fixed=st.floats(0, 1e5),
       rescale=st.sampled_from([0.0, 4.0]))
def test_schedule_is_the_heap(case, per_tile, per_mask, fixed, rescale):
    """The batched list schedule ends at the heap's makespan to the bit, for any costs of the model's form."""
    tiles, masked, repeats, slots = case
    desc = dataclasses.replace(BASE, round_trips_per_tile=float(rescale > 0), rescale_round_trips=rescale)

    def cost(nm):
        return per_tile * nm[0] + per_mask * nm[1] + fixed + 1500.0 * gm.round_trips(desc, nm[0])

    fast = gm._schedule(tiles, masked, repeats, slots, cost)
    loop = _schedule_loop(list(zip(tiles, masked)), repeats, slots, cost)
    assert fast == loop and type(fast[0]) is float


# shapes where the loops ran: causal rows up to the Q-block limit, Nk far below Nq, ragged tails, many heads
CASES = [("fa2_wgmma", 64, 1 << 20, 1 << 20, True, 1, 32), ("fa2_wgmma", 128, 40000, 40000, True, 2, 16),
         ("fa2_wgmma", 64, 1 << 22, 1, True, 1, 32), ("naive", 64, 1 << 20, 1 << 20, True, 1, 32),
         ("fa1", 64, 1 << 20, 3, True, 2, 3), ("v_once", 64, 30000, 30000, True, 1, 4),
         ("v_once_tc", 64, 20000, 20000, True, 1, 32), ("sdpa_cudnn", 128, 100000, 100000, True, 1, 16),
         ("sdpa_flash", 64, 50001, 50001, False, 4, 8), ("v_once_cluster", 64, 8192, 8192, True, 2, 8),
         ("fa2_tc", 128, 777, 777, False, 4, 16)]
EAGER = dict(placement="hbm", rescale="eager")  # the spilled f row's reuse model (levels._eager_miss)
CASES += [("v_once_tc", 64, 3000, 1 << 20, False, 1, 2, EAGER), ("v_once_tc", 128, 40000, 40000, True, 1, 16, EAGER),
          ("v_once", 64, 5000, 200000, True, 2, 2, EAGER)]


def _flat_pattern(tiles, masked, repeats, head=None, tail=None) -> list:
    """Every CTA's (tiles, masked) in launch order: the ragged head, the pattern `repeats` times, the ragged tail."""
    def pairs(t, m):
        return list(zip(np.asarray(t).tolist(), np.asarray(m).tolist()))

    return (pairs(*head) if head else []) + pairs(tiles, masked) * repeats + (pairs(*tail) if tail else [])


@given(case=schedules(), ragged=st.lists(st.tuples(st.integers(0, 400), st.sampled_from([0, 1, 0.5])), min_size=1,
                                          max_size=300),
       first=st.booleans(), per_tile=st.floats(1, 1e5), fixed=st.floats(0, 1e5))
def test_sections_schedule_is_the_heap(case, ragged, first, per_tile, fixed):
    """Issue 46: a persistent grid's causal sections are one pattern repeated plus the ragged section of the B·H % hs
    heads (Work.ragged), no longer one list of every work tile (2.3 GB at 16.7M); the schedule is the heap's over the
    whole list, to the bit, the ragged section first or last."""
    tiles, masked, repeats, slots = case
    extra = ([n for n, _ in ragged], [m for _, m in ragged])

    def cost(nm):
        return per_tile * nm[0] + 37.5 * nm[1] + fixed

    kw = {"head" if first else "tail": extra}
    fast = gm._schedule(tiles, masked, repeats, slots, cost, **kw)
    loop = _schedule_loop(_flat_pattern(tiles, masked, repeats, **kw), 1, slots, cost)
    assert fast == loop and type(fast[0]) is float


@pytest.mark.parametrize("first", [True, False])
def test_section_work_is_one_pattern_and_the_ragged_section(first):
    """The sections' work is held as Tr·hs CTAs and a count, not B·H·Tr; the prediction is the one the whole list
    gave (tests/test_gpu_model.py's section rows, and the oracle above)."""
    desc = dataclasses.replace(describe("fa2_wgmma", 128, "fp16", True, n_q=4096, n_k=4096), causal_section_kb=4096,
                               ragged_section_first=first)
    w = gm.prepare(desc, 3, 5, 4096, 4096, 128, "fp16", True)  # hs = 4096 // (16 * 128) = 2 heads a section
    t_r = 4096 // desc.block_q
    assert (len(w.cta_tiles), w.repeats, len(w.ragged[0]), w.ragged_first) == (2 * t_r, 7, t_r, first)
    assert w.ctas() == 15 * t_r and w.total("tiles") == w.tiles
    flat = _flat_pattern(w.cta_tiles, w.cta_masked, w.repeats, *((w.ragged, None) if first else (None, w.ragged)))
    whole = dataclasses.replace(w, cta_tiles=[n for n, _ in flat], cta_masked=[m for _, m in flat], repeats=1,
                                ragged=())
    a, b = gm.predict_work(w).as_dict(), gm.predict_work(whole).as_dict()
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], float):
            assert a[key] == pytest.approx(b[key], rel=1e-12), key
        elif isinstance(a[key], dict):
            assert a[key] == pytest.approx(b[key], rel=1e-12), key
        else:
            assert a[key] == b[key], key


def test_persistent_causal_sections_at_the_work_tile_limit_are_small():
    """Issue 46: fa2_wgmma causal, d = 64, B·H = 65,535, N = 48k: 16.7M work tiles in sections of one head took 18 s
    and 2.3 GB (a Python list of every tile); now 256 CTAs repeated 65,535 times (memory O(Tr·hs)). The list
    schedule still walks the repeats (about 1 s here: what is left of item 5)."""
    desc = describe("fa2_wgmma", 64, "fp16", True, n_q=49152, n_k=49152)
    t0 = time.perf_counter()
    w = gm.prepare(desc, 65535, 1, 49152, 49152, 64, "fp16", True)
    assert desc.grid == "persistent" and len(w.cta_tiles) == 256 and w.repeats == 65535 and w.ctas() == 256 * 65535
    p = gm.predict_work(w)
    assert time.perf_counter() - t0 < 6.0 and p.time_s > 0 and p.waves == pytest.approx(256 * 65535 / 132)


@pytest.mark.parametrize("kernel,d,n_q,n_k,causal,batch,heads,options", [c + ({},) if len(c) == 7 else c for c in CASES])
def test_predictions_are_the_loops(monkeypatch, kernel, d, n_q, n_k, causal, batch, heads, options):
    """Whole predictions (time, terms, levels, waves) equal those of the per-block loops, field by field."""
    from gpumodel import levels

    desc = describe(kernel, d, "fp16", causal, n_q=n_q, n_k=n_k, **options)
    fast = gm.predict_work(gm.prepare(desc, batch, heads, n_q, n_k, d, "fp16", causal)).as_dict()
    monkeypatch.setattr(levels, "_eager_miss", levels._eager_miss_loop)
    monkeypatch.setattr(gm, "_per_block", gm._per_block_loop)
    monkeypatch.setattr(gm, "_schedule", lambda tiles, masked, repeats, slots, cost, head=None, tail=None:
                        _schedule_loop(_flat_pattern(tiles, masked, repeats, head, tail), 1, slots, cost))
    loop = gm.predict_work(gm.prepare(desc, batch, heads, n_q, n_k, d, "fp16", causal)).as_dict()
    assert repr(fast) == repr(loop)


@pytest.mark.parametrize("argv", [
    ("report", "--variant", "fa2", "--seq-len", "12582912", "--causal", "--format", "json"),  # 3.1 s for one row
    ("report", "--seq-len", "4194304", "--seq-len-k", "1", "--causal", "--format", "json"),  # 10.6 s
])
def test_causal_rows_at_the_q_block_limit_answer_fast(monkeypatch, capsys, argv):
    """No per-Q-block Python call and no per-CTA heap operation: the rows that took seconds take a fraction."""
    def per_block_call(*_a, **_k):
        raise AssertionError("walked block by block")

    monkeypatch.setattr(Tiling, "k_blocks", per_block_call)
    monkeypatch.setattr(heapq, "heappop", per_block_call)
    t0 = time.perf_counter()
    assert main(list(argv)) == 0
    assert time.perf_counter() - t0 < 5.0
    out = capsys.readouterr().out
    assert '"time_s"' in out


@given(n_q=st.integers(1, 4000), n_k=st.integers(1, 100000), block_q=st.sampled_from([16, 64, 128]),
       block_k=st.sampled_from([16, 64, 128]), causal=st.booleans(), resident=st.integers(1, 600),
       kv_ws=st.integers(0, 1 << 30), cap=st.sampled_from([1 << 20, 31457280, 37748736]))
def test_eager_miss_is_the_loop(n_q, n_k, block_q, block_k, causal, resident, kv_ws, cap):
    from gpumodel import levels

    t = Tiling(n_q, n_k, block_q, block_k, causal)
    per_block_ws = resident * block_q * block_k * 2
    fast = levels._eager_miss(t, per_block_ws, kv_ws, cap)
    assert fast == levels._eager_miss_loop(t, per_block_ws, kv_ws, cap) and type(fast) is float


def test_eager_spilled_rows_at_long_keys_answer_fast_or_say_why(monkeypatch, capsys):
    """Eager v_once with its f row spilled: the reuse model summed over every key block in Python (Nk = 1G: 11 s for
    two rows, 16G minutes and GBs). Now arrays up to MAX_EAGER_K_BLOCKS key blocks, the papers' roofline past it."""
    from gpumodel import levels

    monkeypatch.setattr(levels, "_eager_miss_loop", lambda *a: pytest.fail("looped over the key blocks"))
    for n_k, modelled in (("256m", True), ("16384m", False)):
        t0 = time.perf_counter()
        assert main(["report", "--variant", "v_once", "--rescale", "eager", "--seq-len", "64", "--seq-len-k", n_k,
                     "--format", "json"]) == 0
        assert time.perf_counter() - t0 < 5.0
        spilled = [r["gpu_model"] for r in json.loads(capsys.readouterr().out) if r["placement_resolved"] == "hbm"]
        assert spilled and all(("time_s" in g) == modelled for g in spilled)
        assert modelled or all(f"over its limit of {levels.MAX_EAGER_K_BLOCKS:,}" in g["why"] for g in spilled)


def test_grids_past_the_models_work_tile_limit_are_refused(capsys):
    """The model walks a grid's work tiles (Q blocks x B*H): the list schedule places unequal ones in batches, the L2
    residency walks every wave. Past MAX_MODEL_CTAS of them predict refuses (one line, at once; B*H = 65,535 over
    16k Q blocks took 15 s, over 65,536 hours) and report shows the papers' roofline, saying why."""
    over = gm.MAX_MODEL_CTAS // 1024 + 1  # B*H with 1024 Q blocks of 64 rows (teaching fa2, N = 64k)
    argv = ["predict", "--kernel", "fa2", "--seq-len", "64k", "--head-dim", "64", "--heads", "1"]
    for extra in (["--causal"], []):  # unequal CTAs, and equal ones (whole waves, but the residency's waves)
        t0 = time.perf_counter()
        rc = main(argv + ["--batch", str(over)] + extra)
        out, err = capsys.readouterr()
        assert time.perf_counter() - t0 < 5 and rc == 2 and out == "" and err.count("\n") == 1
        assert f"work tiles of this grid (Q blocks x B*H) one wave or batch at a time; over its limit of " \
               f"{gm.MAX_MODEL_CTAS:,}" in err
    assert main(argv + ["--batch", str(over - 1), "--format", "json"]) == 0  # at the limit: an answer
    capsys.readouterr()
    assert main(["report", "--variant", "naive,fa1", "--seq-len", "64k", "--batch", str(over), "--causal", "--format",
                 "json"]) == 0
    naive, fa1 = json.loads(capsys.readouterr().out)
    assert "over its limit" in naive["gpu_model"]["why"] and "time_s" in fa1["gpu_model"]  # FA1: one CTA a head
