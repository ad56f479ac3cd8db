"""The synchronisation of fa2_wgmma_tma.cu's PERSISTENT builds, as a model run on the CPU: the producer thread
and the consumer warpgroups of each CTA written step for step after the kernel (mbarrier phases and parities,
TMA transaction bytes landing at random later times, wgmma reads lasting from issue to wait, the ping-pong
named barriers, the tile slots and the atomic tile counter), interleaved at random by hypothesis.

v6 (kept in step): the causal tile order in sections of heads (tile_coords; here "HS" heads per section, 0: all),
the early hand-back of the Q tile under O_TILE (after the tile's last S = Q K^T; the epilogue stages O in its own
tile) and the tile slot released by every consumer thread (TILE_EMPTY counts 128 per warpgroup).

It checks what a GPU run can only show as a hang or a wrong number: no deadlock; every S and P V product
reads the K, V and Q blocks of its own tile and step (no TMA lands in a slot while a product or the epilogue
still reads it); every (Q block, head) tile is computed and written exactly once, by the atomic tile counter, with
empty (T = 0) tiles, few and many CTAs. (QK_AHEAD's two-S-tile loop and the static scheduler, PERSISTENT=1, left
the kernel in issue 40; this model of them is at commit 0bb604a.) It models the protocol, not the arithmetic (the
GPU tests check that against float64), and it must be kept in step with the kernel by hand.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sync_model import Deadlock, MBar, NamedBar


class CTA:
    def __init__(self, sim, cta, p):
        self.sim, self.cta, self.p = sim, cta, p
        s = p["STAGES"]
        self.full_q, self.empty_q = MBar(1), MBar(4 * p["NWG"])
        self.full_k = [MBar(1) for _ in range(s)]
        self.full_v = [MBar(1) for _ in range(s)]
        self.empty_k = [MBar(4 * p["NWG"]) for _ in range(s)]
        self.empty_v = [MBar(4 * p["NWG"]) for _ in range(s)]
        self.tile_full = [MBar(1), MBar(1)]
        self.tile_empty = [MBar(128 * p["NWG"]), MBar(128 * p["NWG"])]  # one arrival per consumer thread
        self.tile_slot = [None, None]
        self.named = {1: NamedBar(), 2: NamedBar()}
        self.smem = {}       # ("q",) / ("k", slot) / ("v", slot) -> tag of what landed there
        self.readers = {}    # the same keys -> number of products / epilogues reading it now
        self.pending = set() # keys with a TMA write in flight

    # --------------------------------------------------------------------------------- helpers
    def tma(self, key, tag, bar):
        assert self.readers.get(key, 0) == 0, f"CTA {self.cta}: TMA into {key} while it is read"
        self.pending.add(key)
        self.sim.events.append((self, key, tag, bar))

    def read(self, key, want):
        assert key not in self.pending, f"CTA {self.cta}: {key} read while a TMA write is in flight"
        assert self.smem.get(key) == want, f"CTA {self.cta}: {key} holds {self.smem.get(key)}, wanted {want}"
        self.readers[key] = self.readers.get(key, 0) + 1

    def unread(self, key):
        self.readers[key] -= 1

    def coords(self, tile):
        p = self.p
        tr = -(-p["Nq"] // p["BM"])
        if p["causal"]:
            hs = p.get("HS") or p["BH"]  # tile_coords: sections of hs heads, each longest first
            sec, r = divmod(tile, tr * hs)
            h_sec = min(hs, p["BH"] - sec * hs)
            return tr - 1 - r // h_sec, sec * hs + r % h_sec
        return tile % tr, tile // tr

    def blocks(self, m_block):
        p = self.p
        n_vis = p["Nk"]
        if p["causal"]:
            n_vis = max(0, min(p["Nk"], min(m_block * p["BM"] + p["BM"], p["Nq"]) + p["Nk"] - p["Nq"]))
        return -(-n_vis // p["BN"])

    # --------------------------------------------------------------------------------- producer
    def producer(self):
        p, S = self.p, self.p["STAGES"]
        n_tiles = -(-p["Nq"] // p["BM"]) * p["BH"]
        kv_it, tile, k = 0, self.cta, 0
        while True:
            if k >= 2:
                yield lambda k=k: self.tile_empty[k & 1].done(((k >> 1) - 1) & 1)
            self.tile_slot[k & 1] = tile
            self.tile_full[k & 1].arrive()
            if tile >= n_tiles:
                return
            m_block, bh = self.coords(tile)
            T = self.blocks(m_block)

            def load_q(k=k, tile=tile):
                if k > 0:
                    yield lambda: self.empty_q.done((k - 1) & 1)
                self.full_q.arrive(tx=1)
                self.tma(("q",), tile, self.full_q)

            def load(kind, t, kv_it=kv_it, T=T, bh=bh):
                slot, use = (kv_it + t) % S, (kv_it + t) // S
                empty, full = (self.empty_k, self.full_k) if kind == "k" else (self.empty_v, self.full_v)
                if use > 0:
                    yield lambda: empty[slot].done((use - 1) & 1)
                full[slot].arrive(tx=1)
                self.tma((kind, slot), (bh, T - 1 - t), full[slot])

            if T > 0:
                yield from load("k", 0)
                yield from load_q()
                yield from load("v", 0)
            for t in range(1, T):
                yield from load("k", t)
                yield from load("v", t)
            if T == 0:
                yield from load_q()
            kv_it += T
            tile = self.sim.next_tile(self, tile)
            k += 1

    # --------------------------------------------------------------------------------- consumers
    def consumer(self, cg):
        p, S, W = self.p, self.p["STAGES"], 4  # W: the warps of this warpgroup, arriving together
        n_tiles = -(-p["Nq"] // p["BM"]) * p["BH"]
        pingpong = p["PINGPONG"]
        o_tile = p.get("O_TILE", 0)
        kv_it, k = 0, 0

        def turn_begin():
            if pingpong:
                gen = self.named[1 + cg].arrive()
                yield lambda: self.named[1 + cg].generation >= gen

        def turn_end():
            if pingpong:
                self.named[2 - cg].arrive()

        def arrive(bar):
            for _ in range(W):
                bar.arrive()

        while True:
            yield lambda k=k: self.tile_full[k & 1].done((k >> 1) & 1)
            tile = self.tile_slot[k & 1]
            for _ in range(128):  # every thread of the warpgroup, after its own load of the slot
                self.tile_empty[k & 1].arrive()
            if tile >= n_tiles:
                return
            m_block, bh = self.coords(tile)
            T = self.blocks(m_block)
            yield lambda k=k: self.full_q.done(k & 1)
            if T > 0:
                if pingpong and cg == 1:
                    self.named[1].arrive()
                ks = kv_it % S
                yield lambda ks=ks, ph=(kv_it // S) & 1: self.full_k[ks].done(ph)
                yield from turn_begin()
                self.read(("q",), tile)
                self.read(("k", ks), (bh, T - 1))
                turn_end()
                yield None  # the product runs
                self.unread(("q",))
                self.unread(("k", ks))
                arrive(self.empty_k[ks])
                if o_tile and (T == 1 or p.get("release_q_at_first_s")):
                    arrive(self.empty_q)  # the tile's last S has read Q
                for t in range(1, T):
                    ks, vs = (kv_it + t) % S, (kv_it + t - 1) % S
                    yield lambda ks=ks, ph=((kv_it + t) // S) & 1: self.full_k[ks].done(ph)
                    yield lambda vs=vs, ph=((kv_it + t - 1) // S) & 1: self.full_v[vs].done(ph)
                    yield from turn_begin()
                    self.read(("q",), tile)
                    self.read(("k", ks), (bh, T - 1 - t))
                    self.read(("v", vs), (bh, T - t))
                    turn_end()
                    yield None  # wait<1>: S done
                    self.unread(("q",))
                    self.unread(("k", ks))
                    arrive(self.empty_k[ks])
                    if o_tile and t == T - 1 and not p.get("release_q_at_first_s"):
                        arrive(self.empty_q)  # the next tile's Q may land now
                    yield None  # softmax, then wait<0>: P V done
                    self.unread(("v", vs))
                    arrive(self.empty_v[vs])
                vs = (kv_it + T - 1) % S
                yield lambda vs=vs, ph=((kv_it + T - 1) // S) & 1: self.full_v[vs].done(ph)
                if pingpong:
                    gen = self.named[1 + cg].arrive()
                    yield lambda gen=gen: self.named[1 + cg].generation >= gen
                    if cg == 0:
                        self.named[2].arrive()
                self.read(("v", vs), (bh, 0))
                yield None
                self.unread(("v", vs))
                if p.get("release_last_v", True):  # the persistent kernel's addition: the ring runs on
                    arrive(self.empty_v[vs])
            if o_tile:  # epilogue: O staged through its own tile, which no TMA writes; Q went back already
                if T == 0:
                    arrive(self.empty_q)
                yield None
                self.sim.written.append((tile, cg))
            else:  # epilogue: O staged through this warpgroup's rows of the Q tile
                self.readers[("q",)] = self.readers.get(("q",), 0) + 1
                assert ("q",) not in self.pending
                yield None
                self.sim.written.append((tile, cg))
                self.readers[("q",)] -= 1
                arrive(self.empty_q)
            kv_it += T
            k += 1


class Sim:
    def __init__(self, p, ctas, seed):
        self.p, self.rng = p, random.Random(seed)
        self.counter, self.n_ctas, self.fetches = 0, ctas, 0
        self.n_tiles = -(-p["Nq"] // p["BM"]) * p["BH"]
        self.events, self.written = [], []
        self.ctas = [CTA(self, c, p) for c in range(ctas)]
        self.agents = []
        for c in self.ctas:
            self.agents.append([c.producer(), None])
            self.agents += [[c.consumer(cg), None] for cg in range(p["NWG"])]

    def next_tile(self, cta, tile):
        # the kernel's atomicInc, wrapping after the last tile's index: it leaves 0 (v6e)
        got = self.counter
        self.counter += 1
        self.fetches += 1
        if got == self.p.get("reset_at", self.n_tiles - 1):
            self.counter = 0
        return self.n_ctas + got

    def run(self, max_steps=200000):
        for _ in range(max_steps):
            live = [a for a in self.agents if a[0] is not None]
            if not live and not self.events:
                return
            ready = [a for a in live if a[1] is None or a[1]()]
            choices = len(ready) + (1 if self.events else 0)
            if choices == 0:
                raise Deadlock(f"{len(live)} agents waiting, no TMA in flight")
            i = self.rng.randrange(choices)
            if i == len(ready):  # a TMA write lands
                cta, key, tag, bar = self.events.pop(self.rng.randrange(len(self.events)))
                assert cta.readers.get(key, 0) == 0, f"TMA landed in {key} while it was read"
                cta.smem[key] = tag
                cta.pending.discard(key)
                bar.complete_tx(1)
                continue
            agent = ready[i]
            try:
                agent[1] = next(agent[0])
            except StopIteration:
                agent[0] = None
        raise Deadlock("step limit")


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(1, 700), st.integers(1, 1500), st.integers(1, 5), st.booleans(),
       st.integers(1, 5), st.sampled_from([(128, 128, 0, 0), (128, 176, 1, 0), (128, 80, 1, 0), (128, 96, 0, 0),
                                           (128, 128, 1, 1), (128, 128, 0, 1)]),
       st.sampled_from([2, 3, 4]), st.integers(0, 3), st.integers(0, 2**31 - 1))
def test_persistent_protocol(n_q, n_k, bh, causal, ctas, blocks, stages, hs, seed):
    bm, bn, pingpong, o_tile = blocks
    p = dict(Nq=n_q, Nk=n_k, BH=bh, causal=causal, BM=bm, BN=bn, NWG=2, STAGES=stages, PINGPONG=pingpong,
             O_TILE=o_tile, HS=hs)
    n_tiles = -(-n_q // bm) * bh
    sim = Sim(p, min(ctas, n_tiles), seed)
    sim.run()
    assert sorted(sim.written) == sorted((t, cg) for t in range(n_tiles) for cg in range(2)), "a tile lost or twice"
    # one fetch per tile run, and the counter back at 0 for the next launch on the stream
    assert sim.fetches == n_tiles and sim.counter == 0


def test_the_model_catches_a_missing_release():
    """The model must be able to fail: without the release of each tile's last V slot (which the
    one-tile kernel never needed) the producer waits forever once the ring comes back to that slot."""
    p = dict(Nq=256, Nk=300, BH=1, causal=False, BM=128, BN=128, NWG=2, STAGES=2, PINGPONG=0)
    Sim(p, 1, 0).run()
    with pytest.raises(Deadlock):
        Sim(dict(p, release_last_v=False), 1, 0).run()


def test_the_model_catches_a_stale_read():
    """... and a data race: the Q tile handed back before the epilogue is done with it."""
    p = dict(Nq=256, Nk=300, BH=2, causal=False, BM=128, BN=128, NWG=2, STAGES=2, PINGPONG=0)
    real = MBar.done

    def early(self, parity):  # empty_q's wait passes at once: the next Q may land during the epilogue
        return True if self.count == 8 and getattr(self, "is_empty_q", False) else real(self, parity)
    failures = 0
    for seed in range(40):
        sim = Sim(p, 1, seed)
        sim.ctas[0].empty_q.is_empty_q = True
        MBar.done = early
        try:
            sim.run()
        except AssertionError:
            failures += 1
        finally:
            MBar.done = real
    assert failures > 0


def test_sections_visit_every_tile_once_longest_first():
    """tile_coords with sections (here 2 heads, the last section partial): a bijection onto (Q block, head), and
    within a section the Q blocks that see the most keys come first."""
    p = dict(Nq=500, Nk=500, BH=5, causal=True, BM=128, BN=128, NWG=2, STAGES=2, PINGPONG=0, HS=2)
    cta = Sim(p, 1, 0).ctas[0]
    tr = 4
    coords = [cta.coords(t) for t in range(tr * 5)]
    assert sorted(coords) == sorted((m, h) for m in range(tr) for h in range(5))
    assert [h for _, h in coords[:8]] == [0, 1] * 4 and [m for m, _ in coords[:8]] == [3, 3, 2, 2, 1, 1, 0, 0]
    assert coords[16:] == [(3, 4), (2, 4), (1, 4), (0, 4)]  # the last section holds one head


def test_the_model_catches_an_early_q_release():
    """O_TILE hands Q back after the tile's last S; handing it back after the first S lets the next tile's Q
    land while a later S of this tile still reads it."""
    p = dict(Nq=512, Nk=900, BH=2, causal=False, BM=128, BN=128, NWG=2, STAGES=2, PINGPONG=0, O_TILE=1)
    for seed in range(5):
        Sim(p, 1, seed).run()
    failures = 0
    for seed in range(40):
        try:
            Sim(dict(p, release_q_at_first_s=True), 1, seed).run()
        except (AssertionError, Deadlock):
            failures += 1
    assert failures > 0


def test_the_model_catches_an_early_counter_reset():
    """The counter's reset must come from the launch's last fetch: zeroed by the first CTA to see the end (its
    fetch returns Tr*B*H - CTAs), the CTAs still running fetch tiles that were already run."""
    p = dict(Nq=512, Nk=300, BH=3, causal=False, BM=128, BN=128, NWG=2, STAGES=2, PINGPONG=0)
    sim = Sim(p, 3, 0)
    sim.run()
    assert sim.counter == 0
    sim = Sim(dict(p, reset_at=12 - 3), 3, 0)
    try:
        sim.run(max_steps=20000)
    except Deadlock:  # the step limit: CTAs still fetching tiles that were already run
        return
    assert sim.fetches > 12 and len(sim.written) > 2 * 12, "tiles run again after the early reset"
