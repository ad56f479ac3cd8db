"""The pieces of a CTA's synchronisation that the protocol models share (tests/test_wgmma_persistent_protocol.py for
the forward's persistent kernel, tests/test_kernels_bwd_ws_protocol.py for the lab's v4 backward): an mbarrier with
arrival counts and transaction bytes, and a named barrier over the 256 consumer threads."""
from __future__ import annotations


class Deadlock(Exception):
    pass


class MBar:
    """mbarrier: a phase completes when `count` arrivals are in and no transaction bytes are pending."""

    def __init__(self, count):
        self.count, self.arrived, self.tx, self.phases = count, 0, 0, 0

    def _check(self):
        if self.arrived == self.count and self.tx == 0:
            self.arrived, self.phases = 0, self.phases + 1

    def arrive(self, tx=0):
        assert self.arrived < self.count, "more arrivals than the count in one phase"
        self.arrived += 1
        self.tx += tx
        self._check()

    def complete_tx(self, n):
        self.tx -= n
        assert self.tx >= 0, "more bytes landed than expected"
        self._check()

    def done(self, parity):  # try_wait.parity: the phase with this parity has completed
        return (self.phases & 1) != parity


class NamedBar:
    """bar.sync / bar.arrive with 256 threads: two warpgroup-sized contributions complete it."""

    def __init__(self):
        self.count, self.generation = 0, 0

    def arrive(self):
        """Returns the generation whose completion releases this arrival (already reached when it completes)."""
        self.count += 1
        if self.count == 2:
            self.count, self.generation = 0, self.generation + 1
            return self.generation
        return self.generation + 1
