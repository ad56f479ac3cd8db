"""Ring attention (issue 45) on CPU: gloo process groups of 2, 3 and 4 ranks (ring.launch.spawn), the references as
the local attention, against the float64 oracle and one-process attention, forward and gradients; what the ring sent
and computed against counting/ring.py's closed forms, exactly; bad input and a failing or hanging rank end the job
with a clear error in bounded time. Each job runs every case of its world size once (module fixtures), so the file
starts a handful of jobs, not one per case."""
from __future__ import annotations

import math
import time

import pytest
import torch

from counting import ring as counts
from counting.gpus import GPUS
from ring import merge, ring_attention, shard, unshard
from ring.launch import RingJobError, spawn
from tests import ring_workers as workers
from tests.backward_helpers import GRAD_TOLERANCE, grad_error, reference_grads
from tests.strategies import assert_close_to_reference
from variants import attention, attention_reference

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # gloo's p2p on CPU tensors

JOB_S = 60  # every job's deadline (ring.launch.spawn kills what is left and raises)
CASES = {
    2: [dict(n=13, causal=True, layout="contiguous"),  # 6 + 7: ragged
        dict(n=13, causal=True, layout="zigzag"),  # chunks 3, 3, 3, 4
        dict(n=16, causal=False, layout="contiguous"),
        dict(n=16, causal=False, layout="zigzag", seed=1),
        dict(n=21, causal=True, layout="zigzag", heads=4, kv_heads=2),  # GQA
        dict(n=14, causal=True, layout="zigzag", dtype="float64")],
    3: [dict(n=20, causal=True, layout="zigzag"), dict(n=17, causal=True, layout="contiguous", heads=3, kv_heads=1)],
    4: [dict(n=29, causal=True, layout="contiguous"),
        dict(n=29, causal=True, layout="zigzag", seed=2),
        dict(n=32, causal=False, layout="zigzag", heads=4, kv_heads=1),
        dict(n=64, causal=True, layout="zigzag", d=8),
        dict(n=37, causal=False, layout="contiguous", dtype="float64")],
}
PARAMS = [(w, i) for w, cases in CASES.items() for i in range(len(cases))]
IDS = [f"P{w}-" + "-".join(str(v) for v in CASES[w][i].values()) for w, i in PARAMS]
_jobs: dict = {}


def job(world: int) -> list:
    """Every case of this world size, run once: per rank, per case, the ring's outputs and log."""
    if world not in _jobs:
        _jobs[world] = spawn(workers.run_cases, world, CASES[world], timeout_s=JOB_S)
    return _jobs[world]


def _expand(t, heads):
    return t.repeat_interleave(heads // t.shape[1], dim=1)


def _fold(g, kv_heads):
    b, h, n, d = g.shape
    return g.reshape(b, kv_heads, h // kv_heads, n, d).sum(2)


@pytest.mark.parametrize("world,i", PARAMS, ids=IDS)
def test_ring_equals_one_process_attention_and_its_gradients(world, i):
    """Forward (o, lse) and (dq, dk, dv) put back together from every rank equal the float64 oracle within the
    dtype's tolerance, and one-process fa2 (variants.attention) as closely."""
    case, res = CASES[world][i], [r[i] for r in job(world)]
    q, k, v, do = workers.inputs(case)
    layout, causal, h = case["layout"], case["causal"], q.shape[1]
    o = unshard([r["o"] for r in res], layout)
    lse = unshard([r["lse"] for r in res], layout, dim=-1)
    ke, ve = _expand(k, h), _expand(v, h)
    ref_o, ref_lse = attention_reference(q, ke, ve, causal=causal)
    if q.dtype == torch.float64:  # every local attention returns lse in float32: the merge's weights carry its error
        assert (o - ref_o).abs().max() < 1e-6 and (lse.double() - ref_lse).abs().max() < 1e-6
    else:
        assert_close_to_reference(o, lse, ref_o, ref_lse, ve, q.dtype, what=str(case))
    ref = reference_grads(q, ke, ve, do, causal=causal)
    ref = (ref[0], _fold(ref[1], k.shape[1]), _fold(ref[2], k.shape[1]))
    tol = 1e-6 if q.dtype == torch.float64 else GRAD_TOLERANCE[q.dtype]  # float64: lse is float32 (above)
    for name, r in zip(("dq", "dk", "dv"), ref):
        g = unshard([x[name] for x in res], layout)
        assert g.dtype == q.dtype and g.shape == r.shape, name
        assert grad_error(g, r) <= tol, f"{name} {grad_error(g, r):.3g} {case}"
    qa, ka, va = (t.clone().requires_grad_() for t in (q, ke, ve))
    one = attention(qa, ka, va, variant="fa2", causal=causal)
    one.backward(do)
    assert (o.double() - one.double()).abs().max() <= 2e-6 if q.dtype == torch.float64 else 4e-5
    assert grad_error(unshard([x["dq"] for x in res], layout), qa.grad.double()) <= 2 * tol


@pytest.mark.parametrize("world,i", PARAMS, ids=IDS)
def test_what_the_ring_sent_is_the_closed_form(world, i):
    """Every tensor each rank sent, step by step, in the forward and the backward: exactly counting.ring's kv_bytes
    and dkv_bytes (float32 accumulators; float64 inputs accumulate in float64, twice the bytes)."""
    case, res = CASES[world][i], [r[i] for r in job(world)]
    n, layout = case["n"], case["layout"]
    item = 8 if case.get("dtype") == "float64" else 4
    dims = dict(batch=1, kv_heads=case.get("kv_heads", 2), d=case.get("d", 16))
    for rank, r in enumerate(res):
        sent = [x for x in r["log"] if "bytes" in x]
        for pass_name in ("forward", "backward"):
            for t in range(world):
                kv = sum(x["bytes"] for x in sent if (x["pass"], x["step"], x["what"]) in
                         ((pass_name, t, "k"), (pass_name, t, "v")))
                assert kv == counts.kv_bytes(n, world, layout, rank, t, itemsize=item, **dims), (rank, pass_name, t)
            bpr = counts.bytes_per_rank(n, world, layout, rank, itemsize=item, **dims)
            want = bpr["forward"] + ((bpr["backward"] - bpr["forward"]) * item // 4 if pass_name == "backward" else 0)
            assert sum(x["bytes"] for x in sent if x["pass"] == pass_name) == want, (rank, pass_name)
        for t in range(world):
            dkv = sum(x["bytes"] for x in sent if x["pass"] == "backward" and x["step"] == t and x["what"] in ("dk", "dv"))
            assert dkv == counts.dkv_bytes(n, world, layout, rank, t, **dims) * item // 4


@pytest.mark.parametrize("world,i", PARAMS, ids=IDS)
def test_every_visible_pair_is_computed_once(world, i):
    """The blocks each rank computed, mapped to global positions: every pair the mask lets through exactly once,
    nothing it hides, in the forward and again in the backward; per (rank, step) as many pairs as step_pairs."""
    case, res = CASES[world][i], [r[i] for r in job(world)]
    n, layout, causal = case["n"], case["layout"], case["causal"]
    pos = [shard(torch.arange(n), r, world, layout, dim=0).tolist() for r in range(world)]
    want = {(a, b) for a in range(n) for b in range(n) if b <= a or not causal}
    for pass_name in ("forward", "backward"):
        seen, per_step = [], {}
        for rank, r in enumerate(res):
            for x in r["log"]:
                if x["pass"] != pass_name or x["what"] != "attention":
                    continue
                rows, cols = pos[rank][slice(*x["q"])], pos[x["origin"]][slice(*x["k"])]
                off = len(cols) - len(rows)
                pairs = [(a, b) for ia, a in enumerate(rows) for ib, b in enumerate(cols)
                         if not x["causal"] or ib <= ia + off]
                seen += pairs
                per_step[rank, x["step"]] = per_step.get((rank, x["step"]), 0) + len(pairs)
        assert len(seen) == len(set(seen)) and set(seen) == want, pass_name
        for rank in range(world):
            for t in range(world):
                assert per_step.get((rank, t), 0) == counts.step_pairs(n, world, layout, causal, rank, t)


# -- failures end the job -------------------------------------------------------------------------------------------

def test_bad_input_is_refused_on_every_rank():
    """A length the layout does not give, ranks that disagree, one rank's bad dtype, too few positions: every rank
    raises one clear error (the rank with the bad dtype its own, the others that it refused), none hangs."""
    t0 = time.monotonic()
    errs = spawn(workers.bad_inputs, 2, timeout_s=JOB_S, pg_timeout_s=10)
    assert time.monotonic() - t0 < 30
    for rank in (0, 1):
        e = errs[rank]
        assert e[0] == ("ValueError: ring_attention: rank 0 holds 5 positions, but layout 'contiguous' of N=13 over "
                        "2 ranks gives it 6 (ring.layout.shard cuts the pieces)")
        assert e[1] == "ValueError: ring_attention: the ranks disagree: causal True on rank 0, False on rank 1"
        assert "cannot fill the 4 chunks of layout 'zigzag' over 2 ranks" in e[3]
    assert errs[1][2].startswith("TypeError: q has dtype int64; ring_attention takes float32")
    assert errs[0][2] == "RingError: ring_attention: rank 1 refused its input (its own error says why)"


def test_a_rank_that_raises_ends_the_job_with_its_error():
    t0 = time.monotonic()
    with pytest.raises(RingJobError) as e:
        spawn(workers.fails_at_start, 2, timeout_s=JOB_S, pg_timeout_s=30, grace_s=2)
    assert time.monotonic() - t0 < 15, "rank 0 waited for the dead rank instead of failing"
    msg = str(e.value)
    assert msg.startswith("ring job of 2 ranks failed: rank 1: RuntimeError: rank 1 fails on purpose; then rank 0: "
                          "RingError: ring_attention: rank 0 could not gather the other ranks' shapes"), msg
    assert [x["rank"] for x in sorted(e.value.errors, key=lambda x: x["time"])] == [1, 0]


def test_a_rank_that_hangs_ends_the_job_at_the_timeout():
    t0 = time.monotonic()
    with pytest.raises(RingJobError) as e:
        spawn(workers.hangs_mid_ring, 2, timeout_s=JOB_S, pg_timeout_s=2, grace_s=1)
    assert time.monotonic() - t0 < 15
    msg = str(e.value)
    assert msg.startswith("ring job of 2 ranks failed: rank 0: RingError: ring_attention backward step 1 of 2: rank 0 "
                          "got no k/v from rank 1 ("), msg
    assert msg.endswith("then rank 1: killed: still running when the job ended"), msg


def test_a_job_past_its_deadline_is_killed():
    with pytest.raises(RingJobError, match=r"ring job of 2 ranks timed out after 1\.5 s: rank\(s\) 0, 1 still running"):
        spawn(workers.sleeps, 2, 30, timeout_s=1.5)


def test_checks_before_any_communication():
    x = torch.zeros(1, 1, 4, 4)
    with pytest.raises(ValueError, match="unknown layout 'spiral'; choose one of contiguous, zigzag"):
        ring_attention(x, x, x, layout="spiral")
    with pytest.raises(RuntimeError, match="needs torch.distributed initialised"):
        ring_attention(x, x, x)


# -- the pieces, in one process ---------------------------------------------------------------------------------------

def test_merge_is_attention_over_the_union_of_the_keys():
    """Two partials over disjoint key sets merge into attention over both, whichever comes first; a row that saw no
    key on one side takes the other's (o, lse) exactly, on both sides stays o = 0, lse = -inf."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 9, 8), torch.randn(1, 2, 20, 8), torch.randn(1, 2, 20, 8)
    a = attention_reference(q, k[..., :7, :], v[..., :7, :])
    b = attention_reference(q, k[..., 7:, :], v[..., 7:, :])
    want = attention_reference(q, k, v)
    for first, second in ((a, b), (b, a)):
        o, lse = torch.zeros(q.shape), torch.full(q.shape[:-1], -math.inf)
        merge(o, lse, first[0].float(), first[1].float())
        merge(o, lse, second[0].float(), second[1].float())
        assert (o.double() - want[0]).abs().max() < 1e-6 and (lse.double() - want[1]).abs().max() < 1e-5
    o, lse = torch.zeros(1, 1, 2, 3), torch.full((1, 1, 2), -math.inf)
    o_j, lse_j = torch.tensor([[[[1.0, 2, 3], [0, 0, 0]]]]), torch.tensor([[[0.5, -math.inf]]])
    merge(o, lse, o_j, lse_j)
    assert torch.equal(o, o_j) and torch.equal(lse, lse_j)


@pytest.mark.parametrize("layout", counts.LAYOUTS)
@pytest.mark.parametrize("n,world", [(13, 2), (29, 4), (64, 8), (9, 3)])
def test_shard_and_unshard(layout, n, world):
    x = torch.arange(n).reshape(1, 1, n, 1).expand(1, 2, n, 3)
    pieces = [shard(x, r, world, layout) for r in range(world)]
    assert [p.shape[-2] for p in pieces] == counts.sizes(n, world, layout)
    assert max(counts.sizes(n, world, layout)) - min(counts.sizes(n, world, layout)) <= (2 if layout == "zigzag" else 1)
    assert torch.equal(unshard(pieces, layout), x)
    if layout == "zigzag":  # rank 0 holds the first and the last chunk
        assert pieces[0][0, 0, 0, 0] == 0 and pieces[0][0, 0, -1, 0] == n - 1
    with pytest.raises(ValueError, match="rank 0's piece holds"):
        unshard([pieces[0][..., 1:, :], torch.cat([pieces[0][..., :1, :], pieces[1]], -2)] + pieces[2:], layout)


# -- the closed forms, without a ring ------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", counts.LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
def test_step_pairs_add_up_to_the_mask(layout, causal):
    for world in (1, 2, 3, 4, 8):
        for n in range(2 * world, 2 * world + 19, 3):
            total = sum(counts.step_pairs(n, world, layout, causal, r, t) for r in range(world) for t in range(world))
            assert total == (n * (n + 1) // 2 if causal else n * n)
            for r in range(world):
                for t in range(world):
                    blocks = counts.step_blocks(n, world, layout, causal, r, t)
                    assert sum(b.pairs for b in blocks) == counts.step_pairs(n, world, layout, causal, r, t)


def test_load_imbalance_contiguous_against_zigzag():
    """Contiguous causal: the ring's critical path is (2P - 1)/P of the ideal, less the diagonal's half rows;
    zigzag at 2P | N: exactly the ideal (every rank computes as much as every other at every step)."""
    for world in (2, 4, 8):
        n = 2 * world * 1000
        m = n // world
        assert counts.imbalance(n, world, "zigzag", True) == 1.0
        assert counts.imbalance(n, world, "contiguous", True) == pytest.approx(
            (m * (m + 1) / 2 + (world - 1) * m * m) * world / (n * (n + 1) / 2), rel=1e-12)
        assert counts.imbalance(n, world, "contiguous", True) == pytest.approx((2 * world - 1) / world, rel=1e-3)
        assert counts.imbalance(n, world, "contiguous", False) == 1.0
    assert counts.imbalance(101, 4, "zigzag", True) < 1.1 < 1.7 < counts.imbalance(101, 4, "contiguous", True)


def test_bytes_per_rank_add_up_the_steps():
    for layout in counts.LAYOUTS:
        for world, n in ((1, 10), (2, 13), (4, 29), (8, 1000)):
            for r in range(world):
                dims = dict(batch=2, kv_heads=3, d=16)
                fwd = sum(counts.kv_bytes(n, world, layout, r, t, itemsize=2, **dims) for t in range(world))
                bwd = fwd + sum(counts.dkv_bytes(n, world, layout, r, t, **dims) for t in range(world))
                assert counts.bytes_per_rank(n, world, layout, r, itemsize=2, **dims) == {"forward": fwd, "backward": bwd}


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("layout,causal", [("contiguous", False), ("zigzag", True), ("zigzag", False),
                                           ("contiguous", True)])
def test_the_overlap_threshold_is_where_the_steps_stop_hiding(world, backward, layout, causal):
    """min_tokens_hidden (d cancels) against the step-by-step model: the transfers are hidden just above the
    threshold, not just below it; at the H100's bf16 peak over NVLink 4 the forward needs ~2,200 tokens per rank
    without the mask, twice that with it."""
    gpu = GPUS["h100"]
    rate, link = gpu.bf16_tensor_flops.value, gpu.nvlink_bandwidth.value
    heads = 8
    n_star = counts.min_tokens_hidden(layout, causal, itemsize=2, rate=rate, link=link, heads=heads, kv_heads=heads,
                                      backward=backward, world=world)
    for per_rank, hidden in ((math.ceil(n_star * 1.02), True), (math.floor(n_star * 0.98), False)):
        n = per_rank * world
        n -= n % (2 * world)
        m = counts.overlap(n, world, layout, causal, heads=heads, kv_heads=heads, d=128, itemsize=2, rate=rate,
                           link=link, backward=backward)
        assert m["hidden"] is hidden, (per_rank, m["steps"])
    assert counts.min_tokens_hidden("contiguous", False, itemsize=2, rate=rate, link=link) == \
        pytest.approx(2 * 989.4e12 / (2 * 450e9))
    big = counts.overlap(512 * 1024, 8, "zigzag", True, heads=16, kv_heads=16, d=128, itemsize=2, rate=rate, link=link)
    assert big["hidden"] and big["speedup"] == pytest.approx(8, rel=1e-3)


# -- the report ------------------------------------------------------------------------------------------------------

def test_report_ranks_is_the_closed_forms(capsys):
    """fa-traffic report --ranks 8: one row per layout and pass, every number counting/ring.py's."""
    import json

    from analysis.cli import main

    assert main(["report", "--ranks", "8", "--seq-len", "512k", "--head-dim", "128", "--heads", "16", "--causal",
                 "--dtype", "bf16", "--gpu", "h100", "--pass", "train", "--format", "json"]) == 0
    recs = {(r["layout"], r["pass"]): r for r in json.loads(capsys.readouterr().out)}
    assert set(recs) == {(lay, p) for lay in counts.LAYOUTS for p in ("forward", "backward")}
    n, dims = 512 * 1024, dict(batch=1, kv_heads=16, d=128)
    for (layout, pass_name), r in recs.items():
        assert r["tokens_per_rank"] == 65536 and r["steps"] == 8 and r["hidden"]
        assert r["bytes_per_rank"] == counts.bytes_per_rank(n, 8, layout, 0, itemsize=2, **dims)[pass_name]
        assert r["bytes_per_step"] == 2 * 16 * 65536 * 128 * (2 + (4 if pass_name == "backward" else 0))
    assert recs["zigzag", "forward"]["imbalance"] == 1.0 and recs["contiguous", "forward"]["imbalance"] > 1.8
    assert recs["zigzag", "forward"]["speedup"] == pytest.approx(8, rel=1e-3)
    assert recs["contiguous", "forward"]["speedup"] < 4.5
    assert main(["report", "--ranks", "4", "--seq-len", "64k"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fa-traffic report --ranks 4: ring attention over 4 GPUs") and "NVLink 450 GB/s" in out


@pytest.mark.parametrize("argv,match", [
    (["--variant", "fa2"], "--variant does not apply to --ranks"),
    (["--seq-len", "8"], "N=8 positions cannot fill the 16 chunks of layout 'zigzag' over 8 ranks"),
    (["--blocks", "kernel"], "--blocks does not apply to --ranks"),
])
def test_report_ranks_refuses_what_does_not_apply(capsys, argv, match):
    from analysis.cli import main

    assert main(["report", "--ranks", "8"] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1
