"""analysis/l2_sim.py: the event-level LRU walk against the residency rules it checks (CPU only)."""
import pytest

from analysis import l2_sim
from analysis.residency import separated_missing_bytes
from analysis.tiling import cdiv

MIB = 2 ** 20


@pytest.mark.parametrize("n, cap_mib", [(16384, 36), (8192, 9), (12288, 20)])
def test_non_causal_walk_agrees_with_the_closed_rule(n, cap_mib):
    """residency.py's closed rule (waves in lockstep, straddled heads re-read a pass later) and the walk of the same
    grid are two derivations of one LRU: fa2_tc's tiling (Br = 128, Bc = 64, 2 CTAs/SM on 132 SMs), d = 128."""
    bh, br, bc, d, item, slots = 16, 128, 64, 128, 2, 264
    cap = cap_mib * MIB
    walked = l2_sim.simulate(l2_sim.accesses(bh, n, n, br, bc, d, item, slots), cap)
    closed = separated_missing_bytes(bh, cdiv(n, br), cdiv(n, bc), slots, 2 * n * d * item, 2 * slots * br * d * item,
                                     cap)
    assert closed > 0
    assert walked.missed_bytes == pytest.approx(closed, rel=0.06)
    assert walked.compulsory_bytes == bh * 4 * n * d * item  # Q, K, V, O once each


def test_causal_rereads_stay_within_a_few_mib():
    """SDPA flash causal N = 4096, d = 128 (ncu reads +56 MB over compulsory): on its launch order no K/V re-read is
    4 MiB from its last use, so LRU misses nothing down to that capacity, and misses at 2 MiB (the walk can miss)."""
    kw = dict(batch=4, heads=16, n_q=4096, n_k=4096, d=128, causal=True)
    assert l2_sim.simulate_kernel("sdpa_flash", **kw).missed_bytes == 0
    assert l2_sim.simulate_kernel("sdpa_flash", capacity=4 * MIB, **kw).missed_bytes == 0
    tight = l2_sim.simulate_kernel("sdpa_flash", capacity=2 * MIB, **kw)
    assert 0 < tight.missed_bytes < tight.reread_bytes
    # the heaviest-first order (fa2_tc) re-reads the same bytes
    assert l2_sim.simulate_kernel("fa2_tc", **kw).reread_bytes == tight.reread_bytes


def test_pace_spread_is_what_makes_causal_misses():
    ev = dict(bh=64, n_q=4096, n_k=4096, block_q=128, block_k=64, d=128, item=2, slots=264, causal=True)
    even = l2_sim.simulate(l2_sim.accesses(**ev), 36 * MIB)
    spread = l2_sim.simulate(l2_sim.accesses(pace_spread=1.8, **ev), 36 * MIB)
    assert even.missed_bytes == 0 < spread.missed_bytes
    assert spread.compulsory_bytes == even.compulsory_bytes


def test_causal_offsets_and_tails():
    """Nq != Nk and lengths Br, Bc do not divide: the compulsory bytes are the tensors' own, the tail tiles at their
    real width (with Nk > Nq bottom-right, the last Q block sees every key)."""
    bh, n_q, n_k, d, item = 3, 300, 517, 64, 2
    r = l2_sim.simulate(l2_sim.accesses(bh, n_q, n_k, 128, 64, d, item, slots=2, causal=True), 10 ** 9)
    assert r.missed_bytes == 0
    assert r.compulsory_bytes == bh * (2 * n_q + 2 * n_k) * d * item


def test_grids_it_does_not_walk_are_refused(capsys):
    with pytest.raises(ValueError, match="persistent"):
        l2_sim.simulate_kernel("sdpa_cudnn", 1, 16, 4096, 4096, 128)
    assert l2_sim.main(["--kernel", "sdpa_cudnn", "--batch", "1", "--heads", "16", "--seq-len", "4096",
                        "--head-dim", "128"]) == 2
    assert l2_sim.main(["--kernel", "sdpa_flash", "--batch", "0", "--heads", "16", "--seq-len", "4096",
                        "--head-dim", "128"]) == 2
    assert "error:" in capsys.readouterr().err
    with pytest.raises(ValueError, match="walks every tile access"):
        l2_sim.accesses(4096, 65536, 65536, 64, 64, 64, 2, 264)


def test_cli_prints_the_model_beside_the_walk(capsys):
    assert l2_sim.main(["--kernel", "sdpa_flash", "--batch", "1", "--heads", "2", "--seq-len", "1024",
                        "--head-dim", "64", "--causal", "--capacity-mib", "1"]) == 0
    out = capsys.readouterr().out
    assert "model (analysis/levels.py)" in out and "LRU    1.0 MiB" in out
