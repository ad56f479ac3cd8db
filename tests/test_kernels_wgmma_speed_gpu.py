"""fa2_wgmma's builds and knobs against the float64 oracle on a Hopper GPU: every named build
(kernels.fa2_wgmma.named_builds: CONFIGS, the size rules' builds, the cp.async ones) and the knobs forward() adds
(v9-v13, stop 24) on the builds they act in, on hypothesis shapes (odd Nq/Nk, tails, Nq != Nk, causal with rows that
see no key, fp16/bf16, d = 64/96/128/256, scores up to ~1e4, where the rescale threshold must hold), on long key loops
(every K/V ring slot reused many times), on 1 and 3 persistent CTAs, on strided/GQA inputs, and on scores built so that
the row max creeps up block after block (the stale-max path of RESCALE_THRESHOLD) or jumps (its rescale path).
Poisoned outputs; the rule of tests/test_kernels_tc.py. (The speed, size and tile candidates of issue 14 and the
knobs only they used: commit 0bb604a.)"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kernels import fa2_wgmma  # noqa: E402
from tests.test_kernels_layouts import _check as _check_layout  # noqa: E402
from tests.test_kernels_tc import TOL, _check  # noqa: E402

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
NAMED = [(d, name) for d in fa2_wgmma.HEAD_DIMS for name in fa2_wgmma.named_builds(d)]

needs_hopper = pytest.mark.skipif(not torch.cuda.is_available() or not fa2_wgmma.supported(),
                                  reason="fa2_wgmma needs a compute capability 9.x GPU (wgmma)")


def _with_config(cfg, grid=None):
    """forward with this build (and, for a persistent one, `grid` persistent CTAs: a launch key)."""
    cfg = dict(cfg, **(grid or {}))

    def fn(q, k, v, **kw):
        return fa2_wgmma.forward(q, k, v, config=cfg, **kw)
    return fn


shape = st.tuples(
    st.integers(1, 2), st.integers(1, 3), st.integers(1, 700), st.integers(1, 700),  # B, H, Nq, Nk
    st.sampled_from([torch.float16, torch.bfloat16]), st.booleans(),                 # dtype, causal
    st.sampled_from([0.5, 1.0, 4.0, 20.0]), st.integers(0, 2**31 - 1),              # input scale, seed
)


@needs_hopper
@pytest.mark.parametrize("d,name", NAMED)
@SETTINGS
@given(s=shape)
def test_named_build_matches_reference(d, name, s):
    b, h, n_q, n_k, dtype, causal, scale, seed = s
    _check(_with_config(fa2_wgmma.named_build(d, name)), b, h, n_q, n_k, d, dtype, causal, scale, seed)


@needs_hopper
@pytest.mark.parametrize("d,name", NAMED)
def test_named_build_long_key_loop(d, name):
    """Nk = 4100 (every ring slot refilled many times), several Q blocks and more CTAs than one per SM holds; a
    persistent build also on 3 CTAs, each looping over many tiles, some of which see no key."""
    cfg = fa2_wgmma.named_build(d, name)
    for causal, dtype in ((False, torch.float16), (True, torch.bfloat16)):
        _check(_with_config(cfg), 2, 3, 700, 4100, d, dtype, causal, 4.0, d)
    if cfg.get("PERSISTENT"):
        fn = _with_config(cfg, {"GRID": 3})
        _check(fn, 2, 3, 700, 1500, d, torch.float16, True, 4.0, d + 1)
        _check(fn, 2, 3, 900, 300, d, torch.bfloat16, True, 1.0, d + 2)  # whole Q blocks see no key


@needs_hopper
@pytest.mark.parametrize("d,name", [(d, n) for d, n in NAMED if fa2_wgmma.named_build(d, n).get("TMA")])
def test_named_build_strided_gqa(d, name):
    _check_layout(2, 4, 2, 300, 1000, d, torch.bfloat16, True, 4.0, "bnhd", d, config=fa2_wgmma.named_build(d, name))


@needs_hopper
def test_persistent_causal_with_empty_tiles():
    """Causal, Nq > Nk: whole Q blocks see no key (T = 0 tiles: Q still loaded, epilogue writes o = 0 and
    lse = -inf), mixed with long tiles, on 1, 2 and 5 CTAs and on the full grid."""
    for grid in (1, 2, 5, None):
        fn = _with_config(dict(fa2_wgmma.CONFIGS[64], PERSISTENT=2), {"GRID": grid} if grid else None)
        _check(fn, 2, 3, 900, 300, 64, torch.float16, True, 1.0, grid or 0)


def _nk_for_sections(d: int, hs: int) -> int:
    """An Nk whose K and V per head put hs heads in each causal section (fa2_wgmma_tma.cu tile_coords, 16 MB)."""
    return 256 * (fa2_wgmma.CAUSAL_SECTION_KB // d // hs)


@needs_hopper
@pytest.mark.parametrize("ragged_first", [0, 1])
def test_persistent_causal_sections(ragged_first):
    """The persistent causal order in sections of heads (fa2_wgmma_tma.cu tile_coords) with the early Q hand-back
    (O_TILE): sections of three heads with a partial section (B*H = 8 at d = 128, Nk = 10752: 5 MB of K and V per
    head), the partial one last or first (SECTION_RAGGED_FIRST); Nq > Nk in one section, so whole Q blocks see no key;
    3 CTAs and the full grid; and grouped-query (B, N, H, d) views, whose kv head is shared by two query heads."""
    base = dict(fa2_wgmma.CONFIGS[128], BLOCK_N=128, PERSISTENT=2, O_TILE=1, SECTION_RAGGED_FIRST=ragged_first)
    for grid in (3, None):
        fn = _with_config(base, {"GRID": grid} if grid else None)
        _check(fn, 2, 4, 300, _nk_for_sections(128, 3), 128, torch.float16, True, 4.0, 1 + ragged_first)
        _check(fn, 2, 3, 900, 700, 128, torch.bfloat16, True, 4.0, 3 + ragged_first)
    _check_layout(2, 4, 2, 300, 1000, 128, torch.bfloat16, True, 4.0, "bnhd", 128, config=base)


@needs_hopper
def test_dynamic_counter_resets_itself():
    """PERSISTENT=2 hands out tiles from an atomic counter that each launch's last fetch zeroes (v6e): back-to-back
    calls of different tile counts on one stream (no sync between them) must each start from tile 0, so every
    output is written every time, and the counter is 0 after them."""
    cfg = dict(fa2_wgmma.CONFIGS[128], PERSISTENT=2, GRID=4)
    outs = []
    for n in (700, 130, 1100, 700):
        gen = torch.Generator(device="cuda").manual_seed(n)
        q = torch.randn(1, 2, n, 128, device="cuda", dtype=torch.float16, generator=gen)
        o = torch.full_like(q, float("nan"))
        lse = torch.full(q.shape[:3], float("nan"), device="cuda")
        fa2_wgmma.forward(q, q, q, config=cfg, out=(o, lse))
        outs.append((o, lse))
    torch.cuda.synchronize()
    assert all(bool(torch.isfinite(o).all()) and bool(torch.isfinite(lse).all()) for o, lse in outs)
    assert torch.equal(outs[0][0], outs[3][0])
    counter = fa2_wgmma._tile_counter(torch.device("cuda", torch.cuda.current_device()))
    assert int(counter.item()) == 0


@needs_hopper
def test_dynamic_counter_under_graph_capture():
    """Under CUDA-graph capture the launcher gives each captured call a fresh zeroed counter (kernels/fa2_wgmma.py
    _tile_counter; eager calls share one per stream): replays of the graph, with eager calls between them, each
    write every tile, the same bits as an eager call."""
    cfg = dict(fa2_wgmma.CONFIGS[128], PERSISTENT=2, GRID=4)
    gen = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(1, 2, 700, 128, device="cuda", dtype=torch.float16, generator=gen)
    ref, _ = fa2_wgmma.forward(q, q, q, config=cfg)
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch.cuda.graph asks
        fa2_wgmma.forward(q, q, q, config=cfg, out=(o, lse))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fa2_wgmma.forward(q, q, q, config=cfg, out=(o, lse))
    for _ in range(3):
        o.fill_(float("nan"))
        graph.replay()
        fa2_wgmma.forward(q, q, q, config=cfg)  # an eager call on the default stream between replays
        torch.cuda.synchronize()
        assert torch.equal(o, ref)


def _ramp(n_k, d, dtype, log2_span, reverse):
    """q = e0, k_n = c_n e0 with c_n a ramp: scores (times scale*log2 e) span log2_span along the keys.
    The kernel visits key blocks last to first, so reverse=True makes the row max grow with every block
    (by less than 8 in log2 units per block when log2_span / blocks < 8: the stale path), False makes the
    first block hold it."""
    import math

    scale_log2 = d ** -0.5 * 1.4426950408889634
    q = torch.zeros(1, 1, 64, d, device="cuda")
    q[..., 0] = 1.0
    c = torch.linspace(0, log2_span / scale_log2, n_k, device="cuda")
    if reverse:
        c = c.flip(0)
    k = torch.zeros(1, 1, n_k, d, device="cuda")
    k[0, 0, :, 0] = c
    v = torch.randn(1, 1, n_k, d, device="cuda", generator=torch.Generator(device="cuda").manual_seed(n_k))
    assert math.isfinite(float(c.max()))
    return q.to(dtype), k.to(dtype), v.to(dtype)


@needs_hopper
def test_rescale_threshold_across_persistent_tiles():
    """forward()'s d = 128 build for N <= 4k (persistent, the rescale threshold): one CTA runs three heads' tiles in a
    row, the max jumping, flat and creeping, so a stale max or l carried from one tile into the next shows."""
    from variants.reference import attention_reference

    parts = [_ramp(1500, 128, torch.bfloat16, span, rev) for span, rev in ((400.0, True), (3.0, False), (60.0, True))]
    q, k, v = (torch.cat([p[i] for p in parts], dim=1) for i in range(3))
    cfg = dict(fa2_wgmma.named_build(128, "bc128-dyn-oqt-r"), GRID=1)
    assert fa2_wgmma.choose_config(128, 1500, True) == fa2_wgmma.named_build(128, "bc128-dyn-oqt-r")
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device="cuda")
    fa2_wgmma.forward(q, k, v, config=cfg, out=(o, lse))
    torch.cuda.synchronize()
    ro, rl = attention_reference(q, k, v, causal=False)
    for h in range(3):
        rel = float((o[:, h].double() - ro[:, h]).norm() / ro[:, h].norm())
        assert rel <= TOL[torch.bfloat16], f"head {h}: relative error {rel:.2e}"
    err = (lse.double() - rl).abs()
    assert (err <= 2e-3 + 1e-5 * rl.abs()).all(), f"lse error {float(err.max()):.2e}"


# the builds with the rescale threshold, or l in O's extra column (ROW_SUM_MMA: l rescaled with O), at d = 64 and 128
RESCALED = [(d, n) for d, n in NAMED if d in (64, 128) and {"RESCALE_THRESHOLD", "ROW_SUM_MMA"} & set(
    fa2_wgmma.named_build(d, n))]


@needs_hopper
@pytest.mark.parametrize("d,name", RESCALED)
@pytest.mark.parametrize("log2_span", [3.0, 60.0, 400.0])
@pytest.mark.parametrize("reverse", [False, True])
def test_rescale_paths(d, name, log2_span, reverse):
    """Row max creeping (span 60 over ~30 blocks: 2 per block, under the threshold), jumping (400: 13 per
    block, over it) or flat (3); bf16 inputs keep the ramp's values exact enough to matter."""
    from variants.reference import attention_reference

    q, k, v = _ramp(4000, d, torch.bfloat16, log2_span, reverse)
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device="cuda")
    _with_config(fa2_wgmma.named_build(d, name))(q, k, v, causal=False, out=(o, lse))
    torch.cuda.synchronize()
    ro, rl = attention_reference(q, k, v, causal=False)
    rel = float((o.double() - ro).norm() / ro.norm())
    assert rel <= TOL[torch.bfloat16], f"relative error {rel:.2e}"
    err = (lse.double() - rl).abs()
    assert (err <= 2e-3 + 1e-5 * rl.abs()).all(), f"lse error {float(err.max()):.2e}"


# The knobs of v9-v13, each exact in the result, each checked on the builds it acts in: one registry (KNOB_SETS) of
# (knob, builds) that three tests iterate over: hypothesis shapes, fixed shapes across tiles (long key loops that
# refill every ring slot many times, idle warpgroups, causal Q blocks with no key, 1 and 3 persistent CTAs), and
# strided GQA views.
# v9 DESC_STEP (each operand's wgmma descriptor built once per product and stepped by the k-slice offset) and v10
# WG_SKIP (idle warpgroups) are DEFAULT_KNOBS: every build forward()'s rules run (SIZE_RULES and CONFIGS, each d).
DESC = fa2_wgmma.default_builds()
assert all(c["DESC_STEP"] == 1 and c["WG_SKIP"] == 1 for _, c in DESC)
# v10 WG_SKIP: a consumer warpgroup whose 64 rows all lie past Nq walks the barriers and computes nothing; the builds
# with two or three warpgroups (their hypothesis shapes are DESC's, which carry the knob)
SKIP = [(d, c) for d, c in fa2_wgmma.default_builds() if c.get("NWG", 2) >= 2]
assert SKIP and all(c["WG_SKIP"] == 1 and c.get("NWG", 2) >= 2 for _, c in SKIP)
# v11 WG_CAUSAL_SKIP: on causal rows a warpgroup walks the key blocks of its tile wholly past its own last row
# (warpgroup 0 of Br = 128 with Bc = 64, or of Br = 192); SKIP's builds (DEFAULT_KNOBS carry it). Shapes where each
# build walks (tests/test_kernels_wgmma_speed.py checks that with kernels.fa2_wgmma.causal_walk_steps): Nk - Nq not a
# multiple of Bc, long key loops, Nq > Nk (warpgroup 0 with no key at all)
CSKIP = SKIP
assert CSKIP and all(c["WG_CAUSAL_SKIP"] == 1 for _, c in CSKIP)
CSKIP_SHAPES = [(700, 988), (512, 512), (1000, 4100), (900, 300)]
# v12 TURN_CARRY: the ping-pong turn runs on from tile to tile (warpgroup 1 hands it back as it issues its last P V; one
# arrival made before the tile loop, taken by warpgroup 0 before it exits); every forward() build with ping-pong.
# Warpgroup 1 idle in the last Q block (its walk hands the turn back too); tiles with no key take no turn
CARRY = [(d, dict(c, TURN_CARRY=1)) for d, c in fa2_wgmma.default_builds()
         if c.get("NWG", 2) == 2 and c.get("PINGPONG", 1)]
assert CARRY


# v13 O_DIRECT=2: O written from the accumulator registers to global memory in 16-byte stores (after a transpose in each
# quad), the Q tile handed back after the tile's last S (d = 256's persistent builds, which have no smem for O_TILE).
# forward()'s two d = 256 builds, one of them again with TURN_CARRY added (forward() does not add it), CONFIGS made
# persistent with it at d = 64 (ROW_SUM_MMA's l in O's extra column, no ping-pong), 96 (O padded to 128 columns) and
# 128, and in place of O_TILE + O_TMA in d = 96 / 128's rule builds (the A/B's candidates); tiles with no key hand Q back
# with no S read
def _odirect(d, name=None, **extra):
    c = dict(dict(PERSISTENT=2, O_DIRECT=2), **(fa2_wgmma.named_build(d, name) if name else fa2_wgmma.CONFIGS[d]))
    c = dict(c, **extra)
    return d, {**c, **fa2_wgmma.default_knobs(c), **extra}


ODIRECT = [_odirect(256, "bc64-dyn-od2"), _odirect(256, "dyn-od2"), _odirect(256, "bc64-dyn-od2", TURN_CARRY=1),
           _odirect(64), _odirect(96), _odirect(128),
           _odirect(96, "dyn-oqt-r", O_TILE=0, O_TMA=0, O_DIRECT=2, TURN_CARRY=1),
           _odirect(128, "bc128-dyn-oqt-r", O_TILE=0, O_TMA=0, O_DIRECT=2, TURN_CARRY=1)]
# and every build forward() runs with O_DIRECT: d = 64's causal rule builds since v13 (the 3-CTA one-warpgroup builds and
# Br = 192, O_DIRECT=2 in place of O_TILE; results/fwd_wgmma_o_direct_store_d64), with four K/V slots since stop 21
ODIRECT += [(d, c) for d, c in fa2_wgmma.default_builds() if c.get("O_DIRECT") and (d, c) not in ODIRECT]
assert all(c in [x for _, x in ODIRECT] for d, c in fa2_wgmma.default_builds() if c.get("O_DIRECT"))


def _idle_rows(cfg) -> list[int]:
    """Nq values whose last Q block has idle warpgroups: one of each count the build can leave idle."""
    br = 64 * cfg.get("NWG", 2)
    return [2 * br + 64 * w - 50 for w in range(1, cfg.get("NWG", 2))]  # w working warpgroups in the last block


F16, B16 = torch.float16, torch.bfloat16


def _across_tiles(knob: str, cfg: dict, d: int) -> list[tuple]:
    """(grid, B, H, Nq, Nk, dtype, causal, scale, seed) of the knob's fixed shapes."""
    persistent = bool(cfg.get("PERSISTENT"))
    if knob == "desc_step":
        grid = {"GRID": 3} if persistent else {}
        return [(grid, 2, 3, 700, 4100, F16, False, 4.0, 1), (grid, 2, 3, 700, 4100, B16, True, 4.0, 2)]
    if knob == "wg_skip":
        return [(g, *shp) for g in [{}] + ([{"GRID": 3}] if persistent else []) for n_q in _idle_rows(cfg)
                for shp in ((2, 3, n_q, 4100, F16, False, 4.0, n_q), (1, 3, n_q, 2 * n_q + 7, B16, True, 4.0, n_q + 1),
                            (2, 2, n_q, 90, B16, True, 1.0, n_q + 2))]  # the last: Q blocks with no key
    if knob == "wg_causal_skip":
        return [(g, 2, 3, n_q, n_k, (F16, B16)[i % 2], True, 4.0, n_q + i)
                for g in [{}] + ([{"GRID": 3}] if persistent else []) for i, (n_q, n_k) in enumerate(CSKIP_SHAPES)]
    if knob == "turn_carry":
        n_q = _idle_rows(cfg)[0]  # warpgroup 1 idle in each head's last Q block
        return [(g, *shp) for g in [{}] + ([{"GRID": 1}, {"GRID": 3}] if persistent else [])
                for shp in ((2, 3, n_q, 4100, F16, False, 4.0, n_q), (1, 3, n_q, 2 * n_q + 7, B16, True, 4.0, n_q + 1),
                            (2, 3, 900, 300, B16, True, 4.0, 7), (2, 2, 512, 512, F16, True, 4.0, 8))]
    if knob == "o_direct":
        return [(g, *shp) for g in ({}, {"GRID": 1}, {"GRID": 3})
                for shp in [(2, 3, n_q, 4100, F16, False, 4.0, n_q) for n_q in _idle_rows(cfg)]
                + [(1, 3, 333, 2 * 333 + 7, B16, True, 4.0, 5),
                   (2, 3, 900, 300, B16, True, 4.0, 7),   # Q blocks with no key: Q handed back with no S
                   (1, 2, 900, 300, F16, True, 4.0, 9),   # and in fp16 (ROW_SUM_MMA's l = 0 rows at d = 64)
                   (2, 2, 512, 512, F16, True, 4.0, 8)]]
    if knob == "ragged_first":  # B*H heads in sections of two (3, 9, 5 heads: one left over, first), of three (8: two
        # left over; 6: none), of one section at Nk = 1100 (the plain order); Nq > Nk (rows with no key) there too
        two, three = _nk_for_sections(d, 2), _nk_for_sections(d, 3)
        return [(g, *shp) for g in ({}, {"GRID": 1}, {"GRID": 3})
                for shp in [(1, 3, 333, two, F16, True, 4.0, 1), (3, 3, 200, two, B16, True, 4.0, 2),
                            (1, 5, 130, two, B16, True, 4.0, 3), (4, 2, 200, three, F16, True, 4.0, 4),
                            (2, 3, 130, three, B16, True, 4.0, 6), (1, 3, 1300, 1100, F16, True, 4.0, 5)]]
    raise KeyError(knob)


# stop 24 SECTION_RAGGED_FIRST: the persistent causal order's section of the B*H % hs heads left over runs first. Every
# persistent build forward() runs (it has the knob), at lengths whose K and V put two or three heads in a section, so
# the fixed shapes below leave a ragged section
RAGGED = [(d, c) for d, c in fa2_wgmma.default_builds() if c.get("PERSISTENT")]
assert RAGGED and all(c["SECTION_RAGGED_FIRST"] == 1 for _, c in RAGGED)


# knob -> its builds; which of the three tests each set runs (wg_skip's hypothesis shapes are desc_step's, on the same
# builds; desc_step's strided views are the layouts tests' of forward())
KNOB_SETS = {"desc_step": DESC, "wg_skip": SKIP, "wg_causal_skip": CSKIP, "turn_carry": CARRY, "o_direct": ODIRECT,
             "ragged_first": RAGGED}
CAUSAL_ONLY = {"wg_causal_skip", "ragged_first"}


def _knob_params(knobs) -> list:
    return [pytest.param(k, d, c, id=f"{k}-d{d}-{i}") for k in knobs for i, (d, c) in enumerate(KNOB_SETS[k])]


@needs_hopper
@pytest.mark.parametrize("knob,d,cfg", _knob_params([k for k in KNOB_SETS if k != "wg_skip"]))
@SETTINGS
@given(s=st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 700), st.integers(1, 700),
                   st.sampled_from([torch.float16, torch.bfloat16]), st.booleans(), st.integers(0, 2**31 - 1)))
def test_knob_matches_reference(knob, d, cfg, s):
    b, h, n_q, n_k, dtype, causal, seed = s
    _check(_with_config(cfg), b, h, n_q, n_k, d, dtype, causal or knob in CAUSAL_ONLY, 4.0, seed)


@needs_hopper
@pytest.mark.parametrize("knob,d,cfg", _knob_params(KNOB_SETS))
def test_knob_across_tiles(knob, d, cfg):
    for grid, b, h, n_q, n_k, dtype, causal, scale, seed in _across_tiles(knob, cfg, d):
        _check(_with_config(cfg, grid), b, h, n_q, n_k, d, dtype, causal, scale, seed)


@needs_hopper
@pytest.mark.parametrize("knob,d,cfg", _knob_params([k for k in KNOB_SETS if k != "desc_step"]))
def test_knob_strided_gqa(knob, d, cfg):
    if not cfg.get("TMA"):
        pytest.skip("the cp.async build reads contiguous (B, H, N, d) only")  # forward() copies for it
    n_q, n_k = (_idle_rows(cfg)[-1], 1000) if knob == "wg_skip" else (700, 988)
    _check_layout(2, 4, 2, n_q, n_k, d, torch.bfloat16, True, 4.0, "bnhd", d, config=cfg)
