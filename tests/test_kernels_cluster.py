"""The cluster "multiply V once" kernel (kernels.v_once_cluster, issue 18) against the float64 oracle.

GPU tests (marked gpu; skipped without a compute capability 9.x GPU): hypothesis over odd Nq, Nk up to ~3000
(cluster sizes 1, 2 and, at d = 128, 4), Nq != Nk both ways, causal with rows that see no key, fp16/bf16,
d = 64/128, input scales that put scores up to ~1e4, every build (default and kernels.v_once_cluster.SWEEP);
a smoke launch per cluster size first; explicit long rows for clusters of 1 to 8 CTAs (default and NWG=2), the
non-portable cluster of 16 (config MAX_CLUSTER=16), cluster shapes set at launch, grouped and strided inputs,
the "auto" fallback and the clear errors. Outputs are NaN-poisoned (out=) and judged by bench.harness.compare,
the one correctness rule. CPU tests: the launcher's shared-memory layout is counting.cluster's budget, the rank
split covers every key block within the planned f slots, the builds CI compiles, candidate builds do not spill,
the CS = 16 launch configuration, bad options fail with one clear line.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from counting import cluster  # noqa: E402
from kernels import KERNELS, v_once_cluster as vc  # noqa: E402

CONFIGS = [None] + list(vc.SWEEP)  # the default build and the tuning candidates
CS16 = {"MAX_CLUSTER": 16}  # opts in to the non-portable cluster of 16 CTAs


def _hopper() -> bool:
    try:
        return vc.supported()
    except Exception:
        return False


needs_hopper = pytest.mark.skipif(not torch.cuda.is_available() or not _hopper(),
                                  reason="v_once_cluster needs a compute capability 9.x GPU (wgmma, clusters, DSMEM)")
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


# ------------------------------------------------------------------------------------------------ CPU
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_layout_is_the_cluster_budget(config):
    """The .cu's shared-memory layout (kernels.v_once_cluster.smem_bytes) is counting.cluster's budget at the
    kernel's tiles, for every build, cluster size and key count: plan() can only pick builds that fit."""
    for d in vc.HEAD_DIMS:
        top = vc.max_keys(d, config=config)
        for n_k in (1, 63, 64, 65, 1000, 1537, 3001, 5000, top):
            p = vc.cluster_plan(n_k, d, config=config)
            assert p is not None, (d, n_k)
            assert vc.smem_bytes(d, p.key_blocks_per_cta, config) == p.smem_bytes <= cluster.SMEM_PER_CTA
            assert p.cluster_size * p.keys_per_cta >= n_k and p.block_q == 64
            assert p.block_k == vc.build_config(config)["BLOCK_N"]
            if p.cluster_size > 1:  # the smallest cluster: half of it would not hold the row
                assert vc.cluster_plan(n_k, d, max_cluster=p.cluster_size // 2, config=config) is None
        assert vc.cluster_plan(top + 1, d, config=config) is None


def test_ring_deepens_into_what_the_f_slice_leaves():
    """Default: plan() sizes the cluster at 2 ring slots, then the ring takes the slots the f slice leaves (2..7)
    within the CTA's shared memory; config STAGES fixes it."""
    deeper = 0
    for d in vc.HEAD_DIMS:
        for n_k in (64, 500, 1000, 1500, 3000, 5000, 9000, vc.max_keys(d)):
            p = vc.cluster_plan(n_k, d)
            st = vc.ring_stages(d, p.key_blocks_per_cta)
            assert 2 <= st <= vc.MAX_STAGES and vc.smem_bytes(d, p.key_blocks_per_cta, None, st) <= cluster.SMEM_PER_CTA
            if st < vc.MAX_STAGES:  # one more slot would not fit
                assert vc.smem_bytes(d, p.key_blocks_per_cta, None, st + 1) > cluster.SMEM_PER_CTA
            deeper += st > 2
            assert vc.ring_stages(d, p.key_blocks_per_cta, {"STAGES": 3}) == 3
    assert deeper > 0


def test_rank_split_never_needs_more_f_slots_than_planned():
    """The kernel gives rank r of a cluster the visible key blocks [r·per, min((r+1)·per, Tc_vis)), per =
    ceil(Tc_vis / CS), Tc_vis cut at the causal diagonal of the Q block; every block goes to exactly one rank
    and per never exceeds the f slots the launcher allocates (tc_alloc = plan().key_blocks_per_cta; the kernel
    traps otherwise)."""
    for n_q, n_k, d in ((1, 5000, 64), (300, 1100, 64), (9000, 9000, 128), (77, 10700, 128), (1000, 300, 64)):
        p = vc.cluster_plan(n_k, d)
        tc_alloc, cs = p.key_blocks_per_cta, p.cluster_size
        for i in range(-(-n_q // 64)):
            for causal in (False, True):
                n_vis = max(0, min(n_k, min(64 * i + 64, n_q) + n_k - n_q)) if causal else n_k
                tc_vis = -(-n_vis // 64)
                per = -(-tc_vis // cs)
                got = [j for r in range(cs) for j in range(min(r * per, tc_vis), min(r * per + per, tc_vis))]
                assert got == list(range(tc_vis)) and per <= tc_alloc


def test_cluster_sizes_reached():
    """The long-row GPU tests below reach every built cluster size."""
    sizes = {vc.cluster_plan(n_k, d).cluster_size for n_k, d in [(s[1], s[2]) for s in LONG]}
    assert sizes == set(vc.PORTABLE_SIZES)
    big = {vc.cluster_plan(n_k, d, config=CS16).cluster_size for n_q, n_k, d, *_ in LONG16}
    assert big == {16}


def test_every_build_is_compiled_by_ci():
    builds = {(d["CS"], d["HEAD_DIM"], d["IS_BF16"], d["NWG"]) for _, _, d in vc.compile_configs()}
    assert builds == {(cs, dd, bf, 1) for cs in vc.PORTABLE_SIZES for dd in vc.HEAD_DIMS for bf in (0, 1)}
    swept = [tuple(sorted(d.items())) for _, _, d in vc.sweep_configs()]
    assert len(swept) == len(set(swept))  # a ring depth is an argument: STAGES candidates add no build
    for cfg in vc.SWEEP:
        for cs in vc.PORTABLE_SIZES:
            assert tuple(sorted(vc.defines_for(128, True, cs, cfg).items())) in swept
    assert tuple(sorted(vc.defines_for(64, False, 16, CS16).items())) in swept
    spec = KERNELS["v_once_cluster"]
    assert spec.tier == "tensor-core" and spec.variant == "v_once" and spec.arch == "sm_90a"
    assert spec.options == {"placement": ("auto", "cluster")}


@pytest.mark.parametrize("cs,config", [(8, {"NWG": 2}), (8, {"BLOCK_N": 128}), (16, CS16)], ids=str)
def test_candidate_builds_do_not_spill(cs, config):
    """The largest candidate builds (d = 128; CI compiles only the default ones) keep every register."""
    from kernels import loader

    try:
        loader.nvrtc_version()
        loader.cuda_include_dirs()
    except loader.ToolchainMissing as exc:
        pytest.skip(str(exc))
    defs = vc.defines_for(128, False, cs, config)
    res = loader.resource_usage(vc.SOURCE, vc.KERNEL, defines=defs, arch=vc.ARCH)
    assert res["spill_stores"] == res["spill_loads"] == res["local_bytes"] == 0, res


def test_bad_options_are_one_clear_line():
    with pytest.raises(ValueError, match="placement must be one of"):
        vc._resolve(100, 64, "sram")
    big = vc.max_keys(128) + 1
    with pytest.raises(ValueError, match=f"largest Nk it holds at d=128 is {vc.max_keys(128)}"):
        vc._resolve(big, 128, "cluster")
    assert vc._resolve(big, 128, "auto") is None  # auto: the spill fallback
    with pytest.raises(ValueError, match="head dims"):
        vc.defines_for(96, False, 1)
    with pytest.raises(ValueError, match="cluster size 32 not built"):
        vc.defines_for(64, False, 32)
    with pytest.raises(ValueError, match="needs config MAX_CLUSTER=16"):
        vc.defines_for(64, False, 16)
    assert vc.defines_for(64, False, 16, CS16)["CS"] == 16 and "MAX_CLUSTER" not in vc.defines_for(64, False, 16, CS16)
    with pytest.raises(ValueError, match="NWG in"):
        vc.build_config({"NWG": 3})
    with pytest.raises(ValueError, match="config BLOCK_N"):
        vc.build_config({"BLOCK_N": 96})


def test_launch_config_of_the_non_portable_cluster():
    """CS = 16 is launched with cuLaunchKernelEx and a cluster-dimension attribute (no __cluster_dims__)."""
    pytest.importorskip("cuda.bindings")
    from cuda.bindings import driver

    cfg = vc.launch_config((32, 3, 1), (256, 1, 1), 200_000, 0, 16)
    assert (cfg.gridDimX, cfg.gridDimY, cfg.blockDimX, cfg.sharedMemBytes, cfg.numAttrs) == (32, 3, 256, 200_000, 1)
    attr = cfg.attrs[0]
    assert attr.id == driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert (attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z) == (16, 1, 1)
    for d in vc.HEAD_DIMS:
        assert vc.max_keys(d, config=CS16) > 1.9 * vc.max_keys(d)


def test_forced_cluster_splits_short_rows():
    """config CLUSTER=k (a check hook) splits a row over k CTAs even where fewer hold it; never fewer than plan()."""
    from kernels.v_once_cluster import _resolve

    assert _resolve(600, 64, "cluster", {"CLUSTER": 8}).cluster_size == 8
    assert _resolve(600, 64, "cluster", {"CLUSTER": 8}).keys_per_cta == 128  # ranks 5-7 get no key block
    assert _resolve(5000, 64, "cluster", {"CLUSTER": 2}).cluster_size == 4  # the plan needs 4: not fewer
    with pytest.raises(ValueError, match="CLUSTER"):
        _resolve(600, 64, "cluster", {"CLUSTER": 3})


def test_descriptor_follows_the_plan():
    """The GPU model's descriptor (gpumodel/cluster_model.py) and the launcher pick the same cluster size from
    counting.cluster.plan; past 8 CTAs the model describes the non-portable cluster of 16 (config MAX_CLUSTER=16)."""
    from gpumodel.descriptors import describe
    from kernels import v_once_cluster as vc

    small, large = describe("v_once_cluster", 128, n_q=1024), describe("v_once_cluster", 128, n_q=9000)
    assert small.cluster_size == 1 and large.cluster_size == 8
    assert small.path == "wgmma" and small.rescale == "lazy" and small.f == "cluster"
    assert small.smem_bytes < large.smem_bytes
    for n in (1024, 5000, 9000):
        assert describe("v_once_cluster", 128, n_q=n).cluster_size == vc.cluster_plan(n, 128).cluster_size
    assert describe("v_once_cluster", 128, n_q=20000).cluster_size == 16


# ------------------------------------------------------------------------------------------------ GPU
def _inputs(b, h, n_q, n_k, d, dtype, scale, seed, h_kv=None):
    g = torch.Generator(device="cuda").manual_seed(seed)
    h_kv = h if h_kv is None else h_kv
    q = (torch.randn(b, h, n_q, d, generator=g, device="cuda") * scale).to(dtype)
    k = (torch.randn(b, h_kv, n_k, d, generator=g, device="cuda") * scale).to(dtype)
    v = torch.randn(b, h_kv, n_k, d, generator=g, device="cuda").to(dtype)
    return q, k, v


def _check(b, h, n_q, n_k, d, dtype, causal, scale, seed, placement="cluster", h_kv=None, config=None):
    from bench import harness

    q, k, v = _inputs(b, h, n_q, n_k, d, dtype, scale, seed, h_kv)
    out = (torch.full_like(q, float("nan")), torch.full((b, h, n_q), float("nan"), device="cuda"))
    o, lse = vc.forward(q, k, v, causal=causal, placement=placement, out=out, config=config)
    torch.cuda.synchronize()
    assert o.data_ptr() == out[0].data_ptr() and lse.data_ptr() == out[1].data_ptr()
    if k.shape[1] != h:  # the reference takes equal heads: expand the kv heads it reads
        k, v = k.repeat_interleave(h // k.shape[1], 1), v.repeat_interleave(h // v.shape[1], 1)
    res = harness.compare(o, lse, q.contiguous(), k, v, causal, str(dtype).replace("torch.", ""))
    assert res["ok"], f"{(b, h, n_q, n_k, d, dtype, causal, scale)} plan {vc.last_plan()}: {res}"
    return vc.last_plan()


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("n_k,d", [(64, 64), (200, 128), (2000, 64), (5000, 128), (9000, 64)], ids=str)
def test_smoke_each_cluster_size(n_k, d):
    """First on the GPU, one small launch per cluster size (1, 1, 2, 4, 8), default build, so a failure (or a
    hang: the GPU check's time limit) names the cluster size before the random tests run."""
    plan = _check(1, 1, 100, n_k, d, torch.float16, False, 1.0, 0)
    assert plan["cluster_size"] == vc.cluster_plan(n_k, d).cluster_size


shape = st.tuples(
    st.integers(1, 2),                                      # B
    st.integers(1, 3),                                      # H
    st.integers(1, 700),                                    # Nq
    st.integers(1, 3000),                                   # Nk: clusters of 1, 2 (and 4 at d = 128)
    st.sampled_from([64, 128]),                             # d
    st.sampled_from([torch.float16, torch.bfloat16]),
    st.booleans(),                                          # causal (Nq > Nk: rows that see no key)
    st.sampled_from([0.5, 1.0, 4.0, 20.0]),                 # input scale: scores up to ~1e4
    st.integers(0, 2**31 - 1),                              # seed
)


@pytest.mark.gpu
@needs_hopper
@SETTINGS
@given(s=shape, config=st.sampled_from([None, {"NWG": 2}]))  # the other candidates: test_every_tuning_candidate
def test_matches_reference(s, config):
    plan = _check(*s, config=config)
    assert plan["placement"] == "cluster"
    assert plan["cluster_size"] == vc.cluster_plan(s[3], s[4], config=config).cluster_size
    assert plan["nwg"] == vc.build_config(config)["NWG"]

# (Nq, Nk, d, causal, dtype, input scale): several Q blocks, many key blocks per CTA, every cluster size
LONG = [
    (300, 1100, 64, True, torch.float16, 1.0),     # CS 1: 18 key blocks through a 2-slot ring
    (333, 2500, 128, False, torch.bfloat16, 4.0),  # CS 2
    (300, 5000, 64, True, torch.float16, 1.0),     # CS 4
    (257, 5000, 128, False, torch.bfloat16, 20.0),  # CS 4, scores ~1e4
    (130, 9000, 128, True, torch.float16, 1.0),    # CS 8
    (200, 9000, 64, False, torch.bfloat16, 1.0),   # CS 8
    (77, 10700, 128, True, torch.bfloat16, 4.0),   # CS 8 near its largest row at d = 128
    (9000, 9000, 64, True, torch.float16, 1.0),    # CS 8, causal: Q blocks near the top leave ranks idle
]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("config", [None, {"NWG": 2}], ids=str)
@pytest.mark.parametrize("n_q,n_k,d,causal,dtype,scale", LONG, ids=lambda x: str(x))
def test_long_rows_every_cluster_size(n_q, n_k, d, causal, dtype, scale, config):
    plan = _check(1, 2, n_q, n_k, d, dtype, causal, scale, n_k, config=config)
    assert plan["cluster_size"] == vc.cluster_plan(n_k, d).cluster_size
@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("config", vc.SWEEP, ids=str)
def test_every_tuning_candidate(config, d):
    """The builds the GPU check times beside the default (two warpgroups, deeper ring, Bc = 128) on tails,
    causal rows that see no key and clusters of 1, 2 and 4."""
    for n_q, n_k, causal in ((77, 203, True), (300, 100, True), (333, 1025, False), (130, 3000, True)):
        _check(1, 2, n_q, n_k, d, torch.bfloat16, causal, 4.0, n_q, config=config)


# the non-portable cluster of 16 (config MAX_CLUSTER=16): rows no cluster of 8 holds
LONG16 = [(130, 15000, 128, True, torch.float16, 1.0), (70, 20000, 64, False, torch.bfloat16, 4.0),
          (200, 21000, 128, False, torch.float16, 1.0)]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("n_q,n_k,d,causal,dtype,scale", LONG16, ids=lambda x: str(x))
def test_non_portable_cluster_of_16(n_q, n_k, d, causal, dtype, scale):
    plan = _check(1, 2, n_q, n_k, d, dtype, causal, scale, n_k, config=CS16)
    assert plan["cluster_size"] == 16


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("n_k", [500, 2000, 4000, 9000])
def test_cluster_shape_set_at_launch(n_k):
    """RUNTIME_CLUSTER=1: the portable sizes without __cluster_dims__, launched with cuLaunchKernelEx (the path
    the cluster of 16 takes), same results."""
    plan = _check(1, 2, 129, n_k, 128, torch.float16, True, 1.0, n_k, config={"RUNTIME_CLUSTER": 1})
    assert plan["cluster_size"] == vc.cluster_plan(n_k, 128).cluster_size


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("cs,n_k,d,causal", [(2, 600, 64, False), (4, 1100, 64, True), (8, 900, 128, False),
                                             (8, 300, 64, True)], ids=str)
def test_forced_cluster_matches_reference(cs, n_k, d, causal):
    """Short rows over clusters larger than they need (the racecheck shapes): idle ranks, every reduction."""
    plan = _check(1, 2, 100, n_k, d, torch.float16, causal, 4.0, cs, config={"CLUSTER": cs})
    assert plan["cluster_size"] == cs


@pytest.mark.gpu
@needs_hopper
def test_rows_that_see_no_key():
    """Causal with Nq > Nk: the first Nq - Nk rows see no key (o = 0, lse = -inf); whole Q blocks and whole
    cluster ranks see nothing."""
    for n_q, n_k, d in ((1000, 300, 64), (700, 65, 128), (3000, 2900, 128)):
        for config in (None, {"NWG": 2}):
            _check(1, 2, n_q, n_k, d, torch.float16, True, 1.0, 7, config=config)
@pytest.mark.gpu
@needs_hopper
def test_grouped_and_strided_inputs():
    """TMA tensor maps: K/V with fewer heads (GQA) and (B, N, H, d) views read in place."""
    _check(2, 4, 257, 2999, 128, torch.float16, True, 1.0, 3, h_kv=2)
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(1, n, 4, 64, generator=g, device="cuda").to(torch.bfloat16).transpose(1, 2)
               for n in (300, 4000, 4000))
    o, lse = vc.forward(q, k, v, causal=False, placement="cluster")
    from bench import harness

    res = harness.compare(o, lse, q.contiguous(), k.contiguous(), v.contiguous(), False, "bfloat16")
    assert res["ok"] and vc.last_plan()["cluster_size"] == 4, res
@pytest.mark.gpu
@needs_hopper
def test_auto_falls_back_to_the_spill():
    n_k = vc.max_keys(128) + 100
    plan = _check(1, 1, 100, n_k, 128, torch.float16, True, 1.0, 5, placement="auto")
    assert plan["placement"] == "hbm" and plan["kernel"] == "v_once_tc"
    assert _check(1, 1, 100, 1000, 128, torch.float16, False, 1.0, 5, placement="auto")["placement"] == "cluster"
@pytest.mark.gpu
@needs_hopper
def test_errors_are_clear():
    q = torch.randn(1, 1, 16, 96, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="head dim"):
        vc.forward(q, q, q)
    q = torch.randn(1, 1, 16, 64, device="cuda", dtype=torch.float32)
    with pytest.raises(TypeError, match="dtype"):
        vc.forward(q, q, q)
    q = torch.randn(1, 1, 16, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="placement"):
        vc.forward(q, q, q, placement="sram")
    k = torch.randn(1, 1, vc.max_keys(64) + 64, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="largest Nk"):
        vc.forward(q, k, k, placement="cluster")

