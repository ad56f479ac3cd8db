"""The synchronisation of the lab's v4 backward (kernels/cuda/fa2_wgmma_bwd_ws.cu) as a model run on the CPU: the producer
warpgroup's loader thread (K_j, V_j once; Q_i, dO_i, L2_i, D_i into the STAGES-slot ring) and reducer thread (dQ's
bulk reduce-adds), and the two consumer warpgroups, written step for step after the kernel (mbarrier phases and
parities, TMA bytes landing at random later times, wgmma reads lasting from issue to wait, bulk reduces reading their
smem slice until a later random time, the consumer-only named barriers), interleaved at random by hypothesis.

It checks what a GPU run can only show as a hang or a wrong number: no deadlock; every product reads the Q_i, dO_i,
L2_i, D_i of its own step and the dS^T tile of its own step (both warpgroups' halves); no TMA lands in a ring slot,
no dS^T half is rewritten and no dQ slice is rewritten while something still reads it; every (step, warpgroup) dQ
slice is reduced exactly once, with that step's values; the reducer waits for its reads before the CTA ends. The
knobs STAGES, DS_BUFS, DQ_BUFS are modelled; MERGED only moves arithmetic. It models the protocol, not the arithmetic
(tests/test_kernels_bwd_ws_gpu.py checks that against float64), and must be kept in step with the kernel by hand.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sync_model import Deadlock, MBar, NamedBar


class CTA:
    """One CTA (key block j) running TG steps. p: STAGES, DS_BUFS, DQ_BUFS, TG and the fault switches."""

    def __init__(self, sim, p):
        self.sim, self.p = sim, p
        s, nb = p["STAGES"], p["DQ_BUFS"]
        self.full_kv = MBar(1)
        self.full_q = [MBar(1) for _ in range(s)]
        self.empty_q = [MBar(256) for _ in range(s)]  # every consumer thread
        self.dq_full = [[MBar(128) for _ in range(2)] for _ in range(nb)]  # every thread of warpgroup w
        self.dq_empty = [[MBar(1) for _ in range(2)] for _ in range(nb)]   # the reducing thread
        self.bar_ds_full, self.bar_ds_empty = NamedBar(), NamedBar()
        self.smem, self.readers, self.pending = {}, {}, set()
        self.reduced, self.bulk_reads = [], 0

    def tma(self, key, tag, bar):
        assert self.readers.get(key, 0) == 0, f"TMA into {key} while it is read"
        self.pending.add(key)
        self.sim.events.append(("tma", self, key, tag, bar))

    def read(self, key, want):
        assert key not in self.pending, f"{key} read while a TMA write is in flight"
        assert self.smem.get(key) == want, f"{key} holds {self.smem.get(key)}, wanted {want}"
        self.readers[key] = self.readers.get(key, 0) + 1

    def unread(self, key):
        self.readers[key] -= 1

    def write(self, key, tag):  # generic-proxy stores by a warpgroup
        assert self.readers.get(key, 0) == 0, f"{key} rewritten while it is read"
        self.smem[key] = tag

    # --------------------------------------------------------------------------------- producer warp 0
    def loader(self):
        p, S = self.p, self.p["STAGES"]
        self.full_kv.arrive(tx=1)
        self.tma(("kv",), "kv", self.full_kv)
        for t in range(p["TG"]):
            slot, use = t % S, t // S
            if use > 0 and not p.get("no_empty_q_wait"):
                yield lambda slot=slot, use=use: self.empty_q[slot].done((use - 1) & 1)
            self.full_q[slot].arrive(tx=2)
            self.tma(("q", slot), t, self.full_q[slot])   # Q_i and dO_i panels
            self.tma(("ld", slot), t, self.full_q[slot])  # L2_i and D_i
            yield None

    # --------------------------------------------------------------------------------- producer warp 1
    def reducer(self):
        p, nb = self.p, self.p["DQ_BUFS"]
        for t in range(p["TG"]):
            buf, use = t % nb, t // nb
            for w in range(2):
                yield lambda buf=buf, w=w, use=use: self.dq_full[buf][w].done(use & 1)
                self.read(("dq", buf, w), t)
                self.bulk_reads += 1
                self.sim.events.append(("reduce", self, ("dq", buf, w), (t, w), None))
            if not p.get("no_wait_read"):
                yield lambda: self.bulk_reads == 0  # cp.async.bulk.wait_group.read 0
            for w in range(2):
                self.dq_empty[buf][w].arrive()
        yield lambda: self.bulk_reads == 0  # wait_group 0 before the thread (and with it the CTA's smem) ends
        self.sim.finished.append("reducer")

    # --------------------------------------------------------------------------------- consumer warpgroup w
    def consumer(self, w):
        p, S, nds, nb = self.p, self.p["STAGES"], self.p["DS_BUFS"], self.p["DQ_BUFS"]
        yield lambda: self.full_kv.done(0)
        self.read(("kv",), "kv")
        for t in range(p["TG"]):
            slot, dsb = t % S, t % nds
            yield lambda slot=slot, t=t: self.full_q[slot].done((t // S) & 1)
            self.read(("q", slot), t)   # S^T, dP^T issued; dV, dK read Q_i, dO_i until the step's wait<0>
            self.read(("ld", slot), t)  # L2_i, D_i: read into registers before dK is issued
            yield None  # S^T, dP^T, softmax, dV
            if nds == 1 and not p.get("no_ds_empty"):
                gen = self.bar_ds_empty.arrive()
                yield lambda gen=gen: self.bar_ds_empty.generation >= gen
            self.write(("ds", dsb, w), t)  # this warpgroup's 64 key rows of dS^T
            yield None  # dK issued
            gen = self.bar_ds_full.arrive()  # fence.proxy.async, then bar.sync
            yield lambda gen=gen: self.bar_ds_full.generation >= gen
            self.read(("ds", dsb, 0), t)  # the dQ product reads both halves
            self.read(("ds", dsb, 1), t)
            yield None  # dQ, dK run; wgmma_wait<0>
            self.unread(("ds", dsb, 0))
            self.unread(("ds", dsb, 1))
            self.unread(("q", slot))
            self.unread(("ld", slot))
            for _ in range(128):  # every thread of warpgroup w
                self.empty_q[slot].arrive()
            buf, use = t % nb, t // nb
            if use > 0 and not p.get("no_dq_empty_wait"):
                yield lambda buf=buf, use=use: self.dq_empty[buf][w].done((use - 1) & 1)
            self.write(("dq", buf, w), t)
            yield None
            for _ in range(128):
                self.dq_full[buf][w].arrive()
        self.unread(("kv",))
        self.sim.finished.append(f"consumer{w}")


class Sim:
    def __init__(self, p, seed):
        self.p, self.rng = p, random.Random(seed)
        self.events, self.finished = [], []
        self.cta = CTA(self, p)
        self.agents = [[self.cta.loader(), None], [self.cta.reducer(), None],
                       [self.cta.consumer(0), None], [self.cta.consumer(1), None]]

    def run(self, max_steps=200000):
        for _ in range(max_steps):
            live = [a for a in self.agents if a[0] is not None]
            if not live and not self.events:
                return
            ready = [a for a in live if a[1] is None or a[1]()]
            choices = len(ready) + (1 if self.events else 0)
            if choices == 0:
                raise Deadlock(f"{len(live)} agents waiting, nothing in flight")
            i = self.rng.randrange(choices)
            if i == len(ready):  # a TMA write lands, or a bulk reduce finishes reading its slice
                kind, cta, key, tag, bar = self.events.pop(self.rng.randrange(len(self.events)))
                if kind == "tma":
                    assert cta.readers.get(key, 0) == 0, f"TMA landed in {key} while it was read"
                    cta.smem[key] = tag
                    cta.pending.discard(key)
                    bar.complete_tx(1)
                else:
                    assert cta.smem.get(key) == tag[0], f"{key} changed under its bulk reduce"
                    cta.reduced.append(tag)
                    cta.unread(key)
                    cta.bulk_reads -= 1
                continue
            agent = ready[i]
            try:
                agent[1] = next(agent[0])
            except StopIteration:
                agent[0] = None
        raise Deadlock("step limit")


def q_blocks(n0, n_q, n_k, causal, br) -> list[int]:
    """FA2 Alg. 2 line 8's Q blocks of the key block at n0, as the kernel computes them: from i_first (the block of
    the first query that sees key n0, bottom-right causal) to Tr - 1."""
    i_first = max(0, n0 - (n_k - n_q)) // br if causal else 0
    return list(range(i_first, -(-n_q // br)))


KNOBS = [(2, 2, 1), (2, 2, 2), (2, 1, 2), (3, 1, 1), (2, 1, 1), (3, 2, 2)]  # (STAGES, DS_BUFS, DQ_BUFS)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(0, 40), st.sampled_from(KNOBS), st.integers(0, 2**31 - 1))
def test_protocol(tg, knobs, seed):
    stages, ds_bufs, dq_bufs = knobs
    sim = Sim(dict(TG=tg, STAGES=stages, DS_BUFS=ds_bufs, DQ_BUFS=dq_bufs), seed)
    sim.run()
    assert sorted(sim.cta.reduced) == [(t, w) for t in range(tg) for w in range(2)], "a dQ slice lost or twice"
    assert sorted(sim.finished) == ["consumer0", "consumer1", "reducer"]
    assert not any(sim.cta.readers.values()) and not sim.cta.pending


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(1, 600), st.integers(1, 600), st.booleans(), st.sampled_from([64, 128]))
def test_q_blocks_are_exactly_those_with_a_visible_pair(n_q, n_k, causal, br):
    """The kernel's skip of hidden Q blocks (i_first) keeps exactly the Q blocks holding a (query, key) pair the key
    block may see, and every key block has one (so TG >= G >= 1). Bc = 128."""
    for n0 in range(0, n_k, 128):
        keys = range(n0, min(n_k, n0 + 128))
        want = [i for i in range(-(-n_q // br))
                if any(not causal or k <= q + n_k - n_q for q in range(i * br, min(n_q, i * br + br)) for k in keys)]
        assert q_blocks(n0, n_q, n_k, causal, br) == want and want, (n0, want)


@pytest.mark.parametrize("fault,knobs", [("no_empty_q_wait", (2, 2, 1)), ("no_dq_empty_wait", (2, 2, 1)),
                                         ("no_dq_empty_wait", (2, 2, 2)), ("no_ds_empty", (2, 1, 1)),
                                         ("no_wait_read", (2, 2, 1))])
def test_the_model_catches_a_missing_wait(fault, knobs):
    """The model must be able to fail: each wait the kernel has, taken away, lets a write land under a reader (or a
    reduce read a rewritten slice) in some interleaving."""
    stages, ds_bufs, dq_bufs = knobs
    p = dict(TG=12, STAGES=stages, DS_BUFS=ds_bufs, DQ_BUFS=dq_bufs)
    for seed in range(5):
        Sim(p, seed).run()  # the kernel's protocol: clean
    failures = 0
    for seed in range(200):
        try:
            Sim(dict(p, **{fault: True}), seed).run()
        except (AssertionError, Deadlock):
            failures += 1
    assert failures > 0, f"the model cannot see a missing {fault}"
