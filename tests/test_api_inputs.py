"""Loose API edges, closed: one input check (counting.checks) with the same messages in the
references, the closed forms and the CUDA launchers; Memory counts one run, never negative, shows
progress on long runs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from counting import checks
from counting import closed_forms as cf
from counting.memory import Counts, Memory
from kernels import loader
from variants import VARIANTS


def _message(fn):
    try:
        fn()
    except (ValueError, TypeError) as e:
        return type(e), str(e)
    return None


SIZES = dict(batch=1, heads=2, n_q=8, n_k=8, d=4, block_q=4, block_k=4)


@pytest.mark.parametrize("change", [
    {"block_q": 0}, {"block_k": -3}, {"block_q": 2.5}, {"block_k": True}, {"causal": 1},
    {"causal": "yes"}, {"causal": None},
])
def test_references_and_closed_forms_say_the_same(change):
    kw = {**SIZES, "causal": False, **change}
    q = torch.randn(kw["batch"], kw["heads"], kw["n_q"], kw["d"])
    k = torch.randn(kw["batch"], kw["heads"], kw["n_k"], kw["d"])
    ref = _message(lambda: VARIANTS["fa2"].forward(q, k, k, causal=kw["causal"], block_q=kw["block_q"],
                                                   block_k=kw["block_k"]))
    closed = _message(lambda: cf.counts("fa2", kw["batch"], kw["heads"], kw["n_q"], kw["n_k"], kw["d"],
                                        causal=kw["causal"], block_q=kw["block_q"], block_k=kw["block_k"]))
    assert ref is not None and ref == closed


@pytest.mark.parametrize("shapes,match", [
    (((2, 2, 8, 4), (1, 2, 8, 4), (1, 2, 8, 4)), "batch mismatch: q has 2, k has 1, v has 1"),
    (((1, 3, 8, 4), (1, 2, 8, 4), (1, 2, 8, 4)), "heads mismatch"),
    (((1, 2, 8, 5), (1, 2, 8, 4), (1, 2, 8, 4)), "head dim d mismatch"),
    (((1, 2, 8, 4), (1, 2, 8, 4), (1, 2, 9, 4)), "same sequence length"),
])
def test_kernel_launchers_use_the_same_check(monkeypatch, shapes, match):
    """kernels.loader.check_cuda_inputs gives the references' message (CUDA-ness aside)."""
    q, k, v = (torch.randn(s) for s in shapes)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    with pytest.raises(ValueError) as kernel:
        loader.check_cuda_inputs(q, k, v, supported_dtypes=(torch.float32,))
    with pytest.raises(ValueError) as reference:
        VARIANTS["fa2"].forward(q, k, v)
    assert str(kernel.value) == str(reference.value) and match in str(kernel.value)


def test_closed_forms_refuse_negative_sram_and_truthy_causal():
    with pytest.raises(ValueError, match="sram_bytes must be a positive integer"):
        cf.counts("fa2", 1, 1, 8, 8, 4, sram_bytes=-1)
    with pytest.raises(ValueError, match="sram_bytes must be a positive integer"):
        cf.counts("fa2", 1, 1, 8, 8, 4, sram_bytes=float("nan"))
    with pytest.raises(TypeError, match="causal must be a bool"):
        cf.counts("fa2", 1, 1, 8, 8, 4, causal="no")
    with pytest.raises(ValueError, match="d must be a positive integer"):
        cf.counts("fa2", 1, 1, 8, 8, 4.0)
    with pytest.raises(ValueError, match="sram_bytes must be a positive integer"):
        cf.fa1_blocks(0, 64)
    with pytest.raises(ValueError, match="q would have .* elements"):
        cf.counts("fa2", 2 ** 40, 1, 2 ** 20, 8, 64)
    # NumPy integers and bools are integers and bools
    a = cf.counts("v_once", np.int64(2), np.int32(3), np.int64(40), 30, 8, causal=np.bool_(True),
                  block_q=np.int64(8), block_k=16, sram_bytes=np.int64(4096))
    b = cf.counts("v_once", 2, 3, 40, 30, 8, causal=True, block_q=8, block_k=16, sram_bytes=4096)
    assert a.as_dict() == b.as_dict() and type(a.batch) is int


def test_numpy_scalars_as_scale():
    q, k, v = (torch.randn(1, 1, 9, 4) for _ in range(3))
    for name, var in VARIANTS.items():
        want, _ = var.forward(q, k, v, scale=0.25)
        for scale in (np.float32(0.25), np.float64(0.25), np.float16(0.25)):
            got, _ = var.forward(q, k, v, scale=scale)
            assert torch.equal(got, want), (name, type(scale))
    for bad in ("0.5", torch.tensor(0.5), float("inf"), np.float32("nan")):
        with pytest.raises(ValueError, match="scale must be a finite real number or None"):
            VARIANTS["fa2"].forward(q, k, v, scale=bad)


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -1.0, 2.5])
def test_memory_capacity_is_checked_not_converted(bad):
    with pytest.raises(ValueError, match="sram_bytes must be a positive integer or None"):
        Memory(sram_bytes=bad)
    assert Memory(sram_bytes=1024.0).sram_bytes == 1024


def test_memory_counts_one_run_unless_reset():
    q, k, v = (torch.randn(1, 1, 16, 4) for _ in range(3))
    mem = Memory()
    VARIANTS["fa2"].forward(q, k, v, block_q=8, block_k=8, mem=mem)
    first = mem.counts.as_dict()
    with pytest.raises(RuntimeError, match="already holds the counts of a run"):
        VARIANTS["fa1"].forward(q, k, v, block_q=8, block_k=8, mem=mem)
    assert mem.counts.as_dict() == first  # refused before counting anything
    mem.reset()
    VARIANTS["fa2"].forward(q, k, v, block_q=8, block_k=8, mem=mem)
    assert mem.counts.as_dict() == first
    both = Memory(accumulate=True)
    for _ in range(2):
        VARIANTS["fa2"].forward(q, k, v, block_q=8, block_k=8, mem=both)
    assert both.counts.hbm_bytes == 2 * mem.counts.hbm_bytes


def test_counts_cannot_go_negative():
    c = Counts()
    c.reads["Q"] += 5
    with pytest.raises(ValueError, match="cannot be negative"):
        c.reads["Q"] -= 6
    with pytest.raises(ValueError, match="cannot be negative"):
        c.flops["matmul"] = -1
    with pytest.raises(ValueError, match="cannot be negative"):
        Memory().require_sram("x", -4)


def test_progress_on_long_runs_only(capsys):
    q, k, v = (torch.randn(1, 1, 64, 4, device="meta") for _ in range(3))
    seen = []
    mem = Memory(progress=lambda s, counts: seen.append((s, counts.flops["matmul"])), progress_after_s=0)
    VARIANTS["fa2"].forward(q, k, v, block_q=8, block_k=8, mem=mem)
    assert seen and all(f > 0 for _, f in seen)  # called with the counts so far
    Memory(progress_after_s=0)  # the default printer: one line on stderr
    mem = Memory(progress_after_s=0)
    VARIANTS["fa1"].forward(q, k, v, block_q=8, block_k=8, mem=mem)
    err = capsys.readouterr().err
    assert err.startswith("[memory model]") and "matmul FLOPs" in err
    VARIANTS["fa2"].forward(q, k, v, block_q=8, block_k=8, mem=Memory())  # short: silent
    assert capsys.readouterr().err == ""
    with pytest.raises(TypeError, match="progress must be"):
        Memory(progress="yes")


def test_check_problem_element_limit():
    with pytest.raises(ValueError, match="S would have"):
        checks.check_problem(1, 1, 2 ** 32, 2 ** 32, 1, causal=False, block_q=1, block_k=1,
                             scores_in_hbm=True)
    assert checks.check_problem(1, 1, 2 ** 32, 2 ** 32, 1, causal=False, block_q=1, block_k=1)["n_q"] == 2 ** 32


def _fake_cuda(monkeypatch):
    """CPU tensors that pass the launchers' CUDA check, and no launch: what is refused is refused before it."""
    from kernels import fa2_tc, v_once_tc

    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))

    def launch(*_a, **_k):
        raise AssertionError("launched")
    monkeypatch.setattr(fa2_tc, "launch", launch)
    monkeypatch.setattr(v_once_tc, "_smem_limit", lambda device: 232448)
    q = torch.zeros(1, 2, 70, 64, dtype=torch.float16)
    return q, q.clone(), q.clone()


@pytest.mark.parametrize("name", ["fa2_tc", "v_once_tc"])
@pytest.mark.parametrize("config,error,match", [
    ("abc", TypeError, "config must be a dict of knobs"),
    ([], TypeError, "config must be a dict of knobs .* got list"),
    ({"BLOCK_N": 64}, ValueError, r"a config needs \['BLOCK_M', 'NWARPS'\]"),
    ({"BLOCK_M": 64, "BLOCK_N": 64, "NWARPS": 4, "NOPE": 1}, ValueError, r"unknown config keys \['NOPE'\]"),
    ({"BLOCK_M": 64, "BLOCK_N": "64", "NWARPS": 4}, TypeError, "config BLOCK_N='64' must be an integer"),
    ({"BLOCK_M": 64, "BLOCK_N": 64.0, "NWARPS": 4}, TypeError, "config BLOCK_N=64.0 must be an integer"),
    ({"BLOCK_M": 64, "BLOCK_N": 64, "NWARPS": True}, TypeError, "config NWARPS=True must be an integer"),
    ({"BLOCK_M": 64, "BLOCK_N": 0, "NWARPS": 4}, ValueError, "BLOCK_N=0: a positive multiple of 16"),
    ({"BLOCK_M": 100, "BLOCK_N": 64, "NWARPS": 4}, ValueError, r"BLOCK_M=100: a positive multiple of 16 \* NWARPS"),
    ({"BLOCK_M": 64, "BLOCK_N": 64, "NWARPS": 0}, ValueError, "NWARPS=0: at least one warp"),
    ({"BLOCK_M": 64, "BLOCK_N": 64, "NWARPS": 4, "MIN_BLOCKS": 0}, ValueError, "MIN_BLOCKS=0: at least one CTA"),
])
def test_tensor_core_configs_are_checked_before_launch(monkeypatch, name, config, error, match):
    """fa2_tc and v_once_tc took config= unchecked: a missing tile was a KeyError, a misspelt knob built the default
    under another name, 64.0 or True became a define, BLOCK_N=0 a ZeroDivisionError in v_once_tc.plan, and what
    tc_fa2.cuh's static_asserts refuse a compile error on the GPU."""
    import importlib

    q, k, v = _fake_cuda(monkeypatch)
    with pytest.raises(error, match=f"{name}: {match}"):
        importlib.import_module(f"kernels.{name}").forward(q, k, v, config=config)


def test_tensor_core_configs_that_build_still_do():
    """Every fa2_tc sweep candidate and default passes the check unchanged; NumPy integers are integers; the knobs the
    .cu file defaults (Q_IN_REGS, MIN_BLOCKS) may be left out; shared memory past a CTA's is refused."""
    from kernels import fa2_tc, v_once_tc

    for d in fa2_tc.HEAD_DIMS:
        for cfg in fa2_tc.SWEEP[d]:
            assert fa2_tc.defines_for(d, 1, cfg) == dict(HEAD_DIM=d, IS_BF16=1, **cfg)
        assert v_once_tc.plan(512, 512, d, config=dict(v_once_tc.CONFIG))["config"] == v_once_tc.CONFIG
    got = fa2_tc.defines_for(64, 0, dict(BLOCK_M=np.int64(128), BLOCK_N=128, NWARPS=np.int32(4)))
    assert got == dict(HEAD_DIM=64, IS_BF16=0, BLOCK_M=128, BLOCK_N=128, NWARPS=4, Q_IN_REGS=0, MIN_BLOCKS=1)
    assert type(got["BLOCK_M"]) is int
    with pytest.raises(ValueError, match="need 393216 B of shared memory per CTA; the SM gives at most"):
        fa2_tc.defines_for(128, 0, dict(BLOCK_M=512, BLOCK_N=256, NWARPS=8))


@pytest.mark.parametrize("config,error,match", [
    ("abc", TypeError, "config must be a dict of knobs .* got str"),
    ({"TMA": 1, "BLOCK_N": 128, "NWG": 2, "NOPE": 1}, ValueError, r"unknown config keys \['NOPE'\]"),
    ({"TMA": 1, "BLOCK_N": 128.0, "NWG": 2}, TypeError, "config BLOCK_N=128.0 must be an integer"),
    ({"TMA": True, "BLOCK_N": 128, "NWG": 2}, TypeError, "config TMA=True must be an integer"),
    ({"TMA": 1, "BLOCK_N": 128, "NWG": "2"}, TypeError, "config NWG='2' must be an integer"),
    ({"TMA": 1, "BLOCK_N": 128, "NWG": 2, "PERSISTENT": 2, "GRID": "x"}, TypeError, "config GRID='x' must be an"),
    ({"TMA": 1, "BLOCK_N": 128, "NWG": 2, "PERSISTENT": 2, "GRID": -1}, ValueError, "GRID=-1: the persistent CTAs"),
])
def test_wgmma_configs_are_checked_before_launch(monkeypatch, config, error, match):
    """fa2_wgmma.forward: a config that is not a dict was an AttributeError in _plan, a missing BLOCK_N or NWG a
    KeyError in smem_bytes, NWG='2' a TypeError from a comparison, TMA=True or 128.0 a define of another kernel, and
    GRID='x' or -1 an int() error at launch or one CTA without a word. A config that leaves out Bc or the warpgroups
    gets the .cu files' defaults (it was a KeyError)."""
    from kernels import fa2_wgmma, loader

    q, k, v = _fake_cuda(monkeypatch)
    monkeypatch.setattr(loader, "require_hopper", lambda *a, **kw: None)
    monkeypatch.setattr(fa2_wgmma, "_PLANS", {})  # a cached plan serves a config equal to its own
    with pytest.raises(error, match=f"fa2_wgmma: {match}"):
        fa2_wgmma.forward(q, k, v, config=config)


def test_wgmma_config_without_the_tile_gets_the_kernels_defaults():
    """{"TMA": 1} is the .cu file's Bc = 128 and two warpgroups, as knob_errors already read it (the launch plan's
    smem_bytes and block_m raised KeyError); a config that names them gets no key added (its cubin is unchanged)."""
    from kernels import fa2_wgmma

    defs = fa2_wgmma.defines_for(128, 0, {"TMA": 1})
    assert (defs["BLOCK_N"], defs["NWG"], fa2_wgmma.block_m(defs)) == (128, 2, 128)
    assert defs == fa2_wgmma.defines_for(128, 0, {"TMA": 1, "BLOCK_N": 128, "NWG": 2})
    named = fa2_wgmma.defines_for(128, 0, fa2_wgmma.CONFIGS[128])
    assert list(named)[-1] not in ("BLOCK_N", "NWG") or list(fa2_wgmma.CONFIGS[128])[-1] in ("BLOCK_N", "NWG")


@pytest.mark.parametrize("config,error,match", [
    ("abc", TypeError, "config must be a dict of knobs .* got str"),
    ({"NWG": 2}, ValueError, r"a config needs \['BR'\]"),
    ({"NWG": 2, "BR": 64.0}, TypeError, "config BR=64.0 must be an integer"),
    ({"NWG": True, "BR": 64}, TypeError, "config NWG=True must be an integer"),
    ({"NWG": 2, "BR": 63}, ValueError, "BR=63: 64 or 128"),
    ({"NWG": 3, "BR": 64}, ValueError, "NWG=3: 1 or 2 warpgroups"),
    ({"NWG": 1, "BR": 128}, ValueError, "NWG=1, BR=128: every 64-row slice of dQ needs a warpgroup"),
    ({"NWG": 2, "BR": 64, "STAGES": 4}, ValueError, "STAGES=4: 2..3 ring slots"),
    ({"NWG": 2, "BR": 64, "DQ_BULK": 2}, ValueError, "DQ_BULK=2: DQ_BULK is a switch, 0 or 1"),
    ({"NWG": 2, "BR": 128, "STAGES": 3}, ValueError, "NWG=2 BR=128 STAGES=3 at d=128 needs 299008 B of shared memory"),
])
def test_wgmma_backward_configs_are_checked_before_launch(monkeypatch, config, error, match):
    """A string config was a 'dictionary update sequence' ValueError, 64.0 or True a define, and what
    fa2_wgmma_bwd.cu's static_asserts refuse (BR=63, NWG=3, STAGES=4) a compile error on the GPU."""
    from kernels import fa2_wgmma_bwd, loader

    q, k, v = _fake_cuda(monkeypatch)
    monkeypatch.setattr(loader, "require_hopper", lambda *a, **kw: None)
    monkeypatch.setattr(loader, "get_function", lambda *a, **kw: pytest.fail("launched"))
    q, k, v = (t.reshape(1, 2, 70, 64).repeat(1, 1, 1, 2) for t in (q, k, v))  # d = 128
    lse = torch.zeros(1, 2, 70)
    with pytest.raises(error, match=f"fa2_wgmma backward: {match}"):
        fa2_wgmma_bwd.backward(q, k, v, q.clone(), lse, q.clone(), config=config)
    for d in fa2_wgmma_bwd.SWEEP:  # every sweep candidate still builds
        for cfg in fa2_wgmma_bwd.SWEEP[d]:
            fa2_wgmma_bwd.defines_for(d, 0, cfg)


@pytest.mark.parametrize("config,error,match", [
    ("abc", TypeError, "v_once_cluster: config must be a dict of knobs"),
    ([], TypeError, "v_once_cluster: config must be a dict of knobs .* got list"),
    ({"NWG": True}, ValueError, "v_once_cluster config NWG=True: it takes NWG in"),
    ({"BLOCK_N": 64.0}, ValueError, "v_once_cluster config BLOCK_N=64.0: it takes"),
])
def test_cluster_configs_take_integers_in_a_dict(config, error, match):
    """A string was an AttributeError, [] silently the default build, True passed as NWG=1 and 64.0 as BLOCK_N=64."""
    from kernels import v_once_cluster

    with pytest.raises(error, match=match):
        v_once_cluster.build_config(config)
    assert v_once_cluster.build_config({"NWG": np.int64(2)})["NWG"] == 2


@pytest.mark.parametrize("name", ["fa2_tc", "fa2_wgmma", "v_once_tc", "v_once_cluster"])
@pytest.mark.parametrize("out,match", [
    ("x", r"out must be a tuple \(o, lse\) of 2 tensors, got str"),
    ((None, None), r"got tuple \(NoneType, NoneType\)"),
    ("pair", r"got tuple \(Tensor\)"),  # (o,)
    ("triple", r"got tuple \(Tensor, Tensor, Tensor\)"),
])
def test_out_must_be_a_pair_of_tensors(monkeypatch, name, out, match):
    """out= that is not (o, lse) was an unpacking ValueError ('not enough values to unpack') or, for (None, None), an
    AttributeError inside the output check."""
    import importlib

    from kernels import fa2_wgmma, loader

    q, k, v = _fake_cuda(monkeypatch)
    monkeypatch.setattr(loader, "require_hopper", lambda *a, **kw: None)
    monkeypatch.setattr(fa2_wgmma, "_sm_count", lambda dev: 132)
    o, lse = torch.zeros_like(q), torch.zeros(1, 2, 70)
    out = {"pair": (o,), "triple": (o, lse, o)}.get(out, out) if isinstance(out, str) else out
    with pytest.raises(TypeError, match=match):
        importlib.import_module(f"kernels.{name}").forward(q, k, v, out=out)


def test_backward_out_must_be_three_tensors(monkeypatch):
    from kernels import fa2_wgmma_bwd, loader

    q, k, v = _fake_cuda(monkeypatch)
    monkeypatch.setattr(loader, "require_hopper", lambda *a, **kw: None)
    lse = torch.zeros(1, 2, 70)
    for out, match in (("x", "got str"), ((q,), r"got tuple \(Tensor\)"), ((q, k, None), r"got tuple \(Tensor, Tensor, NoneType\)")):
        with pytest.raises(TypeError, match=r"out must be a tuple \(dq, dk, dv\) of 3 tensors, " + match):
            fa2_wgmma_bwd.backward(q, k, v, q.clone(), lse, q.clone(), out=out)


def _misaligned(t):
    """t's values in a contiguous view that starts 8 bytes past a 16-byte boundary (a view at an element offset)."""
    flat = torch.zeros(t.numel() + 4, dtype=t.dtype)[4:]
    assert flat.data_ptr() % 16 == 8
    return flat.view(t.shape).copy_(t)


@pytest.mark.parametrize("name", ["fa2_tc", "v_once_tc", "fa2_wgmma_cp_async"])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_inputs_a_cp_async_kernel_cannot_load_are_refused_before_launch(monkeypatch, name, which):
    """fa2_tc, v_once_tc and fa2_wgmma's cp.async build load q, k, v in 16-byte pieces: a contiguous view at an element
    offset passed every check and would fault on the GPU (misaligned address, a sticky error)."""
    import importlib

    from kernels import fa2_wgmma, loader

    qkv = list(_fake_cuda(monkeypatch))
    monkeypatch.setattr(loader, "require_hopper", lambda *a, **kw: None)
    monkeypatch.setattr(loader, "get_function", lambda *a, **kw: pytest.fail("launched"))
    qkv[which] = _misaligned(qkv[which])
    kw = {}
    if name == "fa2_wgmma_cp_async":
        name, kw = "fa2_wgmma", dict(config={"BLOCK_N": 64, "NWG": 2, "MIN_BLOCKS": 2})
        monkeypatch.setattr(fa2_wgmma, "_PLANS", {})
    with pytest.raises(ValueError, match=f"{'qkv'[which]} must start on a 16-byte boundary .* 8 bytes past one"):
        importlib.import_module(f"kernels.{name}").forward(*qkv, **kw)


def test_backward_tensors_it_cannot_load_or_store_are_refused_before_launch(monkeypatch):
    """fa2_wgmma's backward reads q, k, v, do by cp.async, o and do as uint4, and stores dq as uint4 (dk, dv as u32):
    a view at an element offset would fault on the GPU."""
    from kernels import fa2_wgmma_bwd, loader

    q, k, v = _fake_cuda(monkeypatch)
    monkeypatch.setattr(loader, "require_hopper", lambda *a, **kw: None)
    monkeypatch.setattr(loader, "get_function", lambda *a, **kw: pytest.fail("launched"))
    args = dict(q=q, k=k, v=v, o=q.clone(), lse=torch.zeros(1, 2, 70), do=q.clone())
    for name in ("q", "k", "v", "o", "do"):
        bad = dict(args, **{name: _misaligned(args[name])})
        with pytest.raises(ValueError, match=f"^{name} must start on a 16-byte boundary"):
            fa2_wgmma_bwd.backward(*bad.values())
    out = [torch.zeros_like(q) for _ in range(3)]
    out[0] = _misaligned(out[0])  # dk, dv need 4 bytes only: tests/test_bad_input.py
    with pytest.raises(ValueError, match="^out dq must start on a 16-byte boundary"):
        fa2_wgmma_bwd.backward(*args.values(), out=tuple(out))


def test_teaching_backward_flags_and_naive_saved_are_checked(monkeypatch):
    """fa2.backward(use_prefetch=0) took 0 as "not False" when picking its blocks and as off for the build (64 x 64
    without the staging, the pair the docstring measures slowest), use_prefetch="yes" failed in int(); naive's
    saved="x" was a TypeError after its three launches."""
    from kernels import fa2, loader, naive

    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(loader, "max_dynamic_smem", lambda *a: 232448)
    launched = []

    def get_function(source, name, defines=None, **kw):
        launched.append(dict(defines))
        raise RuntimeError("launch")
    monkeypatch.setattr(loader, "get_function", get_function)
    q = torch.zeros(1, 2, 70, 128, dtype=torch.float16)
    lse = torch.zeros(1, 2, 70)
    for bad in (0, 1, "yes"):
        with pytest.raises(TypeError, match=f"use_prefetch must be a bool, got {bad!r}"):
            fa2.backward(q, q, q, q, lse, q, use_prefetch=bad)
    assert launched == []
    for good, blocks in ((False, (32, 32, 0)), (np.bool_(True), (64, 64, 1)), (None, (64, 64, 1))):
        with pytest.raises(RuntimeError, match="launch"):
            fa2.backward(q, q, q, q, lse, q, use_prefetch=good)
        assert (launched[-1]["BR"], launched[-1]["BC"], launched[-1]["FA2_PREFETCH"]) == blocks
    with pytest.raises(TypeError, match=r"saved must be a dict \(the forward leaves P in saved\['P'\]\) or None"):
        naive.forward(q, q, q, saved="x")


def test_checked_configs_are_cached_without_letting_a_bad_one_through():
    """fa2_tc / v_once_tc check config= once per distinct config (the launch path is timed per call); the cache key
    tells 64 from 64.0 and 1 from True, so a config the check refuses is refused whatever was cached before."""
    from kernels import fa2_tc, v_once_tc

    good = dict(fa2_tc.CONFIGS[64])
    first = fa2_tc.defines_for(64, 0, good)
    assert fa2_tc.defines_for(64, 0, dict(good)) == first
    first["BLOCK_N"] = -1  # the caller's copy: the cache keeps its own
    assert fa2_tc.defines_for(64, 0, good)["BLOCK_N"] == good["BLOCK_N"]
    with pytest.raises(TypeError, match="must be an integer"):
        fa2_tc.defines_for(64, 0, dict(good, BLOCK_N=float(good["BLOCK_N"])))
    cfg = dict(v_once_tc.CONFIG)
    assert v_once_tc.build_config(cfg, 64) == v_once_tc.build_config(dict(cfg), 64)
    from kernels import fa2_wgmma  # its launch plans share the cache (counting.checks.checked_once)

    wg = fa2_wgmma.default_config(128, 4096)
    assert fa2_wgmma._plan(128, False, wg) is fa2_wgmma._plan(128, False, dict(wg))
    with pytest.raises(TypeError, match="must be an integer"):
        fa2_wgmma._plan(128, False, dict(wg, BLOCK_N=float(wg["BLOCK_N"])))
    with pytest.raises(TypeError, match="must be an integer"):
        v_once_tc.build_config(dict(cfg, NWARPS=True), 64)


@pytest.mark.parametrize("name,who", [("fa2_tc", "fa2_tc"), ("fa2", "teaching"), ("fa2_wgmma", "fa2_wgmma")])
def test_grid_rows_are_refused_by_the_one_check(monkeypatch, name, who):
    """B*H is a grid dimension (at most 65535): every launcher refuses past it through
    gpumodel.descriptors.check_grid_rows, the check the GPU model applies, with the same message."""
    import importlib

    _fake_cuda(monkeypatch)
    q = torch.zeros(65536, 1, 1, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match=f"B\\*H = 65536 is over the 65535 grid rows the {who} launcher uses"):
        importlib.import_module(f"kernels.{name}").forward(q, q, q)
