"""CPU-side checks of v4 of the Hopper backward (kernels/fa2_wgmma_bwd_ws.py, kernels/cuda/fa2_wgmma_bwd_ws.cu; the
lab's A/B builds in lab/bwd_ws.py): every build compiles for sm_90a with NVRTC, ptxas keeps the wgmma pipeline, the
consumer (MMA) warpgroups' code stores nothing to local memory, shared memory fits a CTA; kernels.fa2_wgmma_bwd.backward
picks v4 at d = 64, 128 (deterministic=False, no config=, a layout TMA describes) and v3 otherwise, names what v4 does
not take (impl="ws") before any GPU work, and its launch plan (grid, block, smem, argument order, tensor-map boxes) is
the one the kernel reads."""
from __future__ import annotations

import shutil

import pytest
import torch

from kernels import fa2_wgmma_bwd, fa2_wgmma_bwd_ws, loader
from lab import bwd_ws  # the lab's A/B builds (ALTERNATIVES) and the SASS split by role (consumer_spills)
from tests.backward_helpers import LaunchRecorder
from tests.tiers import one_per
from tests.toolchain import needs_nvrtc


def _has_nvdisasm() -> bool:
    try:
        import nvidia
        from pathlib import Path

        return bool(shutil.which("nvdisasm")) or any(
            any(Path(b).glob("cu*/bin/nvdisasm")) for b in nvidia.__path__)
    except ImportError:
        return bool(shutil.which("nvdisasm"))


SHIPPED = [(k, d) for _, k, d in fa2_wgmma_bwd_ws.compile_configs()]  # what kernels.fa2_wgmma_bwd.backward launches
LAB = [(k, d) for _, k, d in bwd_ws.compile_configs()  # the lab's A/B alternatives (lab/bwd_ws.py ALTERNATIVES)
       if k == fa2_wgmma_bwd_ws.KERNEL and (k, d) not in SHIPPED]
MAIN = SHIPPED + LAB  # the shipped defaults first: the default tier compiles those
ORDER1 = [(k, d) for _, k, d in fa2_wgmma_bwd_ws.order_configs()]  # ORDER=1 / LPT=1 builds (lab/bwd_order_ab.py)
IDS = ([("shipped-" if i < len(SHIPPED) else "lab-") + "-".join(f"{k}={v}" for k, v in d.items())
        for i, (_, d) in enumerate(MAIN)] + ["order-" + "-".join(f"{k}={v}" for k, v in d.items()) for _, d in ORDER1])
# a plain pytest compiles one build per (d, ORDER, LPT); the slow tier every build (the alternatives, bf16)
BUILDS = one_per(MAIN + ORDER1, key=lambda b: tuple(b[1].get(k, 0) for k in ("HEAD_DIM", "ORDER", "LPT")), ids=IDS)


@needs_nvrtc
@pytest.mark.parametrize("build", BUILDS)
def test_main_kernel_compiles_within_budget(build):
    kernel, defines = build
    res = loader.resource_usage(fa2_wgmma_bwd_ws.SOURCE, kernel, defines=defines, arch=fa2_wgmma_bwd_ws.ARCH)
    # __launch_bounds__(384, 1): 65536 / 384 rounded down to 8; setmaxnreg moves registers between the roles
    assert 0 < res["registers"] <= 168, res
    assert not res["wgmma_serialized"], f"ptxas serialised the wgmma pipeline: {res['wgmma_serialized']}"
    assert max(res["spill_stores"], res["spill_loads"]) <= fa2_wgmma_bwd_ws.spill_budget(defines), res
    smem = fa2_wgmma_bwd_ws.smem_bytes(defines)
    assert smem <= 227 * 1024, f"{smem} B of shared memory is over the H100/H200 227 KB per CTA"


@needs_nvrtc
@pytest.mark.skipif(not _has_nvdisasm(), reason="nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
@pytest.mark.parametrize("build", BUILDS)
def test_consumer_path_stores_nothing_to_local_memory(build):
    """The MMA warpgroups' code (after their setmaxnreg.inc) has no STL; it reloads at most a few words a step that
    were computed before the role split. ptxas' spill total (test above) is mostly the 24-register producer's."""
    _, defines = build
    sites = bwd_ws.consumer_spills(defines)
    assert sites["consumer"][0] == 0, sites
    assert sites["consumer"][1] <= 4, sites
    assert sites["seen"] == {"consumer", "producer"}, sites  # both setmaxnreg markers: the roles were told apart


@needs_nvrtc
def test_shipped_pre_and_dq_kernels_compile():
    for src, kernel, defines in bwd_ws.compile_configs():
        if kernel == bwd_ws.KERNEL:
            continue
        assert src == str(fa2_wgmma_bwd.SOURCE)
        assert defines == fa2_wgmma_bwd.ws_companion_defines(defines["HEAD_DIM"], bool(defines["IS_BF16"]))
        assert defines["DQ_BULK"] == 1 and defines["NWG"] == bwd_ws.NWG
        assert defines["BR"] == bwd_ws.CONFIGS[defines["HEAD_DIM"]]["BR"]  # the accumulator's fragment order
        assert loader.resource_usage(src, kernel, defines=defines, arch=bwd_ws.ARCH)["registers"] > 0


def test_every_build_is_listed():
    """Default and alternative builds, d = 64 and 128, both dtypes; the shipped backward's compile_configs() lists the
    default ones (what it launches), its sweep_configs() none (v3's)."""
    got = {(d["HEAD_DIM"], d["IS_BF16"], tuple(sorted(d.items()))) for _, d in MAIN}
    assert {(d, b) for d, b, _ in got} == {(64, 0), (64, 1), (128, 0), (128, 1)}
    assert len(MAIN) == len(got) == 2 * sum(1 + len(bwd_ws.ALTERNATIVES[d]) for d in bwd_ws.HEAD_DIMS)
    assert len(SHIPPED) == 4 and all((k, d) in [(k2, d2) for _, k2, d2 in bwd_ws.compile_configs()] for k, d in SHIPPED)
    strip = [{k: v for k, v in d.items() if k not in ("ORDER", "LPT")} for _, d in ORDER1]
    assert strip == [fa2_wgmma_bwd_ws.defines_for(d["HEAD_DIM"], d["IS_BF16"]) for d in strip]
    shipped = [(s, k, d) for s, k, d in fa2_wgmma_bwd.compile_configs() if s == str(fa2_wgmma_bwd_ws.SOURCE)]
    assert shipped == fa2_wgmma_bwd_ws.compile_configs() and len(shipped) == 4
    assert all(k == fa2_wgmma_bwd_ws.KERNEL and (k, d) in MAIN for _, k, d in shipped)
    assert not [c for c in fa2_wgmma_bwd.sweep_configs() if c[0] != str(fa2_wgmma_bwd.SOURCE)]
    v3 = {(k, tuple(sorted(d.items()))) for _, k, d in fa2_wgmma_bwd.compile_configs()}
    for _, k, d in bwd_ws.compile_configs():  # v4's pre and dq_bulk launches are v3's default builds
        if k != fa2_wgmma_bwd_ws.KERNEL:
            assert (k, tuple(sorted(d.items()))) in v3
    assert sorted((d["HEAD_DIM"], d["IS_BF16"], d.get("ORDER", 0), d.get("LPT", 0)) for _, d in ORDER1) == sorted(
        (hd, bf, o, lpt) for hd in (64, 128) for bf in (0, 1) for o, lpt in ((1, 0), (0, 1), (1, 1)))


def _t(*shape, dtype=torch.float16):
    return torch.zeros(*shape, dtype=dtype)


GOOD = dict(q=_t(1, 2, 33, 64), k=_t(1, 2, 17, 64), v=_t(1, 2, 17, 64), o=_t(1, 2, 33, 64),
            lse=_t(1, 2, 33, dtype=torch.float32), do=_t(1, 2, 33, 64))


@pytest.mark.parametrize("change,kw,error,match", [
    (dict(q=_t(1, 2, 33, 96), o=_t(1, 2, 33, 96), do=_t(1, 2, 33, 96), k=_t(1, 2, 17, 96), v=_t(1, 2, 17, 96)), {},
     ValueError, r"d=96 unsupported; the v4 backward \(impl='ws'\) takes d in \[64, 128\]"),
    (dict(q=_t(1, 2, 33, 256), o=_t(1, 2, 33, 256), do=_t(1, 2, 33, 256), k=_t(1, 2, 17, 256),
          v=_t(1, 2, 17, 256)), {}, ValueError, "d=256 unsupported"),
    ({}, dict(deterministic=True), ValueError, "no deterministic mode"),
    (dict(k=_t(1, 3, 17, 64), v=_t(1, 3, 17, 64)), {}, ValueError, "H_kv=3 heads, which must divide"),
    (dict(q=_t(1, 2, 33, 68)[..., :64]), {}, ValueError, "q's row stride 68"),
    (dict(q=_t(1, 2, 33, 64, dtype=torch.float32)), {}, TypeError, "supports float16, bfloat16"),
    (dict(lse=_t(1, 2, 32, dtype=torch.float32)), {}, ValueError, "lse must be float32 of shape"),
    ({}, {}, ValueError, "q is on cpu"),
])
def test_bad_input_is_named(change, kw, error, match):
    args = dict(GOOD, **change)
    with pytest.raises(error, match=match):
        fa2_wgmma_bwd.backward(args["q"], args["k"], args["v"], args["o"], args["lse"], args["do"], impl="ws", **kw)


def test_broadcast_kv_is_refused_before_launch(monkeypatch):
    """A stride-0 (expanded) head dimension passes v3's checks but no TMA tensor map: with impl="ws" named, no launch
    (the default rule sends it to v3: test_dispatch_falls_back_to_v3_on_layouts_tma_cannot_map)."""
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(loader, "get_function", lambda *a, **kw: pytest.fail("launched"))
    k, v = (_t(1, 1, 17, 64).expand(1, 2, 17, 64) for _ in range(2))
    with pytest.raises(ValueError, match="stride 0 .*broadcast"):
        bwd_ws.backward(GOOD["q"], k, v, GOOD["o"], GOOD["lse"], GOOD["do"])  # impl="ws"
    with pytest.raises(ValueError, match="impl='fast'"):
        fa2_wgmma_bwd.backward(*GOOD.values(), impl="fast")


def test_defines_refuse_what_the_kernel_does_not_build():
    defines_for = fa2_wgmma_bwd_ws.defines_for
    with pytest.raises(ValueError, match="head dims"):
        defines_for(96, False)
    with pytest.raises(ValueError, match="unknown config keys"):
        defines_for(128, False, dict(STAGS=3))
    with pytest.raises(ValueError, match="ORDER=2"):
        defines_for(128, False, dict(ORDER=2))
    with pytest.raises(ValueError, match="LPT=3"):
        defines_for(128, False, dict(LPT=3))
    with pytest.raises(ValueError, match="dQ conversion kernel"):
        defines_for(64, False, dict(BR=64))
    with pytest.raises(ValueError, match="shared memory"):  # 3 Q/dO slots + two dS^T and two dQ buffers at d = 128
        defines_for(128, False, dict(STAGES=3, DS_BUFS=2, DQ_BUFS=2))
    d128 = defines_for(128, True)
    assert defines_for(128, True, dict(PRODUCER_REGS=32, L2_HINT=1))["PRODUCER_REGS"] == 32
    assert d128["IS_BF16"] == 1 and fa2_wgmma_bwd_ws.smem_bytes(d128) == 231528  # K, V 64K + Q, dO 64K + dS 32K + dQ 64K + ...


@pytest.mark.parametrize("config,error,match", [
    (dict(STAGES=1), ValueError, "STAGES=1: 2..3"),
    (dict(STAGES=4), ValueError, "STAGES=4: 2..3"),
    (dict(DS_BUFS=0), ValueError, "DS_BUFS=0: 1 or 2"),
    (dict(DQ_BUFS=3), ValueError, "DQ_BUFS=3: 1 or 2"),
    (dict(PRODUCER_REGS=28), ValueError, "PRODUCER_REGS=28: a multiple of 8"),
    (dict(PRODUCER_REGS=16), ValueError, "PRODUCER_REGS=16: a multiple of 8, at least 24"),
    (dict(PRODUCER_REGS=176), ValueError, "at most 168"),
    (dict(MERGED=2), ValueError, "MERGED=2: MERGED is a switch"),
    (dict(L2_HINT=-1), ValueError, "L2_HINT=-1: L2_HINT is a switch"),
    (dict(MERGED=True), TypeError, "MERGED=True must be an integer"),
    (dict(STAGES=2.0), TypeError, "STAGES=2.0 must be an integer"),
    ([("STAGES", 2)], TypeError, "config must be a dict"),
])
def test_v4_knobs_are_checked_as_the_cu_asserts(config, error, match):
    """defines_for mirrors fa2_wgmma_bwd_ws.cu's static_asserts (and refuses bools, floats, non-dicts)."""
    with pytest.raises(error, match=match):
        fa2_wgmma_bwd_ws.defines_for(128, False, config)


@pytest.mark.parametrize("config,impl,error,match", [
    (dict(STAGES=4), "ws", ValueError, "STAGES=4: 2..3"),
    (dict(STAGES=2, MERGED=3), "v4", ValueError, "MERGED=3"),
    (dict(DS_BUFS=1), None, ValueError, "config DS_BUFS is v4's knob: pass impl='ws'"),
    (dict(NWG=2, BR=64, L2_HINT=1), None, ValueError, "config L2_HINT is v4's knob: pass impl='ws'"),
    (dict(NWG=2, BR=64, PRODUCER_REGS=32), "v3", ValueError, "config PRODUCER_REGS is v4's knob: pass impl='ws'"),
    (dict(NWG=2, BR=64, STAGES=7), "v3", ValueError, "STAGES=7: 2..3"),
])
def test_configs_are_checked_before_the_gpu_is_asked_for(monkeypatch, config, impl, error, match):
    """A bad config= (v4's or v3's) is named on CPU tensors that pass as CUDA, before loader.require_hopper."""
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(loader, "require_hopper", lambda *a, **kw: pytest.fail("asked for the GPU first"))
    monkeypatch.setattr(loader, "get_function", lambda *a, **kw: pytest.fail("launched"))
    args = dict(GOOD, q=_t(1, 2, 33, 128), o=_t(1, 2, 33, 128), do=_t(1, 2, 33, 128), k=_t(1, 2, 17, 128),
                v=_t(1, 2, 17, 128))
    with pytest.raises(error, match=match):
        fa2_wgmma_bwd.backward(*args.values(), config=config, impl=impl)


def test_v4_is_another_name_for_ws(monkeypatch):
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    q, k, v, do = GOOD["q"], GOOD["k"], GOOD["v"], GOOD["do"]
    assert fa2_wgmma_bwd.main_kernel(q, k, v, do, impl="v4") == fa2_wgmma_bwd.main_kernel(q, k, v, do, impl="ws") == "ws"
    with pytest.raises(ValueError, match=r"impl='v4'\) has no deterministic mode|no deterministic mode"):
        fa2_wgmma_bwd.main_kernel(q, k, v, do, impl="v4", deterministic=True)
    with pytest.raises(ValueError, match="'v3' or 'ws' \\(also named 'v4'\\)"):
        fa2_wgmma_bwd.main_kernel(q, k, v, do, impl="v5")


@pytest.mark.parametrize("value", [(64, 96), (256,), [64, 128], (32,)])
def test_ws_head_dims_is_checked_where_read(monkeypatch, value):
    monkeypatch.setattr(fa2_wgmma_bwd, "WS_HEAD_DIMS", value)
    with pytest.raises(ValueError, match=r"WS_HEAD_DIMS=.*a tuple of head dims in \(64, 128\)"):
        fa2_wgmma_bwd.main_kernel(GOOD["q"], GOOD["k"], GOOD["v"], GOOD["do"])
    with pytest.raises(ValueError, match="WS_HEAD_DIMS"):
        fa2_wgmma_bwd.compile_configs()


def test_ws_companion_defines(monkeypatch):
    """The v3 build whose pre and dq_bulk kernels v4 launches shares its accumulator layout; a drift raises."""
    for d in fa2_wgmma_bwd_ws.HEAD_DIMS:
        for bf16 in (False, True):
            defs = fa2_wgmma_bwd.ws_companion_defines(d, bf16)
            assert defs == fa2_wgmma_bwd.defines_for(d, bf16)
            assert (defs["DQ_BULK"], defs["NWG"], defs["BR"]) == (1, 2, fa2_wgmma_bwd_ws.CONFIGS[d]["BR"])
    monkeypatch.setitem(fa2_wgmma_bwd_ws.CONFIGS, 128, dict(fa2_wgmma_bwd_ws.CONFIGS[128], BR=128))
    with pytest.raises(ValueError, match="not the dQ accumulator layout"):
        fa2_wgmma_bwd.ws_companion_defines(128, False)


def _as_gpu(monkeypatch, maps=None):
    """CPU tensors pass as CUDA on a Hopper GPU; tensor maps become their names (recorded in maps); launches are
    recorded. Returns the recorder."""
    from kernels import tma

    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(loader, "require_hopper", lambda *a, **kw: None)
    monkeypatch.setattr(tma, "tensor_map", lambda t, rows, name="": (maps if maps is not None else []).append(
        (name, rows)) or name)
    rec = LaunchRecorder()
    monkeypatch.setattr(loader, "get_function", rec)
    return rec


@pytest.mark.parametrize("d,group,causal", [(64, 4, True), (128, 1, False), (128, 8, True)])
def test_launch_plan_on_strided_gqa(monkeypatch, d, group, causal):
    """The shipped backward's plan at d = 64, 128 (its default rule: v4) on CPU tensors that pass as CUDA: v3's pre
    kernel over B*H query heads, the main kernel on (Tc, B*H_kv) with 384 threads and smem_bytes, four tensor maps (q,
    k, v, do) with boxes Br / Bc rows, then the scalars and dK/dV strides in the .cu's order, and v3's dq_bulk
    conversion over (Nq_pad / Br, B*H)."""
    maps = []
    rec = _as_gpu(monkeypatch, maps)
    b, h_kv, n_q, n_k = 2, 2, 70, 200
    h = h_kv * group
    q, o, do = (_t(b, n_q, h, d).transpose(1, 2) for _ in range(3))
    k, v = (_t(b, n_k, h_kv, d).transpose(1, 2) for _ in range(2))
    dq, dk, dv = fa2_wgmma_bwd.backward(q, k, v, o, _t(b, h, n_q, dtype=torch.float32), do, causal=causal)
    assert (dq.stride(), dk.stride(), dv.stride()) == (q.stride(), k.stride(), v.stride())
    pre, main, conv = rec.launches
    assert (pre["name"], conv["name"]) == (fa2_wgmma_bwd.KERNEL_PRE, fa2_wgmma_bwd.KERNEL_DQ_BULK)
    assert pre["source"] == conv["source"] == str(fa2_wgmma_bwd.SOURCE)
    assert pre["defines"] == conv["defines"] == fa2_wgmma_bwd.defines_for(d, False)
    defs = fa2_wgmma_bwd_ws.defines_for(d, False)
    br, n_pad = defs["BR"], 128
    assert main["name"] == fa2_wgmma_bwd_ws.KERNEL and main["defines"] == defs
    assert main["source"] == str(fa2_wgmma_bwd_ws.SOURCE)
    assert main["grid"] == (-(-n_k // 128), b * h_kv, 1) and main["block"] == (384, 1, 1)
    assert main["shared_mem"] == fa2_wgmma_bwd_ws.smem_bytes(defs)
    assert maps == [("q", br), ("k", 128), ("v", 128), ("do", br)]
    a = main["args"]
    assert a[:4] == ("q", "k", "v", "do")
    l2, dd, acc = a[4:7]
    assert l2.shape == dd.shape == (b * h, n_pad) and acc.shape == (b * h, n_pad, d)
    assert a[7] is dk and a[8] is dv
    assert a[9:12] == (n_q, n_k, n_pad)
    assert a[12] == pytest.approx(d ** -0.5 * 1.4426950408889634) and a[13] == pytest.approx(d ** -0.5)
    assert a[14:17] == (int(causal), h, group)
    assert tuple(int(x) for x in a[17:]) == (*dk.stride()[:3], *dv.stride()[:3])
    assert pre["grid"] == (n_pad // 64, b * h, 1) and conv["grid"] == (n_pad // br, b * h, 1)
    assert conv["args"][0] is acc and conv["args"][1] is dq
    assert tuple(int(s) for s in conv["args"][-3:]) == dq.stride()[:3]


def _main_launch(rec) -> tuple[str, str, dict]:
    """(source file name, kernel, defines) of the one main-kernel launch among the recorded ones."""
    mains = [x for x in rec.launches if x["name"] in (fa2_wgmma_bwd.KERNEL, fa2_wgmma_bwd_ws.KERNEL)]
    assert len(mains) == 1, rec.launches
    return mains[0]["source"].rsplit("/", 1)[-1], mains[0]["name"], mains[0]["defines"]


V3 = ("fa2_wgmma_bwd.cu", fa2_wgmma_bwd.KERNEL)
WS = ("fa2_wgmma_bwd_ws.cu", fa2_wgmma_bwd_ws.KERNEL)


@pytest.mark.parametrize("d,kw,want", [
    (64, {}, WS), (128, {}, WS), (64, dict(impl="ws"), WS), (128, dict(impl="ws", config=dict(ORDER=1)), WS),
    (96, {}, V3), (64, dict(deterministic=True), V3), (128, dict(deterministic=True), V3),
    (64, dict(config=dict(NWG=2, BR=128, DQ_BULK=1)), V3), (128, dict(config=dict(NWG=2, BR=64, STAGES=3)), V3),
    (64, dict(impl="v3"), V3), (128, dict(impl="v3"), V3),
])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_dispatch_picks_v4_at_64_and_128_only_by_default(monkeypatch, d, kw, want, dtype):
    """Which main kernel launches (no GPU: recorded): v4 at d = 64, 128 when deterministic=False and no config=
    (or impl="ws"); v3 at d = 96, deterministic=True, any config= (the lab's sweeps) and impl="v3". v4's build is its
    default (or config='s), v3's the one defines_for names."""
    rec = _as_gpu(monkeypatch)
    b, h, n_q, n_k = 1, 4, 70, 130
    q, o, do = (_t(b, h, n_q, d, dtype=dtype) for _ in range(3))
    k, v = (_t(b, 2, n_k, d, dtype=dtype) for _ in range(2))
    lse = _t(b, h, n_q, dtype=torch.float32)
    fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=True, **kw)
    src, name, defs = _main_launch(rec)
    assert (src, name) == want
    bf16 = dtype == torch.bfloat16
    if want == WS:
        assert defs == fa2_wgmma_bwd_ws.defines_for(d, bf16, kw.get("config"))
        assert fa2_wgmma_bwd.main_kernel(q, k, v, do, **kw) == "ws"
    else:
        assert defs == fa2_wgmma_bwd.defines_for(d, bf16, kw.get("config"), kw.get("deterministic", False))
        assert fa2_wgmma_bwd.main_kernel(q, k, v, do, **kw) == "v3"


def test_dispatch_switch_and_out(monkeypatch):
    """WS_HEAD_DIMS emptied (a lab A/B's switch) sends d = 64, 128 to v3; out=(dq, dk, dv) is where v4 writes (the
    conversion's dq, the main kernel's dk, dv) and what it returns."""
    rec = _as_gpu(monkeypatch)
    q, o, do = (_t(1, 2, 33, 128) for _ in range(3))
    k, v = _t(1, 2, 17, 128), _t(1, 2, 17, 128)
    out = (_t(1, 2, 33, 128), _t(1, 2, 17, 128), _t(1, 2, 17, 128))
    got = fa2_wgmma_bwd.backward(q, k, v, o, _t(1, 2, 33, dtype=torch.float32), do, out=out)
    assert all(g is t for g, t in zip(got, out))
    assert _main_launch(rec)[:2] == WS
    main = [x for x in rec.launches if x["name"] == fa2_wgmma_bwd_ws.KERNEL][0]
    assert main["args"][7] is out[1] and main["args"][8] is out[2] and rec.launches[-1]["args"][1] is out[0]
    monkeypatch.setattr(fa2_wgmma_bwd, "WS_HEAD_DIMS", ())
    rec.launches.clear()
    fa2_wgmma_bwd.backward(q, k, v, o, _t(1, 2, 33, dtype=torch.float32), do, out=out)
    assert _main_launch(rec)[:2] == V3


def _strided(shape, strides, dtype=torch.float16):
    """A view of a zero buffer with these element strides (stride 0 allowed), starting at the buffer's base."""
    size = 1 + sum((n - 1) * st for n, st in zip(shape, strides))
    return torch.zeros(size, dtype=dtype).as_strided(shape, strides)


@pytest.mark.parametrize("which,t", [
    ("k", _t(1, 1, 17, 64).expand(1, 2, 17, 64)),                    # GQA by expand: head stride 0
    ("k", _strided((1, 2, 17, 64), (0, 0, 64, 1))),                  # every head and batch the same rows
    ("v", _strided((2, 2, 17, 64), (0, 17 * 64, 64, 1))),           # batch stride 0
    ("q", _strided((2, 2, 33, 64), (0, 33 * 64, 64, 1))),           # q broadcast over the batch
    ("do", _strided((2, 2, 33, 64), (2 * 33 * 64, 0, 64, 1))),      # dO broadcast over heads
])
def test_dispatch_falls_back_to_v3_on_layouts_tma_cannot_map(monkeypatch, which, t):
    """An input v3 takes (strides multiples of 8 elements, 0 included) whose tensor map TMA refuses (a stride-0
    broadcast) runs v3 under the default rule, as before v4 was the default: no error, v3's main kernel, no map."""
    maps = []
    rec = _as_gpu(monkeypatch, maps)
    b = t.shape[0]
    args = dict(q=_t(b, 2, 33, 64), k=_t(b, 2, 17, 64), v=_t(b, 2, 17, 64), o=_t(b, 2, 33, 64),
                lse=_t(b, 2, 33, dtype=torch.float32), do=_t(b, 2, 33, 64))
    args[which] = t
    assert isinstance(fa2_wgmma_bwd_ws.layout_error(args["q"], args["k"], args["v"], args["do"]), ValueError)
    grads = fa2_wgmma_bwd.backward(*args.values(), causal=True)
    assert _main_launch(rec)[:2] == V3 and maps == []
    for g, like in zip(grads, (args["q"], args["k"], args["v"])):  # allocated in the input's layout, d innermost
        offsets = sum(torch.arange(n).view([-1 if i == j else 1 for j in range(4)]) * st
                      for i, (n, st) in enumerate(zip(g.shape, g.stride())))
        assert g.shape == like.shape and g.stride(3) == 1 and offsets.unique().numel() == g.numel(), g.stride()
    with pytest.raises(ValueError, match="stride 0"):  # forced, it is named before any launch
        fa2_wgmma_bwd.backward(*args.values(), impl="ws")


def test_layout_rules_are_v3s_but_for_broadcasts():
    """Every (B, H, N, d) stride pattern v3's checks take at d = 64 -- multiples of 8 elements, positive or 0, in any
    order, with size-1 dims' strides arbitrary -- is one TMA maps (layout_error None) unless a used stride is 0: the
    fallback is for broadcasts only, so v4 runs wherever it ran as the lab kernel."""
    import itertools

    shape = (2, 3, 5, 64)
    for strides in itertools.product((0, 64, 8 * 64, 24 * 64, 5 * 64 * 3 + 8), repeat=3):
        st = (*strides, 1)
        v3_ok = all(x % 8 == 0 for x in st[:3])
        if not v3_ok:
            continue
        err = fa2_wgmma_bwd_ws.layout_error(*(_strided(shape, st) for _ in range(4)))
        assert (err is None) == (0 not in strides), (st, err)
    one = _strided((1, 1, 1, 64), (3, 5, 7, 1))  # size-1 dims: any stride
    assert fa2_wgmma_bwd_ws.layout_error(one, one, one, one) is None


@pytest.mark.parametrize("causal,n_q,n_k,group", [(False, 13, 9, 1), (True, 13, 9, 2), (True, 7, 11, 4)])
def test_ab_reference_is_the_tests_reference(causal, n_q, n_k, group):
    """lab/bwd_ws_ab.py's float64 reference (exact and rounded) is tests/test_kernels_bwd_gpu.py's grouped one."""
    from lab import bwd_ws_ab
    from variants.reference import backward_reference

    g = torch.Generator().manual_seed(n_q + group)
    q, do = (torch.randn(2, 2 * group, n_q, 16, generator=g) for _ in range(2))
    k, v = (torch.randn(2, 2, n_k, 16, generator=g) * 2 for _ in range(2))
    for round_to in (None, torch.bfloat16):
        got = bwd_ws_ab.reference(q, k, v, do, causal, round_to)
        want = backward_reference(q, k, v, do, causal=causal, round_to=round_to)
        for a, b in zip(got, want):
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_ab_plan_and_table():
    """The A/B precompiles every v4 build it times and v3's and the forward's builds beside them; its table puts
    each contender's TFLOP/s and the ratios in one line per cell (FAIL / skip where a contender has none)."""
    from lab import bwd_ws_ab

    jobs = bwd_ws_ab.builds([64, 128], ["fp16", "bf16"], [2048])
    keys = {(str(s), tuple(sorted(d.items()))) for s, d, _ in jobs}
    for src, _, d in bwd_ws.compile_configs():
        assert (str(src), tuple(sorted(d.items()))) in keys
    assert any("fa2_wgmma_tma" in s or "fa2_wgmma.cu" in s for s, _ in keys)  # the forward that makes o, lse
    cell = dict(dtype="fp16", d=128, n=2048, causal=True)
    for v3 in ("v3", "shipped"):  # new runs name v3 "v3"; results/bwd_ws_v4's files "shipped": both read as v3
        rows = [dict(cell, contender="cudnn", tflops=400.0), dict(cell, contender=v3, tflops=300.0),
                dict(cell, contender="v4", tflops=360.0), dict(cell, contender="flash", ok=False),
                dict(cell, n=4096, contender="v4", skipped="budget")]
        text = bwd_ws_ab.table(rows, [v3, "v4", "cudnn", "flash"])
        assert text.splitlines()[0].split()[4:] == ["v3", "v4", "cudnn", "flash", "v3/cuDNN", "v4/cuDNN", "v4/v3"]
        line = [x for x in text.splitlines() if " 2048 " in x][0]
        assert "300.0" in line and "360.0" in line and "FAIL" in line
        assert line.split()[-3:] == ["0.750", "0.900", "1.200"]
        assert "skip" in [x for x in text.splitlines() if " 4096 " in x][0]


def _fake_kernels(monkeypatch, broken=None):
    """The A/B's kernels replaced by the float64 oracle on the CPU: the forward's o, lse, the backwards' gradients
    (rounded to the input dtype as a kernel's are), SDPA by torch's own on float32; broken: a v4 that drops dK."""
    from kernels import fa2_wgmma
    from lab import bwd_ws_ab
    from variants.reference import attention_reference

    monkeypatch.setattr(bwd_ws_ab, "DEVICE", "cpu")

    def forward(q, k, v, causal=False):
        rep = q.shape[1] // k.shape[1]
        o, lse = attention_reference(q.double(), k.double().repeat_interleave(rep, 1),
                                     v.double().repeat_interleave(rep, 1), causal=causal)
        return o.to(q.dtype), lse.float()

    def backward(q, k, v, o, lse, do, causal=False, config=None, out=None, **kw):
        grads = bwd_ws_ab.reference(q, k, v, do, causal, q.dtype)
        out = out or tuple(torch.empty_like(t) for t in (q, k, v))
        for dst, g in zip(out, grads):
            dst.copy_(g)
        if broken:
            out[1].zero_()
        return out

    def sdpa(backend, q, k, v, causal, **kw):
        return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                                is_causal=causal).to(q.dtype)

    monkeypatch.setattr(fa2_wgmma, "forward", forward)
    monkeypatch.setattr(bwd_ws, "backward", backward)
    monkeypatch.setattr(fa2_wgmma_bwd, "backward", lambda *a, **kw: backward(*a, **{**kw, "out": None}) if not broken
                        else bwd_ws_ab.reference(a[0], a[1], a[2], a[5], kw.get("causal", False), a[0].dtype))
    monkeypatch.setattr(bwd_ws_ab.harness, "sdpa", sdpa)
    monkeypatch.setattr(bwd_ws_ab.harness, "time_fn", lambda fn, sets, **kw: dict(median_ms=2.0))


def test_ab_glue_on_the_cpu(monkeypatch):
    """lab/bwd_ws_ab.py's correctness gate and one timing cell run end to end with the kernels replaced by the
    oracle: every check passes, every contender is checked against cuDNN's gradients and timed, TFLOP/s from
    the harness' FLOPs; a v4 that loses dK fails the gate."""
    from lab import bwd_ws_ab

    _fake_kernels(monkeypatch)
    monkeypatch.setattr(bwd_ws_ab, "CHECKS", [c for c in bwd_ws_ab.CHECKS if c[3] * c[4] < 200 * 400][:3])
    checks = bwd_ws_ab.correctness()
    assert checks and all(r["ok"] for r in checks), checks
    monkeypatch.setattr(bwd_ws_ab, "TOKENS", 256)
    monkeypatch.setattr(bwd_ws_ab, "HIDDEN", 128)
    rows = []
    contenders = [("cudnn", None), ("v3", None), ("v4", None), ("flash", None)]
    bwd_ws_ab.run_cell("bf16", 64, 128, True, contenders, float("inf"), rows)
    assert [r["contender"] for r in rows] == ["cudnn", "v3", "v4", "flash"]
    assert all(r["ok"] and r["median_ms"] == 2.0 for r in rows), rows
    assert rows[2]["tflops"] == pytest.approx(2.5 * bwd_ws_ab.harness.flops(2, 2, 128, 128, 64, True) / 2.0 / 1e9)
    assert max(rows[2]["rel_err_vs_cudnn"]) < bwd_ws_ab.TOL_CUDNN["bf16"]
    monkeypatch.undo()
    _fake_kernels(monkeypatch, broken=True)
    monkeypatch.setattr(bwd_ws_ab, "CHECKS", bwd_ws_ab.CHECKS[:1])
    assert not any(r["ok"] for r in bwd_ws_ab.correctness())
