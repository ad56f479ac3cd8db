"""FlashAttention-2 forward with Hopper wgmma (kernels/cuda/fa2_wgmma*.cu, sm_90a): fp16/bf16 in, fp32 acc.

    o, lse = forward(q, k, v, causal=False, scale=None)

Same contract as kernels.fa2_tc (shapes, dtypes, bottom-right causal, lse, out=); needs a compute
capability 9.0 GPU (H100/H200): wgmma exists only in the sm_90a instruction set. fa2_tc is the
portable mma.sync kernel (sm_80 and newer); this module is the Hopper path, two kernels:
  cuda/fa2_wgmma.cu      wgmma, cp.async by every thread, one barrier per step: the readable step from fa2_tc
                         (config=named_build(d, "cp.async"), d = 64 and 128);
  cuda/fa2_wgmma_tma.cu  wgmma + a TMA producer warpgroup + an mbarrier ring + ping-ponging consumers (TMA=1):
                         every build forward() runs (CONFIGS, SIZE_RULES).

Layouts (TMA builds, every default): q (B, H, Nq, d), k and v (B, H_kv, Nk, d) as views with any strides and
a unit last one -- a (B, N, H, d) tensor's .transpose(1, 2) is read in place, no copy -- and grouped-query
attention, H_kv dividing H (query head h reads kv head h // (H / H_kv)). TMA needs the address and the
strides 16-byte aligned; otherwise the error names the stride (.contiguous() is the copy that fixes it).
o is (B, H, Nq, d) contiguous and lse (B, H, Nq) float32, whatever the inputs' strides. The cp.async
builds take contiguous, equal-head inputs. Head dims 64, 96, 128, 256 (96 and 256: TMA builds only).
Why each build runs where it does, and the knobs tried and removed: docs/hopper-fa2-history.md.
"""
from __future__ import annotations

from pathlib import Path

from counting import checks
from counting.checks import checked_once  # torch-free: the launch plan's cache
from counting.checks import check_grid_rows
from counting.tiling import warpgroup_steps
from kernels import fa2_tc, layouts, loader
from kernels.fa2_wgmma_bwd import backward  # noqa: F401  (FA2 Alg. 2: cuda/fa2_wgmma_bwd.cu, fa2_wgmma_bwd_ws.cu)
from kernels.tma import tensor_map

SOURCE = Path(__file__).resolve().parent / "cuda" / "fa2_wgmma.cu"
KERNEL = "fa2_wgmma_fwd"
SOURCE_TMA = Path(__file__).resolve().parent / "cuda" / "fa2_wgmma_tma.cu"
KERNEL_TMA = "fa2_wgmma_tma_fwd"
HEAD_DIMS = (64, 96, 128, 256)
CP_ASYNC_HEAD_DIMS = (64, 128)  # fa2_wgmma.cu (TMA=0): whole 64-column panels, d <= 128
MAX_HEAD_DIM = max(HEAD_DIMS)  # kernels.KernelSpec.supports_head_dim reads it (its default is 128)
ARCH = "sm_90a"
CAUSAL_SECTION_KB = 16384  # fa2_wgmma_tma.cu's causal section (tests/test_kernels_wgmma_speed.py reads it there)

# Every compile-time knob a config may set (defines_for refuses others: a misspelt knob must not time the baseline
# under a new name). Both kernels: BLOCK_N (Bc), NWG (warpgroups; Br = 64 NWG), STAGES (K/V ring slots), MIN_BLOCKS
# (CTAs per SM the register cap aims at).
KNOBS = {
    "TMA": "1: fa2_wgmma_tma.cu (producer warpgroup, TMA, mbarrier ring); 0: fa2_wgmma.cu (cp.async)",
    "BLOCK_N": "Bc, keys per block", "NWG": "consumer warpgroups, Br = 64 NWG", "STAGES": "K/V ring slots",
    "MIN_BLOCKS": "CTAs per SM the register cap aims at",
    "OVERLAP": "cp.async: the softmax of S_j runs under P V_{j+1} (0: waits for both products)",
    "PINGPONG": "two consumer warpgroups take turns issuing their products (FA3)",
    "PRODUCER_REGS": "registers the producer keeps (setmaxnreg); the consumers get what it gives back",
    "PV_N": "d = 96: the P V product's N, 128 pads it to two whole swizzle panels",
    "RESCALE_THRESHOLD": "O and l rescaled only when a row max grows past 2^T in P (FA4; v3a)",
    "ROW_SUM_MMA": "d = 64, fp16: l from the tensor core, P V over [V | ones] (v5a)",
    "PERSISTENT": "2: SMs x MIN_BLOCKS CTAs take tiles from an atomic counter, causal longest first (v3c, v6)",
    "O_TILE": "persistent: O staged in its own tile, the next Q loads under this tile's end (v6b)",
    "O_TMA": "O_TILE: each warpgroup stores its rows of O by TMA (v6d)",
    "O_DIRECT": "2: persistent, O from registers in 16-byte stores, the next Q loads early (v13)",
    "DESC_STEP": "wgmma descriptors built once per product, stepped per k-slice (v9)",
    "WG_SKIP": "a warpgroup whose rows all lie past Nq walks the barriers, computes nothing (v10)",
    "WG_CAUSAL_SKIP": "causal: a warpgroup walks the key blocks past its own last row (v11)",
    "TURN_CARRY": "ping-pong: the turn runs on from tile to tile (v12)",
    "SECTION_RAGGED_FIRST": "persistent causal: the section of leftover heads runs first (stop 24)",
}
LAUNCH_KEYS = {"GRID"}  # not a define: the persistent CTAs to launch (default SMs x MIN_BLOCKS; tests set it small)
# Knobs only experiments used, removed in issue 40 (each one's description and measurements:
# docs/hopper-fa2-history.md; the last tree with them is commit 0bb604a). defines_for refuses them by that name.
REMOVED_KNOBS = ("QK_AHEAD", "EXP2_POLY", "EXP2_POLY_DEG", "MAX_TREE", "HALF_DIAG", "Q_SLOTS", "WAIT_HINT",
                 "CAUSAL_SECTION_KB", "CONSUMER_REGS", "CTA_TRACE")
# Of them, those the committed results ran (forward()'s d = 128 builds carried MAX_TREE and HALF_DIAG in stop 22; the
# persistent builds timed before v6, CAUSAL_SECTION_KB=0; A/B variants the rest), and the removed values of two knobs
# (described as the value kept, 2: the descriptor tells them apart no more than the model did): describe() still
# prices those rows as before, told of what the model states of each (the half-width diagonal step, the section size,
# a second Q tile's smem); nothing else. defines_for() refuses them.
DESCRIBED_ONLY = ("MAX_TREE", "HALF_DIAG", "CAUSAL_SECTION_KB", "Q_SLOTS", "WAIT_HINT")
REMOVED_VALUES = {"PERSISTENT": 1, "O_DIRECT": 1}

# The builds forward() runs. CONFIGS[d]: one tile per CTA ("base"); the rest by the names their A/Bs gave them.
CONFIGS = {
    64: dict(TMA=1, BLOCK_N=128, NWG=2, PINGPONG=0, RESCALE_THRESHOLD=8, ROW_SUM_MMA=1),
    96: dict(TMA=1, BLOCK_N=128, NWG=2, PV_N=128),
    128: dict(TMA=1, BLOCK_N=176, NWG=2),
    256: dict(TMA=1, BLOCK_N=80, NWG=2, PRODUCER_REGS=24, RESCALE_THRESHOLD=8),
}
_BR192 = dict(TMA=1, BLOCK_N=128, NWG=3, PINGPONG=0, PRODUCER_REGS=32, RESCALE_THRESHOLD=8, ROW_SUM_MMA=1,
              PERSISTENT=2)
_SMALL3 = dict(TMA=1, NWG=1, MIN_BLOCKS=3, PINGPONG=0, PRODUCER_REGS=24, RESCALE_THRESHOLD=8, PERSISTENT=2, O_TILE=0,
               O_DIRECT=2)
BUILDS = {
    64: {"small-tma3-bc64-dyn-od2-s4": dict(_SMALL3, BLOCK_N=64, STAGES=4),  # 1 warpgroup x 3 CTAs/SM, 4 K/V slots
         "small-tma3-dyn-od2": dict(_SMALL3, BLOCK_N=96),
         "br192-rs-dyn-od2": dict(_BR192, O_TILE=0, O_DIRECT=2),  # Br = 192: three consumer warpgroups
         "br192-rs-dyn-oqt-s4": dict(_BR192, O_TILE=1, O_TMA=1, STAGES=4),
         "br192-rs-dyn-oq": dict(_BR192, O_TILE=1),
         # the cp.async kernel: Br = 128 as the TMA default, and the fastest of its sweep (3 CTAs/SM)
         "cp.async": dict(BLOCK_N=128, NWG=2), "cp.async-small": dict(BLOCK_N=128, NWG=1, MIN_BLOCKS=3)},
    96: {"dyn-oqt-r": dict(CONFIGS[96], PERSISTENT=2, O_TILE=1, O_TMA=1, RESCALE_THRESHOLD=8)},
    128: {"bc128-dyn-oqt-r": dict(TMA=1, BLOCK_N=128, NWG=2, PERSISTENT=2, O_TILE=1, O_TMA=1, RESCALE_THRESHOLD=8),
          "rescale": dict(CONFIGS[128], RESCALE_THRESHOLD=8),
          "cp.async": dict(BLOCK_N=128, NWG=2), "cp.async-small": dict(BLOCK_N=96, NWG=1, MIN_BLOCKS=2)},
    256: {"bc64-dyn-od2": dict(CONFIGS[256], BLOCK_N=64, PERSISTENT=2, O_DIRECT=2),
          "dyn-od2": dict(CONFIGS[256], PERSISTENT=2, O_DIRECT=2)},
}
# forward()'s choice: per d, (largest Nk or None for any, build name, "causal" for causal calls only or None for
# both); the first entry that matches wins, CONFIGS[d] where none does. A cp.async build (no TMA key) matches only
# contiguous inputs with equal head counts.
SIZE_RULES = {
    64: [(896, "small-tma3-bc64-dyn-od2-s4", "causal"), (2048, "small-tma3-dyn-od2", "causal"),
         (None, "br192-rs-dyn-od2", "causal"), (2048, "br192-rs-dyn-oqt-s4", None), (None, "br192-rs-dyn-oq", None)],
    96: [(4096, "dyn-oqt-r", None)],
    128: [(4096, "bc128-dyn-oqt-r", None), (10240, "bc128-dyn-oqt-r", "causal"), (None, "rescale", None)],
    256: [(2048, "bc64-dyn-od2", "causal"), (None, "dyn-od2", "causal"), (512, "bc64-dyn-od2", None),
          (None, "dyn-od2", None)],
}
# The knobs forward() adds to the build it picks, exact and measured faster or level where they act: DESC_STEP (v9),
# WG_SKIP (v10) and WG_CAUSAL_SKIP (v11) in every build; TURN_CARRY (v12) where two warpgroups ping-pong and O_TILE
# lets the next tile start early; SECTION_RAGGED_FIRST (stop 24) in every persistent build.
DEFAULT_KNOBS = {"DESC_STEP": 1, "WG_SKIP": 1, "WG_CAUSAL_SKIP": 1}


def default_knobs(cfg: dict) -> dict:
    pingpong = cfg.get("NWG", 2) == 2 and cfg.get("PINGPONG", 1)
    return dict(DEFAULT_KNOBS, **({"TURN_CARRY": 1} if pingpong and cfg.get("O_TILE") else {}),
                **({"SECTION_RAGGED_FIRST": 1} if cfg.get("PERSISTENT") else {}))


def choose_config(d: int, n_k: int, plain: bool, rules: dict | None = None, causal: bool = False) -> dict | None:
    """The SIZE_RULES build for d, Nk and causal (None: CONFIGS[d]); plain: contiguous q, k, v with equal heads."""
    for max_nk, name, only in (SIZE_RULES if rules is None else rules).get(d, ()):
        cfg = BUILDS[d][name]
        if ((max_nk is None or n_k <= max_nk) and (cfg.get("TMA") or plain)
                and (only is None or (only == "causal") == bool(causal))):
            return cfg
    return None


def default_config(d: int, n_k: int | None, plain: bool = True, causal: bool = False) -> dict | None:
    """The build forward() runs when given no config: SIZE_RULES' for this Nk (or CONFIGS[d]), with default_knobs;
    None for a head dim it does not take (defines_for then says which it does)."""
    if d not in CONFIGS:
        return None
    cfg = (choose_config(d, n_k, plain, causal=causal) if n_k is not None else None) or CONFIGS[d]
    return dict(cfg, **default_knobs(cfg))


def with_knobs(d: int, n_k: int, causal: bool, knobs: dict) -> dict:
    """forward()'s build for this call (contiguous equal-head inputs) with these knobs, and the knobs forward() adds to
    the build they make unless named: what an A/B's "default+KNOB=V" entry runs (lab/ab_wgmma_speed.py) and
    `fa-traffic predict --knobs` prices."""
    _refuse_removed(knobs)
    cfg = dict(choose_config(d, n_k, True, causal=causal) or CONFIGS[d], **knobs)
    gone = [e for e in knob_errors(cfg) if e.split("=")[0] in REMOVED_VALUES]  # describe() would price them
    if gone:
        raise ValueError(f"fa2_wgmma: {'; '.join(gone)}")
    return {**cfg, **default_knobs(cfg), **knobs}


def named_builds(d: int) -> dict:
    """{name: config} of the builds at d that have a name: "base" (CONFIGS[d]) and BUILDS[d]."""
    return {"base": CONFIGS[d], **BUILDS.get(d, {})} if d in CONFIGS else {}


def named_build(d: int, name: str) -> dict:
    builds = named_builds(d)
    if name not in builds:
        raise KeyError(f"fa2_wgmma: no build named {name!r} at d={d}: {', '.join(builds)} (the A/B candidates of "
                       "issue 14 are at commit 0bb604a)")
    return builds[name]


def default_builds() -> list[tuple[int, dict]]:
    """(d, config) of every build forward() can pick itself: each distinct SIZE_RULES entry, then CONFIGS[d], all with
    default_knobs (the builds the compile and GPU tests run)."""
    rules = {repr(BUILDS[d][name]): (d, BUILDS[d][name]) for d, entries in SIZE_RULES.items() for _, name, _ in entries}
    return [(d, dict(c, **default_knobs(c))) for d, c in list(rules.values()) + list(CONFIGS.items())]


def _refuse_removed(config: dict) -> None:
    gone = [k for k in config if k in REMOVED_KNOBS]
    if gone:
        raise ValueError(f"fa2_wgmma: {', '.join(gone)}: removed with the experiments that used it (the last tree with "
                         "it: commit 0bb604a; docs/hopper-fa2-history.md)")


def _check_head_dim(d: int) -> None:
    if d not in HEAD_DIMS:
        raise ValueError(f"fa2_wgmma supports head dims {HEAD_DIMS}, got d={d}")


def defines_for(d: int, is_bf16: bool, config: dict | None = None) -> dict:
    _check_head_dim(d)
    if config is not None:  # a dict of known integer knobs (counting.checks.knob_config): not a dict was an
        # AttributeError, 64.0 or True a define of another kernel, NWG='2' a TypeError from a comparison
        if isinstance(config, dict):
            _refuse_removed(config)
        config = checks.knob_config("fa2_wgmma", config, set(KNOBS) | LAUNCH_KEYS, example=CONFIGS[d])
        if config.get("GRID", 1) < 1:
            raise ValueError(f"fa2_wgmma: GRID={config['GRID']}: the persistent CTAs to launch, at least 1")
    cfg = {k: v for k, v in (CONFIGS[d] if config is None else config).items() if k not in LAUNCH_KEYS}
    if not cfg.get("TMA") and d not in CP_ASYNC_HEAD_DIMS:
        raise ValueError(f"fa2_wgmma: d={d} needs a TMA build (TMA=1); the cp.async build takes d in "
                         f"{CP_ASYNC_HEAD_DIMS}")
    if "PV_N" in cfg and cfg["PV_N"] not in (d, padded_d(d)):
        raise ValueError(f"fa2_wgmma: PV_N={cfg['PV_N']} must be d={d} or {padded_d(d)}")
    if cfg.get("ROW_SUM_MMA") and not (cfg.get("TMA") and d == 64):
        raise ValueError(f"fa2_wgmma: ROW_SUM_MMA is a TMA build at d = 64 only (got d={d}, "
                         f"TMA={cfg.get('TMA', 0)})")
    if cfg.get("ROW_SUM_MMA") and is_bf16:
        # bf16 keeps the fp32 row sum: l from bf16-rounded P (2^-9) moves lse by up to ~4e-3, past the 2e-3 the
        # kernels promise (H200, tests/test_kernels_wgmma_speed_gpu.py: 2.3-3.4e-3; fp16's 2^-11 stays inside)
        cfg = {k: v for k, v in cfg.items() if k != "ROW_SUM_MMA"}
    # the .cu files' own defaults, stated (each build's defines name them): the TMA kernel ping-pongs two warpgroups
    base = dict(STAGES=2, PINGPONG=int(cfg.get("NWG", 2) == 2)) if cfg.get("TMA") else dict(OVERLAP=1, STAGES=2,
                                                                                            MIN_BLOCKS=1)
    defines = dict(HEAD_DIM=d, IS_BF16=int(bool(is_bf16)), **dict(base, **cfg))
    # and where a config leaves Bc or the warpgroups out; appended, so a config that names them keeps its cubin
    defines.setdefault("BLOCK_N", 128)
    defines.setdefault("NWG", 2)
    errors = knob_errors(defines)
    if errors:
        raise ValueError(f"fa2_wgmma: {'; '.join(errors)}")
    _check_fits(defines)
    return defines


SWITCHES = ("TMA", "PINGPONG", "ROW_SUM_MMA", "O_TILE", "O_TMA", "DESC_STEP", "WG_SKIP", "WG_CAUSAL_SKIP", "TURN_CARRY",
            "SECTION_RAGGED_FIRST", "OVERLAP")  # #if KNOB: another value would build the 1 kernel under another name
SETMAXNREG = range(24, 257, 8)  # PTX ISA: setmaxnreg takes 24 to 256 registers, a multiple of 8


def knob_errors(defines: dict) -> list[str]:
    """Why the kernel cannot be built with these defines (defines_for's, every default filled in), in the kernel's own
    words: the static_asserts of fa2_wgmma_tma.cu (TMA=1), fa2_wgmma.cu (TMA=0) and wgmma_fa2.cuh, and what else its
    source cannot take (a K/V ring of no slot, a setmaxnreg count PTX refuses). Empty: it builds. defines_for calls it,
    so the launcher (forward) and the GPU model (describe, `fa-traffic predict --knobs`) refuse the same builds."""
    g = defines.get
    tma, nwg, bn, stages, mb = g("TMA", 0), g("NWG", 2), g("BLOCK_N", 128), g("STAGES", 2), g("MIN_BLOCKS", 1)
    out = [f"{k}={g(k)}: {k} is a switch, 0 or 1" for k in SWITCHES if g(k, 0) not in (0, 1)]
    rules = [  # (holds, the kernel's reason)
        (mb >= 1, f"MIN_BLOCKS={mb}: at least one CTA per SM (the register cap divides by it)"),
        (1 <= nwg <= 3, f"NWG={nwg}: 1 to 3 consumer warpgroups (3: Br = 192, FA3's d = 64 tile)"),
        (0 <= g("RESCALE_THRESHOLD", 0) <= 15, f"RESCALE_THRESHOLD={g('RESCALE_THRESHOLD')}: 0..15 (P <= 2^15 < fp16 max)"),
    ]
    if tma:  # fa2_wgmma_tma.cu
        rules += [
            (g("PERSISTENT", 0) in (0, 2), f"PERSISTENT={g('PERSISTENT')}: 0 (one tile per CTA) or 2 (tiles from an atomic counter)"
             " (1, a static stride, was removed: commit 0bb604a)"),
            (bn > 0 and bn % 16 == 0 and bn <= 256, f"BLOCK_N={bn}: a multiple of 16, at most 256 (TMA box)"),
            (stages >= 1, f"STAGES={stages}: the K/V ring needs a slot (the producer loads block t into slot t % STAGES)"),
            (not g("PINGPONG") or nwg == 2, f"PINGPONG=1 with NWG={nwg}: ping-pong needs two consumer warpgroups"),
            (not g("O_TMA") or g("O_TILE"), "O_TMA stores from O_TILE's staging tile"),
            (not g("TURN_CARRY") or g("PINGPONG"), "TURN_CARRY carries the ping-pong turn from tile to tile"),
            (not g("O_TILE") or g("PERSISTENT"), "O_TILE: a persistent build (its Q goes back early)"),
            (g("O_DIRECT", 0) in (0, 2), f"O_DIRECT={g('O_DIRECT')}: 0, or 2 (16-byte stores)"
             " (1, 4-byte stores, was removed: commit 0bb604a)"),
            (not g("O_DIRECT") or (g("PERSISTENT") and not g("O_TILE")), "O_DIRECT: a persistent build without O_TILE"),
        ]
        if mb >= 1 and 1 <= nwg <= 3:  # the kernel's setmaxnreg budget (REGS_AT_LAUNCH, CONSUMER_REGS)
            at_launch = 65536 // mb // (128 * (nwg + 1)) // 8 * 8
            producer = g("PRODUCER_REGS", 40)
            fit = at_launch + int((at_launch - producer) / nwg)  # C's division truncates toward zero
            consumer = min(int(fit / 8) * 8, 240)
            rules += [
                (producer in SETMAXNREG and consumer in SETMAXNREG,
                 f"setmaxnreg takes 24 to 256 registers, a multiple of 8 (PTX): PRODUCER_REGS={producer}, "
                 f"consumers {consumer}"),
                (nwg * (consumer - at_launch) <= at_launch - producer,
                 "setmaxnreg: the consumers may take only what the producer gives back (else setmaxnreg.inc hangs)"),
            ]
    else:  # fa2_wgmma.cu
        rules += [
            (bn in (64, 96, 128, 192, 256), f"BLOCK_N={bn}: must be a wgmma N of wgmma.cuh (64, 96, 128, 192 or 256)"),
            (2 <= stages <= 4, f"STAGES={stages}: 2..4 ring slots"),
        ]
    return out + [why for holds, why in rules if not holds]


def _check_fits(defines: dict) -> None:
    """Refuse a build whose smem cannot launch, or cannot put MIN_BLOCKS CTAs on an SM: the first fails at launch,
    the second would run silently at fewer CTAs (MIN_BLOCKS only caps registers), and time as another build."""
    smem, ctas = smem_bytes(defines), defines.get("MIN_BLOCKS", 1)
    if smem > fa2_tc.SMEM_PER_BLOCK:
        raise ValueError(f"fa2_wgmma: d={defines['HEAD_DIM']} BLOCK_N={defines['BLOCK_N']} NWG={defines['NWG']} "
                         f"STAGES={defines.get('STAGES', 2)} O_TILE={defines.get('O_TILE', 0)} needs {smem} B of "
                         f"shared memory per CTA; the SM gives at most {fa2_tc.SMEM_PER_BLOCK}")
    if fa2_tc.ctas_by_smem(smem) < ctas:  # the rule occupancy() counts CTAs by
        raise ValueError(f"fa2_wgmma: MIN_BLOCKS={ctas} CTAs of {smem} B shared memory (+1 KB each, reserved) do not "
                         f"fit the SM's {fa2_tc.SMEM_PER_SM} B; at most {fa2_tc.ctas_by_smem(smem)} would run")


def source_of(defines: dict) -> tuple[Path, str]:
    return (SOURCE_TMA, KERNEL_TMA) if defines.get("TMA") else (SOURCE, KERNEL)


def threads(defines: dict) -> int:
    """Consumer warpgroups, plus the producer warpgroup in the TMA kernel."""
    return 128 * (defines["NWG"] + (1 if defines.get("TMA") else 0))


def block_m(defines: dict) -> int:
    return 64 * defines["NWG"]


def padded_d(d: int) -> int:
    """A tile row in smem: whole 64-column (128-byte) swizzle panels (d = 96 -> 128)."""
    return -(-d // 64) * 64


def smem_bytes(defines: dict) -> int:
    """Q tile (and O_TILE's staging tile) + the K and V rings (fp16/bf16) + ROW_SUM_MMA's panel of ones + the
    mbarriers + 1 KB so the kernel can align its base to 1024 B."""
    d, bn, stages = padded_d(defines["HEAD_DIM"]), defines["BLOCK_N"], defines.get("STAGES", 2)
    barriers = 8 * (1 + 4 * stages) if defines.get("TMA") else 0  # mbarriers: full_q, full/empty K and V
    if defines.get("PERSISTENT"):
        barriers += 8 * 5 + 8  # empty_q, tile_full[2], tile_empty[2], two int32 tile slots
    ones = bn * 128 if defines.get("ROW_SUM_MMA") else 0  # the panel of ones beside V (l from P V)
    tiles_q = 1 + (1 if defines.get("O_TILE") else 0)  # O_TILE: the epilogue's staging tile beside Q's
    return tiles_q * block_m(defines) * d * 2 + 2 * stages * bn * d * 2 + ones + barriers + 1024


def compile_configs() -> list[tuple[str, str, dict]]:
    return [(str(src), kernel, defs) for d in HEAD_DIMS for bf16 in (0, 1)
            for defs in [defines_for(d, bf16)] for src, kernel in [source_of(defs)]]


def sweep_configs() -> list[tuple[str, str, dict]]:
    """Every named build (named_builds), fp16 and bf16: what bench/bench_tc.py precompiles and measures."""
    out = []
    for d in HEAD_DIMS:
        for cfg in named_builds(d).values():
            for bf16 in (0, 1):
                defs = defines_for(d, bf16, cfg)
                item = (str(source_of(defs)[0]), source_of(defs)[1], defs)
                if item not in out:
                    out.append(item)
    return out


def occupancy(defines: dict, registers: int, **limits) -> dict:
    return fa2_tc.occupancy_for(threads(defines) // 32, smem_bytes(defines), registers, **limits)


def supported(device=None) -> bool:
    """True on a compute capability 9.x GPU (wgmma)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] == 9


_PLANS: dict = {}      # (d, bf16, config) -> launch plan: defines, source, block, smem, tile sizes


def _plan(d: int, bf16: bool, config: dict | None) -> tuple:
    # keyed so that 64.0 or True never reuses the plan of 64 or 1
    return checked_once(_PLANS, (d, bf16), config, lambda c: _new_plan(d, bf16, c))


def _new_plan(d: int, bf16: bool, config: dict | None) -> tuple:
    defs = defines_for(d, bf16, config)  # not a dict of integer knobs: it names the problem
    src, kernel = source_of(defs)
    return (defs, src, kernel, (threads(defs), 1, 1), smem_bytes(defs), block_m(defs), defs["BLOCK_N"],
            bool(defs.get("TMA")))


def forward(q, k, v, *, causal: bool = False, scale: float | None = None, config: dict | None = None,
            out=None):
    """FlashAttention-2 forward with wgmma; returns (o, lse). out=(o, lse) writes into given tensors.

    q (B, H, Nq, d); k, v (B, H_kv, Nk, d), H_kv dividing H; any strides with a unit last one (no copy)."""
    import torch

    b, h, h_kv, n_q, n_k, d = layouts.check_strided_gqa(q, k, v, head_dims=HEAD_DIMS)
    check_grid_rows("fa2_wgmma", b, h)
    dev = q.device.index
    loader.require_hopper(q.device, "fa2_wgmma needs a compute capability 9.x GPU (wgmma, sm_90a)", "fa2_tc")
    scale, causal = checks.scale_value(scale, d), checks.flag("causal", causal)  # the references' rules
    q, scale = layouts.positive_scale(q, scale)  # the kernel masks S before scaling it
    if config is None:
        config = default_config(d, n_k, h_kv == h and q.is_contiguous() and k.is_contiguous() and v.is_contiguous(),
                                causal=causal)
    defs, src, kernel, block, smem, bm, bn, tma = _plan(d, q.dtype == torch.bfloat16, config)
    if out is None:  # not empty_like: o is contiguous whatever q's strides
        o = torch.empty((b, h, n_q, d), dtype=q.dtype, device=q.device)
        lse = torch.empty((b, h, n_q), dtype=torch.float32, device=q.device)
    else:
        o, lse = fa2_tc._outputs(q, out)
    if tma:
        maps = (tensor_map(q, bm, name="q"), tensor_map(k, bn, name="k"), tensor_map(v, bn, name="v"))
        if defs.get("O_TMA"):  # o stored by TMA, 64 rows (one consumer warpgroup) per box
            maps += (tensor_map(o, 64, name="o"),)
        args = maps + (o, lse, int(n_q), int(n_k), float(scale * fa2_tc.LOG2E), float(scale), int(bool(causal)),
                       int(h), int(h // h_kv))
    else:
        if h_kv != h or not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
            raise ValueError("the cp.async build (TMA=0) takes contiguous q, k, v with equal head counts; "
                             "use a TMA build (the default) for strided or grouped-query inputs")
        for name, t in (("q", q), ("k", k), ("v", v)):  # its cp.async loads fault on a view at an element offset
            loader.check_aligned(name, t)
        args = (q, k, v, o, lse, int(n_q), int(n_k), float(scale * fa2_tc.LOG2E), float(scale),
                int(bool(causal)))
    grid = (-(-n_q // bm), b * h, 1)
    if defs.get("PERSISTENT"):  # persistent CTAs loop over the Tr x B*H tiles (fa2_wgmma_tma.cu)
        n_tiles = grid[0] * grid[1]
        ctas = (config or {}).get("GRID") or _sm_count(dev) * defs.get("MIN_BLOCKS", 1)
        grid = (max(1, min(n_tiles, int(ctas))), 1, 1)
        # the kernel hands out tiles with atomicInc, which the launch's last fetch wraps back to 0 (v6e), so one
        # counter serves every call on a stream
        args = args + (int(b * h), _tile_counter(q.device))
    loader.get_function(src, kernel, defines=defs, arch=ARCH, device=dev).launch(grid, block, args, shared_mem=smem)
    return o, lse


_SMS: dict = {}  # device index -> SM count
_COUNTERS: dict = {}  # (device index, stream) -> the persistent builds' tile counter


def _tile_counter(device):
    """The persistent builds' int32 tile counter for the current stream: zeroed once here, and by each launch's last
    fetch after that (fa2_wgmma_tma.cu v6e). One per stream, since launches on two streams may overlap. Under
    CUDA-graph capture a fresh zeroed counter per call: a cached one would be shared by the graph's replays and eager
    calls, and one first made during capture is zeroed only when the graph replays."""
    import torch

    if torch.cuda.is_current_stream_capturing():
        return torch.zeros(1, dtype=torch.int32, device=device)
    key = (device.index, torch.cuda.current_stream(device).cuda_stream)
    c = _COUNTERS.get(key)
    if c is None:
        c = _COUNTERS[key] = torch.zeros(1, dtype=torch.int32, device=device)
    return c


def _sm_count(dev) -> int:
    n = _SMS.get(dev)
    if n is None:
        import torch

        n = _SMS[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
    return n


# -- what the GPU model needs (gpumodel.descriptors; torch-free) ------------------------------------------
def causal_walk_steps(cfg: dict, n_q: int, n_k: int) -> tuple[int, int]:
    """(warpgroup-steps walked, warpgroup-steps in all) of a causal launch with WG_CAUSAL_SKIP (v11), as
    fa2_wgmma_tma.cu counts them: in each Q block of T key blocks, a consumer warpgroup whose rows end before the
    block's last row runs max(1, its own key blocks) steps and walks the rest; warpgroups with no row below Nq
    (WG_SKIP's idle ones) are counted in neither."""

    nwg, bc = cfg.get("NWG", 2), cfg["BLOCK_N"]
    br = 64 * nwg
    walked = total = 0
    for m0 in range(0, n_q, br):
        t = -(-max(0, min(n_k, min(m0 + br, n_q) + n_k - n_q)) // bc)
        for tw in warpgroup_steps(m0, t, n_q, n_k, bc, nwg):
            if tw is not None:
                walked, total = walked + t - tw, total + t
    return walked, total


def describe(d: int, dtype: str = "fp16", causal: bool = False, *, config: dict | None = None,
             n_k: int | None = None, **_) -> dict:
    """This build's descriptor: wgmma reads Q, K_j, V_j straight from swizzled smem (P from registers);
    TMA=1 is warp-specialised (a producer warpgroup feeds consumers that overlap softmax and products),
    the cp.async build has every warp load, then compute (FA2's structure). No config: the build forward()
    runs for this Nk (SIZE_RULES, contiguous inputs), else CONFIGS[d]."""
    _check_head_dim(d)  # before default_config, which has no build (None) for a head dim it does not take
    rule = choose_config(d, n_k, True, causal=causal) if config is None and n_k is not None else None
    config = default_config(d, n_k, True, causal) if config is None else config
    # a build the committed results timed with a knob the kernel no longer has (DESCRIBED_ONLY, REMOVED_VALUES)
    gone = {k: v for k, v in config.items() if k in DESCRIBED_ONLY or REMOVED_VALUES.get(k) == v}
    kept = {k: (2 if k in REMOVED_VALUES and k in gone else v) for k, v in config.items() if k not in DESCRIBED_ONLY}
    defs = defines_for(d, dtype == "bf16", kept)
    bc, nwg = defs["BLOCK_N"], defs["NWG"]
    tma, persistent = bool(defs.get("TMA")), bool(defs.get("PERSISTENT"))
    defs = dict(defs, **gone)
    q2 = (defs.get("Q_SLOTS", 1) - 1) * (block_m(defs) * padded_d(d) * 2 + 16 * persistent)  # Q_SLOTS=2's Q tile
    rs_cols = 8 if defs.get("ROW_SUM_MMA") else 0  # P V also reads 8 columns of the ones panel
    smem_tile = nwg * (64 * padded_d(d) * 2 + 2 * bc * padded_d(d) * 2 + bc * rs_cols * 2)
    warps = threads(defs) // 32
    return dict(kernel="fa2_wgmma", build=f"{'TMA' if tma else 'cp.async'} Br={block_m(defs)} Bc={bc}"
                + (f" pingpong={defs.get('PINGPONG', 0)}" if tma else ""),
                variant="fa2", path="wgmma", structure="warp_specialized" if tma else "fa2",
                block_q=block_m(defs), block_k=bc, warps=warps,
                occupancy_from=dict(defines=defs, min_blocks=defs.get("MIN_BLOCKS", 1)),
                loads="tma" if tma else "cp.async", s_p="registers",
                # PERSISTENT: SMs x CTAs/SM CTAs over the tiles; O_TILE / O_DIRECT (v13): the next tile's Q loads under
                # this one's end
                grid="persistent" if persistent else "q_blocks",
                next_tile_prefetch=persistent and bool(defs.get("O_TILE") or defs.get("O_DIRECT")),
                kv_stages=int(defs.get("STAGES", 2)) if tma else 0,  # the producer's K/V ring (ring_wait)
                causal_section_kb=defs.get("CAUSAL_SECTION_KB", CAUSAL_SECTION_KB) if persistent else 0,
                ragged_section_first=persistent and bool(defs.get("SECTION_RAGGED_FIRST")),
                idle_skip=bool(tma and defs.get("WG_SKIP") and nwg > 1),  # v10: the idle warpgroups walk the barriers
                causal_walk=bool(tma and defs.get("WG_CAUSAL_SKIP") and nwg > 1),  # v11
                half_diag=bool(tma and defs.get("HALF_DIAG")),  # v14 (removed): the half-width diagonal step
                rescale_skip=bool(defs.get("RESCALE_THRESHOLD")),  # v6f: O rescaled only when a row max moves past 2^T
                consumer_warpgroups=nwg if tma else 0,  # Br = 192's three: the model's overlap share sigma_ws3
                smem_bytes_per_tile=smem_tile, smem_bytes=smem_bytes(defs) + q2,
                row_sum_cols=rs_cols, pv_pad_cols=defs.get("PV_N", padded_d(d)) - d if not rs_cols else 0,
                load_cols=padded_d(d) if tma else d,  # TMA boxes of whole 64-column panels
                # the same CuPy driver launch as fa2_tc (+ tensor maps for TMA, not timed apart)
                launch_overhead_of="fa2_tc",
                source="kernels/fa2_wgmma.py " + ("SIZE_RULES" if rule else "CONFIGS"),
                options={k: v for k, v in defs.items() if k not in ("HEAD_DIM", "IS_BF16")})
