"""The sanitizer targets of the new paths (lab/bwd_wgmma_sanitize_target.py, lab/decode_sanitize_target.py; run by
lab/visits/sanitize_new.sh): their shapes cover what issue 42 item 4 and issue 44 ask for (computed from the
kernels' own tile sizes, not taken from the comments), and without a GPU they say so in one line (exit 2)."""
from __future__ import annotations

import pytest
import torch

from lab import bwd_wgmma_sanitize_target as bwd
from lab import decode_sanitize_target as dec


@pytest.mark.parametrize("shape", bwd.SHAPES)
def test_every_full_shape_wraps_every_loop(shape):
    """Several Q blocks per head and key blocks, tails on both sides, Nq != Nk, and key block 0's CTA refills each
    Q/dO ring slot at least twice (steps >= 3 * STAGES: each slot filled three times)."""
    b, h, h_kv, n_q, n_k, d, causal, dt, layout, det = shape
    t = bwd.tiling(shape)
    assert t["Tr"] >= 3 and t["Tc"] >= 3, t
    assert n_q % t["Br"] and n_k % t["Bc"] and n_q != n_k, t
    if not (d == 256 and det):  # d = 256 deterministic is the float32 torch route: no ring
        assert t["steps"] >= 3 * t["stages"], t


def test_the_shapes_cover_groups_layouts_head_dims_dtypes_and_modes():
    for shapes in (bwd.SHAPES, bwd.SMALL):
        assert {s[5] for s in shapes} == {64, 96, 128, 256}
        assert {s[7] for s in shapes} == {"float16", "bfloat16"}
        assert {s[8] for s in shapes} == {"bhnd", "bnhd"}
        assert {s[9] for s in shapes} == {False, True}
        assert any(s[6] and s[3] > s[4] for s in shapes)  # causal rows that see no key
    assert {s[1] // s[2] for s in bwd.SHAPES} >= {1, 2, 8} and any(s[2] == 1 and s[1] > 1 for s in bwd.SHAPES)
    assert all(bwd.tiling(s)["steps"] > bwd.tiling(s)["stages"] for s in bwd.SMALL if s[5] != 256 or not s[9])
    assert len(bwd.SMALL) <= 4


def test_the_decode_cases_run_the_merge_paged_and_contiguous_and_the_edges():
    for cases in (dec.CASES, dec.SMALL):
        for name in dec.NAMES:
            run = [c for c in cases if dec.skip_reason(name, c) is None]
            assert any(c[9] is None or c[9] > 1 for c in run), name  # num_splits > 1: the merge runs
            assert {c[7] is None for c in run} == {True, False}, name  # contiguous and paged
            assert any(0 in c[5] for c in run), name
    run = [c for c in dec.CASES if dec.skip_reason("split_kv_fast", c) is None]
    assert any(1 in c[5] for c in run) and any(c[2] > 1 for c in run)  # a one-token cache, GQA
    assert any(c[8] and c[3] > 1 and c[3] > min(c[5]) for c in run)  # causal Nq > 1 with rows that see nothing
    assert dec.skip_reason("split_kv_fast", (2, 1, 3, 2, 96, [90, 0], "float32", 8, True, 3))
    assert dec.skip_reason("split_kv", (2, 1, 3, 2, 96, [90, 0], "float32", 8, True, 3)) is None


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("mod,argv", [(bwd, []), (bwd, ["small"]), (dec, []), (dec, ["split_kv_fast", "small"])])
def test_without_a_gpu_one_line_and_exit_2(capsys, no_gpu, mod, argv):
    assert mod.main(argv) == 2
    name = mod.__name__.rsplit(".", 1)[1]
    assert capsys.readouterr().err.strip() == f"{name}: needs a CUDA GPU (torch {torch.__version__} sees none)"


@pytest.mark.parametrize("mod,argv", [(bwd, ["tiny"]), (bwd, ["small", "x"]), (dec, ["nosuch"]),
                                      (dec, ["split_kv", "small", "x"])])
def test_a_bad_argument_is_refused_before_the_gpu(capsys, monkeypatch, mod, argv):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # only the arguments may stop it
    assert mod.main(argv) == 2
    assert capsys.readouterr().err.strip().startswith("usage:")


def _fake_backward(mangle=None):
    """fa2_wgmma_bwd.backward's stand-in on CPU: the oracle's gradients in the launcher's own (poisoned) allocation;
    mangle(grads) breaks them the way a faulty kernel would."""
    from kernels import fa2_wgmma_bwd

    def backward(q, k, v, o, lse, do, *, causal, deterministic):
        grads = tuple(fa2_wgmma_bwd._empty_like_layout(t) for t in (q, k, v))
        for t, r in zip(grads, bwd.reference(q, k, v, do, causal)[2]):
            t.copy_(r)
        return mangle(grads) if mangle else grads
    return backward


def _unwritten(grads):
    grads[1][0, 0, -1, -1] = float("nan")
    return grads


@pytest.mark.parametrize("mangle,ok", [(None, True), (_unwritten, False),
                                       (lambda g: (g[0].contiguous(), g[1], g[2]), False),  # layout lost
                                       (lambda g: (g[0], g[1] * 1.1, g[2]), False)])         # 10% off
def test_the_backward_glue_passes_the_oracle_and_fails_a_wrong_kernel(monkeypatch, capsys, mangle, ok):
    """The target's own code on CPU, the launch replaced: the oracle's gradients pass; an unwritten element (still
    NaN from harness.Poisoned), gradients not in the inputs' strided layout, a 10% error each fail."""
    from kernels import fa2_wgmma_bwd

    monkeypatch.setattr(bwd, "DEVICE", "cpu")
    monkeypatch.setattr(fa2_wgmma_bwd, "backward", _fake_backward(mangle))
    shape = (1, 4, 2, 40, 30, 16, True, "float16", "bnhd", True)  # strided, GQA, rows that see no key
    assert bwd.run_shape(shape) is ok
    assert capsys.readouterr().out.strip().endswith("ok" if ok else "BAD")


@pytest.mark.parametrize("off", [0.0, 0.5])
def test_the_decode_glue_passes_the_oracle_and_fails_a_wrong_kernel(monkeypatch, capsys, off):
    from kernels import KERNELS

    def forward(q, k, v, *, causal, cache_seqlens, block_table, num_splits):
        page = None if block_table is None else k.shape[2]
        o, lse = dec.oracle(q, k, v, cache_seqlens.tolist(), block_table, page, causal)
        return (o + off).to(q.dtype), lse.float()

    monkeypatch.setattr(dec, "DEVICE", "cpu")
    for name in dec.NAMES:
        monkeypatch.setattr(KERNELS[name].module, "forward", forward)
        for case in dec.SMALL:
            assert dec.run_case(name, case) is (off == 0)
    assert capsys.readouterr().out.count(" ok\n") == (2 * len(dec.SMALL) if off == 0 else 0)
