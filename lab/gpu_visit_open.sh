#!/usr/bin/env bash
# (Parts that name builds or knobs removed in issue 40 -- candidate(), SIZE_CANDIDATES, TILE_CANDIDATES, speed_configs,
# half_diag_builds, q_slots_builds, MAX_TREE, HALF_DIAG, Q_SLOTS, WAIT_HINT, CAUSAL_SECTION_KB -- run at commit 0bb604a.)
# One H200 visit for what the open issues still need measured, each part under its own time limit, so a slow or
# hung part costs only itself; results tarred into $OUT/<part>.tgz (the device tool returns few files).
#
#   PYTHONPATH=. bash lab/gpu_visit_open.sh cluster16 teach      # ~5.5 min
#   PYTHONPATH=. bash lab/gpu_visit_open.sh gaps                 # ~4 min
#
# Parts:
#   cluster16  issue 18: bench/cluster_speed.py at N = 16384 (B = 1, H = 2048/d), fp16 and bf16, d = 64/128,
#              causal and not: fa2_wgmma, v_once_tc (f spilled), SDPA flash and cuDNN, and the cluster kernel
#              where only the non-portable cluster of 16 holds the row (config MAX_CLUSTER=16); every entry
#              checked against float64 on its timed inputs first                 -> cluster16/cluster_speed.json
#   teach      issue 13: lab/gpu_check_teach_bwd.sh final (teaching fa2 backward GPU tests, memcheck and
#              racecheck, A/B of the d = 128 builds against the teaching naive backward at N = 4k, 8k) -> teach/
#   gaps       issue 11: lab/gpu_gaps_check.sh (ncu levels at N = 24k / 48k and v_once_tc at N = 2048)  -> gaps/
#   vonce_ncu  issue 11: ncu levels of v_once_tc (f in HBM, lazy and eager) at N = 2048, d = 64/128  -> vonce_ncu/
#   size14     issue 14: the GPU tests of kernels.fa2_wgmma.SIZE_CANDIDATES, then lab/ab_wgmma_speed.py of them
#              against the shipped build and cuDNN, fp16/bf16, d = 64/128, N = 512..4096, causal and not -> size14/
#   grid14     issue 14's grid: forward()'s default (SIZE_RULES), CONFIGS and d = 128 Bc = 128, SDPA flash and
#              cuDNN, fp16/bf16, d = 64/128/256, N = 512..16k, causal and not             -> grid14/
#   moonshot_ncu  issue 14: lab/ncu_moonshot.sh (fa2_wgmma vs cuDNN, SOL / warp-state sections)   -> moonshot_ncu/
#   hopper_tests  the GPU tests of the sm_90a launchers (fa2_wgmma forward and backward, v_once_cluster): their
#              shared compute-capability check (kernels/loader.require_hopper) and SIZE_RULES dispatch  -> hopper_tests/
#   rowsum     issue 14: ROW_SUM_MMA builds (l from the tensor core, d = 64): GPU tests, memcheck at scale -> rowsum/
#   rowsum_race  the same builds under racecheck at scale (fp16)                                 -> rowsum_race/
#   br192      issue 14: d = 64 with three consumer warpgroups (TILE_CANDIDATES): GPU tests, memcheck, racecheck -> br192/
#   tiles_ab   issue 14: A/B of ROW_SUM_MMA and Br = 192 against the shipped d = 64 builds, two runs  -> tiles_ab/
#   short128_ncu  issue 14: ncu of d = 128 at N = 512/1024: the default, the persistent scheduler, cuDNN -> short128_ncu/
#   grid64     issue 14: forward()'s d = 64 rule: GPU tests (long rows, both dtypes), then d = 64's grid   -> grid64/
#   bc192      issue 14: Br = 192 with Bc = 96 / 64 at d = 64 (tests, memcheck, A/B)                   -> bc192/
#   grid_abba  issue 14's grid, forward()'s default against SDPA, every cell timed in order then reversed -> grid_abba/
#   persist_short  issue 14: persistent builds for short rows (causal order in L2 sections, O_TILE): tests,
#              memcheck / racecheck on 3 CTAs, A/B at d = 64/128, N <= 4k against the default and cuDNN -> persist_short/
#   persist2   issue 14: persistent builds after the hand-off change: racecheck probe, tests, racecheck, grid A/B -> persist2/
#   confirm6   issue 14 v6: forward()'s rules: tests, d = 256 persistent sanitizers, grid A/B, layouts_speed -> confirm6/
#   layouts6   issue 14 v6: layouts_speed at d = 64/128, N = 2k/4k, twice                              -> layouts6/
#   ncu6       issue 14 v6: ncu (SOL, warp state) of the v6 default against cuDNN at N = 512 and causal 4k   -> ncu6/
#   oqt        issue 14 v6d: O_TMA builds: tests, memcheck on 3 CTAs, A/B against the v6 default         -> oqt/
#   v6e        issue 14 v6e: the self-zeroing tile counter: tests, memcheck / racecheck of forward()'s persistent builds
#              on 3 CTAs, the grid of forward()'s default against the pre-v6e launch and SDPA (abba)      -> v6e/
#   cand7      issue 14 after v6e: Bc = 160 + O_TMA and the rescale threshold at d = 128, the 3-CTA build + O_TMA at
#              d = 64: tests, memcheck, A/B at N <= 4k, ncu against cuDNN at d = 128 4k / d = 64 1k  -> cand7/
#   confirm7   issue 14: forward()'s rules after cand7: dispatch / layouts tests, the grid (abba) against the v6e builds,
#              layouts_speed at N = 2k/4k                                                             -> confirm7/
#   rescale8k  issue 14: d = 128 N > 4k with the rescale threshold: tests, memcheck, A/B against CONFIGS  -> rescale8k/
#   bc64       issue 14: Bc = 64 (exact key blocks at N = 512-2k) at d = 64 (3 CTAs) and d = 256: tests, sanitizers,
#              A/B at N <= 2k                                                                         -> bc64/
#   bc64b      issue 14: forward()'s d = 256 rule with bc64-dyn: dispatch tests, A/B at N = 512-8k (BC64_SEQS=4096:
#              the causal 4k check, committed as fwd_wgmma_persistent/bc64c)                                   -> bc64b/
#   closeout   stop 15's unrun GPU checks: the counter tests (mixed tile counts, graph capture), dispatch / layouts
#              tests, the grid twice with every v6f rule                                              -> closeout/
#   ahead7c    issue 14 v7c: QK_AHEAD pipelined: its GPU tests, then its A/B at d = 64/96/128 (abba)        -> ahead7c/
#   ahead7d    the same after v7d (two P tiles, S_{t+1} under the pack again)                         -> ahead7d/
#   ahead7dncu v7d: ncu of d = 64's CONFIGS build with and without QK_AHEAD (N = 4096, 512)              -> ahead7dncu/
#   ahead7csan v7d: memcheck and racecheck of the QK_AHEAD builds                                     -> ahead7csan/
#   rs64       issue 14: d = 64 Br = Bc = 128 persistent O_TILE/O_TMA builds: tests, memcheck, A/B at N <= 4k  -> rs64/
#   levels_persist issue 11: ncu levels of forward()'s persistent builds and cuDNN at N = 512-4k      -> levels_persist/
#   levels256  issue 11: ncu levels at d = 256 (fa2_wgmma's default builds, cuDNN), N = 512, 4k, 16k    -> levels256/
#   levels_causal issue 11: ncu levels of the persistent causal builds at N = 512-2k, d = 64/128       -> levels_causal/
#   grid25     issue 14: grid24's grid (four passes) with stop 25's tree (no kernel change; the model's check)   -> grid25/
#   mask25     issue 11: ncu instructions per tile of cuDNN, SDPA flash, fa2_wgmma at N = 1000 against 1024       -> mask25/
#   ceiling25  issue 11: lab/tc_ceiling.py, the wgmma / mma.sync rates alone in FLOP/clk/SM        -> ceiling25/
#   ragged25   issue 11: forward()'s build, SDPA flash, cuDNN at N = 1500-7000 (Bc does not divide them) -> ragged25/
#   names26    issue 11: lab/kernel_names.py, the kernel / grid / block SDPA flash and cuDNN launch per d -> names26/
#   n512ab26   issue 14: d = 128 N <= 2k, O_DIRECT=2 with a third K/V slot or a second Q slot (A/B twice) -> n512ab26/
#   br192d128  issue 14: d = 128 Br = 192 builds (three consumer warpgroups): GPU tests, memcheck at scale -> br192d128/
#   br192ab26  issue 14: their A/B against forward()'s build and cuDNN, twice, N = 512-4096       -> br192ab26/
#   d128ab26   issue 14: br192ab26 and n512ab26's builds in one A/B, twice, N = 512-2048          -> d128ab26/
#   inputs27   inputs: scale <= 0 on the four tensor-core forwards (kernels.layouts.positive_scale, stop 27) -> inputs27/
#   check28    stop 28: the GPU tests of every launcher stop 27's wrapper changes touched (318 tests)        -> check28/
#   check28b   check28's tests past its limit: cluster forced / GQA / errors, Hopper backward, layouts, loader -> check28b/
#   tcdram28   issue 11: ncu levels of fa2_tc's spill-free Bc = 32 build beside its shipped one and SDPA flash, N = 16k-64k -> tcdram28/
#   flash256   issue 11: ncu levels of SDPA flash at d = 256 (never profiled; model 0.84x) beside fa2_wgmma -> flash256/
#   trace29    issue 11: when each CTA of fa2_tc (and of fa2_wgmma's one-tile build, the control) ran (lab/cta_trace.py,
#              CTA_TRACE=1) at N = 16k-64k, then the same launches under ncu (their own DRAM bytes);
#              lab/l2_sim.py walks the recorded schedules                                         -> trace29/
#   clock26    issue 11: lab/clock_probe.py over 18 cells (d = 64-256, N = 1k-16k): window clocks and cycles -> clock26/
#   fresh11t   issue 11: the one-slot K/V ring builds (ring1, d = 128/256): GPU tests, racecheck        -> fresh11t/
#   fresh11    issue 11: never-timed N (768-12288) at d = 64/96/128/256, the default, CONFIGS, ring1 and SDPA, twice
#              (abba): the GPU model's fresh held-out cells                                           -> fresh11/
#   grid22     issue 14's target grid on main (checks first, abba)                                      -> grid22/
#   knobs22    issue 14: d = 128 N <= 2k without ping-pong, static persistent, MAX_TREE (A/B, abba)      -> knobs22/
#   layouts22  issue 14: layouts_speed (strided, GQA) at d = 64-256, N = 2k, 4k, 16k                   -> layouts22/
#   tree22     issue 14: MAX_TREE in forward()'s d = 128 builds: its GPU tests, dispatch tests, the grid   -> tree22/
#   half22     issue 14 v14 HALF_DIAG: GPU tests, memcheck / racecheck of the d = 128 / 256 builds   -> half22/
#   half22ab   its A/B at d = 96/128 N <= 4k, d = 256 N = 512 (abba, default-again)               -> half22ab/
#   final22    issue 14: forward() with HALF_DIAG at d = 128: dispatch / layouts tests, the grid         -> final22/
#   isolate22  issue 14: HALF_DIAG's tests again, A/B of d = 128 with and without it as the default  -> isolate22/
#   bias22     the A/B's added-entry bias: a no-op added entry beside the control, with and without SDPA flash -> bias22/
#   recheck22  HALF_DIAG and MAX_TREE at d = 128 again with the Williams order                        -> recheck22/
#   recheck22b d = 64's four slots and d = 96/128's TURN_CARRY rechecked with the Williams order      -> recheck22b/
#   layouts_abba  issue 14: layouts_speed with each cell's layouts timed forward then reversed (not yet run)  -> layouts_abba/
#   recheck_knobs  issue 14: DESC_STEP, RESCALE_THRESHOLD, ROW_SUM_MMA out of forward()'s builds, Williams order (not yet run) -> recheck_knobs/
#   layouts_rounds  issue 14: layouts_speed with each cell's layouts in 8 Williams-design rounds after a dropped warm-up
#              round (layouts_abba's one pass each way left cells at 0.90-1.08x)                    -> layouts_rounds/
#   sections23 issue 14: the persistent causal order's L2 section size (CAUSAL_SECTION_KB 4, 8, 32 MB against
#              16 MB) at N <= 4k, Williams order, control beside                                     -> sections23/
#   sections23b issue 14: sections23's one gain (8 MB at d = 128 causal N <= 1k, 0.98-0.99) timed again twice, with
#              lengths no run had timed (768, 1536, 3072), causal only                                   -> sections23b/
#   fresh23    issue 14: forward()'s default against SDPA flash and cuDNN at lengths no grid timed (768, 1536, 3072,
#              6144, 12288), d = 64 / 96 / 128 / 256, causal and not, fp16 / bf16                      -> fresh23/
#   d64c23     issue 14: d = 64 causal 768-2048 (0.98-1.06x cuDNN in fresh23): the 3-CTA build's Bc = 64 with four
#              (or three) K/V slots, forward()'s N <= 512 build, against its Bc = 96 two-slot one; two runs   -> d64c23/
#   final23    issue 14: forward() with d = 64's Bc = 64 causal rule to Nk = 768: dispatch / layouts tests, the rule
#              builds' knob tests across tiles at d = 64, d = 64 causal at 576-768 against cuDNN, then the grid -> final23/
#   d64c23b    issue 14: the Bc = 64 four-slot build past 768 (832-1024; final23 had Bc = 96 at 896 0.98-1.00x cuDNN),
#              two runs                                                                             -> d64c23b/
#   grid23c    issue 14 / 11: the grid with each timing's SM clock recorded (harness.start_clock): the lead over
#              cuDNN in time and in cycles (grid23c lost the clock: the A/B's row kept listed keys only; grid23d
#              after the fix)                                                                       -> grid23c/, grid23d/
#   grid23e    issue 14: the grid with four timing passes per cell (abbaabba) and the clock recorded: which cells
#              trail cuDNN beyond one run's swing                                                   -> grid23e/
#   short23    issue 14: forward()'s d = 64 causal build (Bc = 64 to Nk = 896) against cuDNN at lengths between the
#              grid's (576-960), four passes per cell                                               -> short23/
#   sect24     issue 14: the causal order's section down to one head (CAUSAL_SECTION_KB 256 KB: at N = 512, d = 128 a
#              head's four Q blocks run together, as non-causal's head-major order, level with cuDNN there) and 1 MB,
#              against 16 MB, causal N = 512-2048, two runs                                          -> sect24/
#   q24        issue 14 stop 24 Q_SLOTS=2 (two Q tiles: the next tile's Q loads as the producer reaches it): the GPU
#              tests of forward()'s builds with it (kernels.fa2_wgmma.q_slots_builds), memcheck on 2 CTAs at scale -> q24/
#   q24race    racecheck and synccheck of those builds on 2 CTAs at scale, four shapes each                 -> q24race/
#   q24ab      A/B of forward()'s builds with and without it: d = 96 / 128 N = 512-4096 causal and not, d = 64
#              non-causal (its causal short-row builds have no room), two runs, Williams order, control beside -> q24ab/
#   fresh24    issues 14 / 11: forward()'s default against SDPA flash and cuDNN at lengths no grid timed (640, 1000,
#              1280, 2560, 5120), d = 64 / 96 / 128 / 256, causal and not, fp16 / bf16, clock recorded      -> fresh24/
#   bc24       issue 14: d = 128 past the persistent rule (Nk > 4096: CONFIGS' Bc = 176, whose last key block at N = 5120 is
#              16 keys of 176, fresh24's one cell behind at 0.976): Bc = 160 / 128 one tile per CTA and the persistent
#              Bc = 128 build at N = 4608-8192, causal and not                                         -> bc24/
#   bc24b      issue 14: bc24's one gain (the persistent Bc = 128 build at causal N > 4096, 0.958 of forward()'s time; it
#              was never timed past SIZE_MAX_N) to 16k, with Bc = 176 persistent (O from registers, with and without
#              TURN_CARRY) beside, causal and not, two runs                                            -> bc24b/
#   bc24c      issue 14: bc24b's causal gain again at lengths between (5120-16384), causal only, two runs   -> bc24c/
#   rf24       issue 14 SECTION_RAGGED_FIRST (the causal order's section of the heads left over first): GPU tests of
#              every persistent forward() build with it (sections of two heads at the test shapes), memcheck on 2 CTAs -> rf24/
#   rf24ab     A/B at lengths where B*H % hs > 0: d = 128 causal 4608-12288 with the persistent Bc = 128 build with and
#              without it; d = 64 / 96 causal 3000, 6144, 10240 with forward()'s build with it               -> rf24ab/
#   final24    issue 14: forward() with SECTION_RAGGED_FIRST and d = 128's causal rule to Nk = 10240: dispatch / layouts
#              tests, the rule builds' knob tests across tiles, d = 128 causal 5120-10240 against cuDNN, the grid -> final24/
#   grid24     issue 14: grid23e's grid (four passes) with forward()'s stop-24 builds                        -> grid24/
#   rf24race   racecheck of the persistent builds with SECTION_RAGGED_FIRST on 2 CTAs at scale               -> rf24race/
#   rf24race2  the same from the d = 128 build on (rf24race's limit ended there), four shapes each               -> rf24race2/
#   q24c       issue 14: Q_SLOTS=2 on the causal cells again (q24ab: 0.987 of the control at d = 128 causal, all of it in
#              fp16), d = 96 / 128 causal 1k-4k and d = 128 causal 6k-8k, two runs                          -> q24c/
#   gap        issues 11 / 14: lab/gap_probe.py: each entry's benchmark time against its kernels' device time
#              (CUPTI), host work per call and back-to-back time                                      -> gap/
#   clock      issues 11 / 14: lab/clock_probe.py: each entry's time with the SM clock and power nvidia-smi read over
#              its window (cuDNN's pass asymmetry, its fp16 / bf16 gap at d = 128, ours against it in cycles) -> clock/
#   fresh22    issue 11: never-timed N (640-10240) at d = 64/128: default, CONFIGS, Br = 192, SDPA (abba)   -> fresh22/
#   levels96   issue 11: ncu levels at d = 96 (fa2_wgmma, cuDNN, SDPA flash; N = 1k, 4k, causal and not)  -> levels96/
#   d96        issue 14: d = 96's persistent O_TMA builds for short N: tests, memcheck / racecheck on 3 CTAs, A/B at N <= 4k -> d96/
#   d96rule    issue 14: SIZE_RULES[96]: racecheck of dyn-oqt-r on 3 CTAs, dispatch / layouts tests, d = 96's grid -> d96rule/
#   opcodes512 issue 14: SASS instructions per opcode, forward()'s default against cuDNN at N = 512 (d = 64/128/256) -> opcodes512/
#   desc9      issue 14 v9: DESC_STEP=1 on every rule build: GPU tests, memcheck (3 CTAs), the grid against the default -> desc9/
#   desc9ab    issue 14 v9: the DESC_STEP grid A/B again                                              -> desc9ab/
#   desc9final issue 14 v9: forward()'s dispatch / layouts GPU tests with DEFAULT_KNOBS (DESC_STEP=1)   -> desc9final/
#   wgskip     issue 14 v10: WG_SKIP (a warpgroup whose rows all lie past Nq computes nothing)
#              on forward()'s builds: GPU tests, memcheck and racecheck on 3 CTAs at Nq = 300 (idle warpgroups)  -> wgskip/
#   wgskipab   issue 14 v10: A/B of forward()'s builds with and without WG_SKIP, d = 64/96/128, N = 512-8192 with
#              ragged 1000 and 3000, abba                                                           -> wgskipab/
#   wgskipsan  WG_SKIP's persistent builds on 2 CTAs under memcheck and racecheck, 7 at-scale shapes      -> wgskipsan/
#   wgskipfinal  forward()'s dispatch tests with WG_SKIP at every d; racecheck of d = 256's persistent WG_SKIP builds -> wgskipfinal/
#   wgskipab2  the same A/B again with WG_SKIP in d = 64's default (off at d = 64, on at 96/128/256)      -> wgskipab2/
#   waithint   issue 14 v11: A/B of forward()'s builds with and without WAIT_HINT (try_wait's suspend-time hint,
#              CUTLASS's 10^7 ns), d = 64/96/128/256, N = 512-8192, abba                              -> waithint/
#   cskip      issue 14 v11: WG_CAUSAL_SKIP's GPU tests (forward()'s NWG >= 2 builds with it, and the two size builds that
#              carry it), memcheck and racecheck on 2 CTAs of four persistent builds with it (d = 256 Bc = 64, d = 128
#              ping-pong, d = 64 Br = 192, d = 128 Bc = 64) at the at-scale shapes                       -> cskip/
#   cskipab    A/B of forward()'s builds with and without WG_CAUSAL_SKIP, and the two size builds, d = 64-256,
#              N = 512-8192, abba                                                                      -> cskipab/
#   cskipfinal with WG_CAUSAL_SKIP in DEFAULT_KNOBS: forward()'s dispatch, head-dim and layouts GPU tests, then the second
#              A/B run (forward()'s default against it without the knob), d = 64-256, N = 512-8192 -> cskipfinal/
#   carry      issue 14 v12: TURN_CARRY's GPU tests (forward()'s ping-pong builds with it), then synccheck, racecheck and
#              memcheck of its persistent builds on 2 CTAs at the at-scale shapes                     -> carry/
#   carryab    A/B of forward()'s ping-pong builds with and without TURN_CARRY, d = 96/128/256, N = 512-8192 -> carryab/
#   carryfinal with TURN_CARRY in forward()'s O_TILE ping-pong builds: the dispatch, head-dim and layouts GPU tests, then
#              the second A/B run (the default against it without TURN_CARRY), d = 96/128/256        -> carryfinal/
#   d64small   issue 14: d = 64 at N <= 2k (the causal cells behind cuDNN), forward()'s builds with Bc = 64, with O stored
#              by TMA, and both, abba                                                                   -> d64small/
#   d64rule    d = 64 causal short rows (the rule then at Nk <= 1k, now 512) on the 3-CTA build with Bc = 64 and O by TMA: its GPU tests (the default builds' at
#              d = 64), forward()'s dispatch tests, memcheck / racecheck on 2 CTAs, the second A/B run     -> d64rule/
#   knobs      every speed / size / tile build's GPU tests (test_kernels_wgmma_speed_gpu.py)            -> knobs/
#   rowsum_ab  issue 14: A/B of the ROW_SUM_MMA builds against the builds without it, fp16 (its only dtype), d = 64,
#              N = 512..16k, causal and not, SDPA flash and cuDNN beside                          -> rowsum_ab/
set -u
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
ROOT_OUT=${OUT:-$(mktemp -d)}
T0=$(date +%s)
nvidia-smi -L
# wgmma_builds D:NAME[:GRID] ...: bench/sanitize.py's --configs JSON for fa2_wgmma builds named as the A/B names
# them (kernels.fa2_wgmma.candidate: size, tile or speed builds), one build per entry; GRID: persistent builds on
# that many CTAs, so each loops over many tiles at the sanitizer's shapes
wgmma_builds() {
  python3 -c "
import json, sys
from kernels import fa2_wgmma as f
def build(d, name, grid=None):
    return {d: dict(f.named_build(int(d), name), **({'GRID': int(grid)} if grid else {}))}
print(json.dumps({'fa2_wgmma': [build(*a.split(':')) for a in sys.argv[1:]]}))" "$@"
}
# builds GRID SOURCE [COND]: the same JSON for the (d, config) list of the Python expression SOURCE (f:
# kernels.fa2_wgmma, t: tests.test_kernels_wgmma_speed_gpu), those where the condition COND on i (index), d, c (config)
# holds; persistent ones on GRID CTAs
builds() {
  python3 -c "
import json, sys
from kernels import fa2_wgmma as f
grid, src, cond = int(sys.argv[1]), sys.argv[2], sys.argv[3]
env = {'f': f}
if 't.' in src:
    from tests import test_kernels_wgmma_speed_gpu as t
    env['t'] = t
b = [(d, c) for i, (d, c) in enumerate(eval(src, env)) if eval('(' + cond + ')', {}, dict(i=i, d=d, c=c))]
print(json.dumps({'fa2_wgmma': [{d: dict(c, **({'GRID': grid} if c.get('PERSISTENT') else {}))} for d, c in b]}))" \
    "$1" "$2" "${3:-True}"
}
# skip_builds GRID [COND]: forward()'s builds where a warpgroup can idle (two or three of them)
skip_builds() { builds "$1" "[(d, c) for d, c in f.default_builds() if c.get('NWG', 2) >= 2]" "${2:-True}"; }
# sanitize_wgmma TOOL DTYPES KERNEL_SHAPES LIMIT_S SANITIZE_LIMIT_S CONFIGS: bench/sanitize.py, one compute-sanitizer
# tool over the fa2_wgmma builds of CONFIGS (JSON, as wgmma_builds prints it) alone -> $W/TOOL/, log $W/TOOL.txt
sanitize_wgmma() {
  timeout "$4" python3 bench/sanitize.py --out "$W/$1" --kernels fa2_wgmma --shapes 0 --dtypes "$2" \
    --tools "$1" --only-configs --kernel-shapes "$3" --timeout "$5" --configs "$6" > "$W/$1.txt" 2>&1
}
# ab_rep NAME LIMIT_S BUDGET_S AFTER HEAD ARGS...: one run of lab/ab_wgmma_speed.py ARGS into $W/NAME (log
# $W/NAME.txt) under its own limit and time budget; prints the first HEAD lines of its decision table ("d build" and
# AFTER lines after it); fails if the run did. The parts that time an A/B twice call it per run (rep1, rep2).
ab_rep() {
  local name=$1 limit=$2 budget=$3 after=$4 head=$5 r; shift 5
  timeout "$limit" python3 lab/ab_wgmma_speed.py --out "$W/$name" "$@" --budget-s "$budget" > "$W/$name.txt" 2>&1
  r=$?; grep -A"$after" "d build" "$W/$name.txt" | head -"$head"; return $r
}
# dispatch_tests LOG LIMIT_S: the GPU tests of forward()'s rule dispatch, head dims and layouts (strided, GQA)
dispatch_tests() {
  timeout "$2" python3 -m pytest -q -p no:cacheprovider tests/test_kernels_tc.py tests/test_kernels_layouts.py \
    -k "long_rows or (wgmma and matches_reference) or strided or gqa or head_dims or layout" > "$1" 2>&1
}
# speed_tests LIMIT_S K: the GPU tests of tests/test_kernels_wgmma_speed_gpu.py that -k K selects -> $W/tests.log
speed_tests() {
  timeout "$1" python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py -k "$2" > "$W/tests.log" 2>&1
}
# ncu_levels LIMIT_S SHAPES KERNELS [CAUSAL]: lab/ncu_levels.sh on NCU_LEVELS_SHAPES / _KERNELS (CAUSAL=1: causal
# at every N too) -> $W (ncu_levels.csv ...), log $W/run.txt
ncu_levels() {
  OUT=$W NCU_LEVELS_SHAPES=$2 NCU_LEVELS_KERNELS=$3 NCU_LEVELS_CAUSAL=${4:-} timeout "$1" bash lab/ncu_levels.sh \
    > "$W/run.txt" 2>&1
}
rowsum_configs() {  # the ROW_SUM_MMA builds (issue 14): the default's and the two d = 64 size builds'
  wgmma_builds 64:rowsum 64:small-tma3-rs 64:small-tma-rs
}
for part in "$@"; do
  W=$ROOT_OUT/$part; mkdir -p "$W"
  t0=$(date +%s)
  case $part in
    cluster16)
      timeout 230 python3 bench/cluster_speed.py --out "$W" --n 16384 --dtypes float16,bfloat16 --set all \
        --max-sets 2 > "$W/table.txt" 2> "$W/run.err"; rc=$?
      cat "$W/table.txt"; tail -5 "$W/run.err" ;;
    teach)
      OUT=$W TOTAL_S_FINAL=110 timeout 120 bash lab/gpu_check_teach_bwd.sh final > "$W/run.txt" 2>&1; rc=$?
      tail -45 "$W/run.txt" ;;
    gaps)
      OUT=$W timeout 250 bash lab/gpu_gaps_check.sh > "$W/run.txt" 2>&1; rc=$?
      tail -30 "$W/run.txt" ;;
    vonce_ncu)  # the second half of gaps alone (its kernel names did not parse on the first run)
      ncu_levels 90 2048x64,2048x128 "v_once_tc[hbm,lazy],v_once_tc[hbm,eager]"; rc=$?
      tail -8 "$W/run.txt" ;;
    size14)  # issue 14: the size-based builds, tested, then timed against the default and cuDNN at N <= 4k
      speed_tests 120 "size_candidate"; rc=$?
      tail -4 "$W/tests.log"
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128 --seqs 512,1024,2048,4096 \
        --variants base,small-tma,small-tma-dyn,small-tma3,small-cp --sdpa cudnn --budget-s 170 > "$W/ab.txt" 2>&1; rc2=$?
      tail -60 "$W/ab.txt"; rc=$(( rc != 0 ? rc : rc2 ))
      cfg=$(wgmma_builds 64:small-tma 128:small-tma 64:small-tma3 64:small-cp 128:small-cp)
      sanitize_wgmma memcheck float16 2 100 90 "$cfg"
      rc3=$?; tail -5 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : rc3 )) ;;
    grid14)  # issue 14: what forward() runs (SIZE_RULES), CONFIGS, a d = 128 Bc = 128 candidate, SDPA flash and cuDNN
      timeout 70 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py tests/test_kernels_tc.py \
        -k "small-bc128 or (wgmma and matches_reference)" > "$W/tests.log" 2>&1; rc=$?
      tail -3 "$W/tests.log"
      timeout 420 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128,256 \
        --seqs 512,1024,2048,4096,8192,16384 --variants default,base,small-bc128@128 --budget-s 380 \
        > "$W/ab.txt" 2>&1; rc2=$?
      tail -75 "$W/ab.txt"; rc=$(( rc != 0 ? rc : rc2 )) ;;
    moonshot_ncu)  # issue 14: ncu sections of fa2_wgmma against cuDNN on the moonshot cells and the worst gap
      OUT=$W timeout 220 bash lab/ncu_moonshot.sh > "$W/run.txt" 2>&1; rc=$?
      tail -30 "$W/run.txt" ;;
    confirm128)  # issue 14: d = 128 Bc = 128 at N <= 1k timed twice more (the grid's cells differ by +-7% between
                 # two identical builds), and its sanitizers at scale
      for rep in 1 2; do
        timeout 60 python3 lab/ab_wgmma_speed.py --out "$W/rep$rep" --dims 128 --seqs 512,1024 \
          --variants base,small-bc128@128 --sdpa cudnn > "$W/ab$rep.txt" 2>&1
        grep -A12 "^dtype" "$W/ab$rep.txt" | tail -12
      done
      cfg=$(wgmma_builds 128:small-bc128)
      for tool in memcheck racecheck; do
        sanitize_wgmma "$tool" float16 6 100 90 "$cfg"
        rc=$?; tail -2 "$W/$tool.txt"
      done ;;
    cluster16_ncu)  # issue 18: DRAM bytes of the 16-CTA cluster kernel (f on chip) at N = 16k and 21504, d = 64/128
      CLUSTER_NCU_SHAPES=16384x64,16384x128,21504x128 CLUSTER_NCU_CONFIG='{"MAX_CLUSTER": 16}' timeout 150 \
        ncu --clock-control none --csv --print-units base --kernel-name "regex:v_once_cluster_fwd|fa2_wgmma_tma_fwd" \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
        python3 lab/cluster_ncu_target.py > "$W/ncu.csv" 2> "$W/ncu.stderr"; rc=$?
      python3 lab/cluster_ncu_summary.py "$W/ncu.csv"; tail -3 "$W/ncu.stderr" ;;
    hopper_tests)
      timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_tc.py tests/test_kernels_cluster.py \
        tests/test_kernels_bwd_gpu.py -k "(wgmma and matches_reference) or smoke or errors or opcheck" \
        > "$W/tests.log" 2>&1; rc=$?
      tail -6 "$W/tests.log" ;;
    rowsum)
      timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        -k "rowsum or tma-rs or tma3-rs" > "$W/tests.log" 2>&1; rc=$?
      tail -6 "$W/tests.log"
      sanitize_wgmma memcheck float16,bfloat16 6 110 100 "$(rowsum_configs)"
      r=$?; tail -3 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    rowsum_race)
      sanitize_wgmma racecheck float16 6 160 150 "$(rowsum_configs)"
      rc=$?; tail -3 "$W/racecheck.txt" ;;
    rowsum_ab)
      timeout 330 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64 --seqs 512,1024,2048,4096,8192,16384 \
        --dtypes float16 --variants base,rowsum,small-tma3,small-tma3-rs,small-tma,small-tma-rs --budget-s 290 > "$W/ab.txt" 2>&1; rc=$?
      tail -40 "$W/ab.txt" ;;
    br192)  # issue 14: three consumer warpgroups at d = 64 (TILE_CANDIDATES): GPU tests, memcheck, racecheck at scale
      speed_tests 150 "br192 or rs-poly1 or no-rs or rowsum"; rc=$?
      tail -4 "$W/tests.log"
      cfg=$(wgmma_builds 64:br192 64:br192-rs 64:rs-poly1 64:br192-rs-poly1)  # the four that visit sanitized
      for tool in memcheck racecheck; do
        sanitize_wgmma "$tool" float16 6 180 170 "$cfg"
        r=$?; tail -2 "$W/$tool.txt"; rc=$(( rc != 0 ? rc : r ))
      done ;;
    tiles_ab)  # issue 14: ROW_SUM_MMA and the Br = 192 tile against the shipped d = 64 builds, twice (cells move +-7%)
      for rep in 1 2; do
        timeout 140 python3 lab/ab_wgmma_speed.py --out "$W/rep$rep" --dims 64 --seqs 512,1024,2048,4096,8192,16384 \
          --dtypes float16,bfloat16 --variants base,no-rs,rs-poly1,br192,br192-rs,br192-rs-poly1,small-tma3,small-tma \
          --budget-s 120 > "$W/ab$rep.txt" 2>&1; r=$?
        grep -A30 "^dtype" "$W/ab$rep.txt"; rc=$(( rep == 1 ? r : (rc != 0 ? rc : r) ))
      done ;;
    short128_ncu)  # issue 14: why the persistent scheduler lost at short N (d = 128): ncu of the default, the
                   # dynamic-persistent build and cuDNN at N = 512 / 1024
      builds=$(python3 -c "
import json
from kernels import fa2_wgmma as f
c = f.SIZE_CANDIDATES[128]['small-bc128']
print(json.dumps({'dyn': dict(c, PERSISTENT=2), 'dyn176': dict(f.CONFIGS[128], PERSISTENT=2)}))")
      OUT=$W MOONSHOT_CELLS=512x128x0,512x128x1,1024x128x1 MOONSHOT_BUILDS="$builds" timeout 200 \
        bash lab/ncu_moonshot.sh > "$W/run.txt" 2>&1; rc=$?
      tail -25 "$W/run.txt" ;;
    grid64)  # issue 14: forward()'s d = 64 rule (small-tma3 short / causal 2k, Br = 192 elsewhere): its GPU tests,
             # then the grid at d = 64 against CONFIGS, SDPA flash and cuDNN
      timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_tc.py \
        -k "long_rows or (wgmma and matches_reference)" > "$W/tests.log" 2>&1; rc=$?
      tail -3 "$W/tests.log"
      timeout 300 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128,256 --seqs 512,1024,2048,4096,8192,16384 \
        --variants default,base --budget-s 270 > "$W/ab.txt" 2>&1; r=$?
      grep -A80 "^dtype" "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    bc192)  # issue 14: Br = 192 with Bc = 96 / 64 at d = 64: GPU tests, memcheck, A/B against the rule's builds
      speed_tests 100 "bc96 or bc64"; rc=$?
      tail -3 "$W/tests.log"
      cfg=$(wgmma_builds 64:br192-bc96-rs 64:br192-bc64-rs)
      sanitize_wgmma memcheck float16 6 60 55 "$cfg"
      r=$?; tail -1 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 120 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64 --seqs 512,1024,2048,4096,8192,16384 \
        --variants default,base,small-tma3,br192-rs,br192-bc96-rs,br192-bc64-rs --budget-s 100 > "$W/ab.txt" 2>&1
      r=$?; grep -A30 "^dtype" "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    grid_abba)  # issue 14's grid once more, each cell timed in order then reverse (--order abba): forward()'s
                # default, SDPA flash and cuDNN, fp16/bf16, d = 64/128/256, N = 512..16k, causal and not
      timeout 170 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128,256 --seqs 512,1024,2048,4096,8192,16384 \
        --variants default --order abba --budget-s 150 > "$W/ab.txt" 2>&1; rc=$?
      grep -A80 "^dtype" "$W/ab.txt" | tail -8 ;;
    persist_short)  # issue 14: the persistent short-row builds (sectioned causal order, O_TILE's early Q): GPU
                    # tests, memcheck and racecheck at scale on 3 CTAs (each loops over many tiles), the A/B
      timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        -k "sections or (size_candidate and dyn)" > "$W/tests.log" 2>&1; rc=$?
      tail -4 "$W/tests.log"
      cfg=$(wgmma_builds 128:bc128-dyn-oq:3 128:bc160-dyn-oq:3 64:small-tma3-dyn-oq:3 64:br192-rs-dyn-oq:3)
      for tool in memcheck racecheck; do
        sanitize_wgmma "$tool" float16 6 150 140 "$cfg"
        r=$?; tail -2 "$W/$tool.txt"; rc=$(( rc != 0 ? rc : r ))
      done
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128 --seqs 512,1024,2048,4096 --dtypes float16 \
        --variants default,bc128-dyn,bc128-dyn-lpt,bc128-dyn-oq,bc160-dyn-oq,dynamic@128,small-tma3-dyn-oq,br192-rs-dyn-oq --budget-s 180 \
        > "$W/ab.txt" 2>&1; r=$?
      grep -A40 "^dtype" "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    persist2)  # issue 14: the tile hand-off with per-thread arrivals (racecheck flagged the warp's lane-0 arrival),
               # the racecheck probe of that protocol, GPU tests, racecheck at scale on 3 CTAs, then the whole grid
      san=$(command -v compute-sanitizer || ls -d /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | sort -r | head -1)
      timeout 60 "$san" --tool racecheck python3 lab/racecheck_mbarrier_probe.py > "$W/probe.txt" 2>&1
      echo "probe rc=$?"; grep -E "@@PROBE|mode=|Race reported|SUMMARY" "$W/probe.txt" | head -20
      timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        -k "sections or (size_candidate and dyn) or persistent or dynamic" > "$W/tests.log" 2>&1; rc=$?
      tail -3 "$W/tests.log"
      cfg=$(wgmma_builds 128:bc128-dyn-oq:3 128:bc160-dyn-oq:3 64:small-tma3-dyn-oq:3 64:br192-rs-dyn-oq:3 \
        128:dynamic:3)
      sanitize_wgmma racecheck float16 6 170 160 "$cfg"
      r=$?; tail -4 "$W/racecheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 230 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128,256 --seqs 512,1024,2048,4096,8192,16384 \
        --variants default,bc128-dyn-oq@128,bc160-dyn-oq@128,dynamic@128+256,br192-rs-dyn-oq@64,small-tma3-dyn-oq@64 \
        --budget-s 210 > "$W/ab.txt" 2>&1; r=$?
      tail -3 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    confirm6)  # issue 14 v6: forward()'s new rules (persistent builds): its dispatch and layouts tests, d = 256's
               # persistent build under memcheck / racecheck on 3 CTAs, the grid (new default against the v5 rule's
               # builds and cuDNN, --order abba), and strided / GQA inputs against contiguous (layouts_speed)
      dispatch_tests "$W/tests.log" 150; rc=$?
      tail -3 "$W/tests.log"
      cfg=$(wgmma_builds 256:dynamic:3)
      for tool in memcheck racecheck; do
        sanitize_wgmma "$tool" float16 6 80 75 "$cfg"
        r=$?; tail -1 "$W/$tool.txt"; rc=$(( rc != 0 ? rc : r ))
      done
      timeout 110 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128,256 --seqs 512,1024,2048,4096,8192,16384 \
        --variants default,base,small-bc128@128,small-tma3@64,br192-rs@64 --budget-s 100 > "$W/ab.txt" 2>&1; r=$?
      tail -2 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 120 python3 bench/layouts_speed.py --out "$W" --n 2048,8192 --d 64,128,256 --sets 2 > "$W/layouts.txt" 2>&1
      r=$?; grep -c True "$W/layouts.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    layouts6)  # issue 14 v6: strided / GQA against contiguous with the persistent defaults at N = 2k/4k, twice (the
               # confirm6 run had d = 64 non-causal N = 2k at 1.05-1.08x, every other cell within 3.3%)
      rc=0
      for rep in 1 2; do
        timeout 100 python3 bench/layouts_speed.py --out "$W/rep$rep" --n 2048,4096 --d 64,128 --sets 3 \
          > "$W/layouts$rep.txt" 2>&1; r=$?; rc=$(( rc != 0 ? rc : r ))
        grep "^fa2_wgmma" "$W/layouts$rep.txt" | awk '{print $2, $3, $4, $5, $8}' | tr '\n' ';'; echo
      done ;;
    ncu6)  # issue 14 v6: ncu of forward()'s v6 default against cuDNN where it still trails (N = 512 at every d) and at
           # the causal moonshot cell (d = 128, 4k)
      OUT=$W MOONSHOT_CELLS=512x64x0,512x128x0,512x128x1,4096x128x1,512x256x1 timeout 220 \
        bash lab/ncu_moonshot.sh > "$W/run.txt" 2>&1; rc=$?
      tail -30 "$W/run.txt" ;;
    oqt)  # issue 14 v6d: O stored by TMA from the staging tile (O_TMA): GPU tests, memcheck on 3 CTAs, A/B (abba)
      speed_tests 120 "oqt"; rc=$?
      tail -3 "$W/tests.log"
      cfg=$(wgmma_builds 128:bc128-dyn-oqt:3 64:br192-rs-dyn-oqt:3)
      sanitize_wgmma memcheck float16,bfloat16 10 60 55 "$cfg"
      r=$?; tail -1 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 110 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128 --seqs 512,1024,2048,4096,8192,16384 \
        --variants default,bc128-dyn-oqt@128,br192-rs-dyn-oqt@64 --budget-s 100 > "$W/ab.txt" 2>&1; r=$?
      tail -2 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    v6e)  # issue 14 v6e: the tile counter that zeroes itself (atomicInc): the persistent builds' GPU tests and
          # forward()'s dispatch / layouts tests, memcheck and racecheck of forward()'s persistent builds on 3 CTAs
          # (O_TMA's first racecheck), then the grid: forward()'s default, the same after a torch.zeros launch (the
          # pre-v6e launcher), SDPA flash and cuDNN, every cell in order then reversed
      timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        -k "counter or sections or (size_candidate and dyn) or persistent or dynamic or oqt" > "$W/tests.log" 2>&1; rc=$?
      tail -3 "$W/tests.log"
      dispatch_tests "$W/tests2.log" 150; r=$?; tail -3 "$W/tests2.log"; rc=$(( rc != 0 ? rc : r ))
      cfg=$(wgmma_builds 128:bc128-dyn-oqt:3 64:small-tma3-dyn-oq:3 64:br192-rs-dyn-oq:3 256:dynamic:3)
      for tool in memcheck racecheck; do
        sanitize_wgmma "$tool" float16 6 170 160 "$cfg"
        r=$?; tail -2 "$W/$tool.txt"; rc=$(( rc != 0 ? rc : r ))
      done
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128,256 --seqs 512,1024,2048,4096,8192,16384 \
        --variants default,default-memset --order abba --budget-s 180 > "$W/ab.txt" 2>&1; r=$?
      tail -3 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    cand7)  # issue 14 after v6e: builds for the cells still behind cuDNN (d = 128 non-causal 1k-4k: Bc = 160 with O_TMA,
            # the rescale threshold; d = 64 causal <= 2k: the 3-CTA build with O_TMA): GPU tests, memcheck on 3 CTAs,
            # the A/B at N <= 4k (abba), ncu against cuDNN at d = 128 non-causal 4k and d = 64 non-causal 1k
      timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        -k "size_candidate and oqt" > "$W/tests.log" 2>&1; rc=$?
      tail -3 "$W/tests.log"
      cfg=$(wgmma_builds 128:bc160-dyn-oqt:3 128:bc128-dyn-oqt-r:3 64:small-tma3-dyn-oqt:3)
      sanitize_wgmma memcheck float16,bfloat16 10 90 85 "$cfg"
      r=$?; tail -1 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 150 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128 --seqs 512,1024,2048,4096 \
        --variants default,bc160-dyn-oqt@128,bc128-dyn-oqt-r@128,small-tma3-dyn-oqt@64,br192-rs-dyn-oqt@64 \
        --budget-s 130 > "$W/ab.txt" 2>&1; r=$?
      tail -12 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r ))
      OUT=$W MOONSHOT_CELLS=4096x128x0,1024x64x0 timeout 100 bash lab/ncu_moonshot.sh > "$W/ncu.txt" 2>&1
      r=$?; tail -8 "$W/ncu.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    confirm7)  # issue 14 after cand7: forward()'s new rules (d = 128 bc128-dyn-oqt-r at N <= 4k, d = 64 br192-rs-dyn-oqt
               # non-causal N <= 2k): dispatch and layouts tests, the whole grid against the v6e rules' builds, CONFIGS[128]
               # with the rescale threshold at 8k-16k, SDPA flash and cuDNN (abba), then strided / GQA against contiguous
      dispatch_tests "$W/tests.log" 150; rc=$?
      tail -3 "$W/tests.log"
      timeout 230 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128,256 --seqs 512,1024,2048,4096,8192,16384 \
        --variants default,bc128-dyn-oqt@128,rescale@128,br192-rs-dyn-oq@64,small-tma3@64 --budget-s 210 \
        > "$W/ab.txt" 2>&1; r=$?
      tail -14 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 100 python3 bench/layouts_speed.py --out "$W" --n 2048,4096 --d 64,128 --sets 3 > "$W/layouts.txt" 2>&1
      r=$?; grep "^fa2_wgmma" "$W/layouts.txt" | awk '{print $2, $3, $4, $5, $8}' | tr '\n' ';'; echo
      rc=$(( rc != 0 ? rc : r )) ;;
    rescale8k)  # issue 14: d = 128 N > 4k with the rescale threshold in forward()'s rule (confirm7: 0.957 geomean against
                # CONFIGS): the knob's GPU tests, dispatch / layouts tests, memcheck of the build, the A/B once more (abba)
      speed_tests 150 "rescale or stale or threshold"; rc=$?
      tail -2 "$W/tests.log"
      dispatch_tests "$W/tests2.log" 150; r=$?; tail -2 "$W/tests2.log"; rc=$(( rc != 0 ? rc : r ))
      cfg=$(wgmma_builds 128:rescale)
      sanitize_wgmma memcheck float16,bfloat16 10 60 55 "$cfg"
      r=$?; tail -1 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 120 python3 lab/ab_wgmma_speed.py --out "$W" --dims 128 --seqs 4096,8192,16384 \
        --variants default,base,rescale --budget-s 100 > "$W/ab.txt" 2>&1; r=$?
      tail -6 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    bc64)  # issue 14: key blocks that tile N = 512-2048 exactly (Bc = 64) at d = 64 (3 CTAs) and d = 256: GPU tests,
           # memcheck / racecheck of the persistent builds on 3 CTAs, the A/B at N <= 2k against forward()'s default
      timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        -k "size_candidate and bc64" > "$W/tests.log" 2>&1; rc=$?
      tail -2 "$W/tests.log"
      cfg=$(wgmma_builds 64:small-tma3-bc64-dyn-oq:3 256:bc64-dyn:3)
      for tool in memcheck racecheck; do
        sanitize_wgmma "$tool" float16 6 100 95 "$cfg"
        r=$?; tail -1 "$W/$tool.txt"; rc=$(( rc != 0 ? rc : r ))
      done
      timeout 100 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,256 --seqs 512,1024,2048 \
        --variants default,small-tma3-bc64-dyn-oq@64,bc64@256,bc64-dyn@256 --budget-s 90 > "$W/ab.txt" 2>&1; r=$?
      grep -A16 "^dtype" "$W/ab.txt" | head -16; tail -8 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    bc64b)  # issue 14: forward()'s d = 256 rule with bc64-dyn (causal <= 2k, non-causal 512): dispatch tests, the A/B
            # once more against the builds it replaced, and at causal 4k-8k where "dynamic" stays
      timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_tc.py tests/test_kernels_layouts.py \
        -k "head_dims or (wgmma and matches_reference)" > "$W/tests.log" 2>&1; rc=$?
      tail -2 "$W/tests.log"
      timeout 100 python3 lab/ab_wgmma_speed.py --out "$W" --dims 256 --seqs ${BC64_SEQS:-512,1024,2048,4096,8192} \
        --variants default,base,dynamic,bc64-dyn --budget-s 90 > "$W/ab.txt" 2>&1; r=$?
      grep -A12 "^dtype" "$W/ab.txt" | head -22; tail -4 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    closeout)  # what stop 15 left unrun on the GPU: the counter tests as rewritten in review (tile counts mixed on one
               # stream, CUDA-graph capture), forward()'s dispatch and layouts tests, then the grid twice (abba) with
               # every rule of v6f (d = 256 Bc = 64 included)
      speed_tests 120 "counter"; rc=$?
      tail -2 "$W/tests.log"
      dispatch_tests "$W/tests2.log" 120; r=$?; tail -2 "$W/tests2.log"; rc=$(( rc != 0 ? rc : r ))
      for rep in 1 2; do
        timeout 170 python3 lab/ab_wgmma_speed.py --out "$W/run$rep" --dims 64,128,256 \
          --seqs 512,1024,2048,4096,8192,16384 --variants default --order abba --budget-s 150 > "$W/ab$rep.txt" 2>&1
        r=$?; grep "^cells with" "$W/ab$rep.txt"; rc=$(( rc != 0 ? rc : r ))
      done ;;
    ahead7c|ahead7d)  # issue 14 v7c (v7d: two P tiles): QK_AHEAD with its products pipelined (v3d's builds were serialised by ptxas, C7515): the
              # ahead builds' GPU tests (hypothesis shapes, 1 and 3 CTAs, long key loops, strided / GQA, rescale paths),
              # then the A/B (abba) at d = 64, 96, 128 against CONFIGS and forward()'s default, SDPA flash and cuDNN
      speed_tests 230 "ahead"; rc=$?
      tail -3 "$W/tests.log"
      timeout 330 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128 --seqs 512,1024,2048,4096,8192,16384 \
        --order abba --variants default,base,ahead,dynamic+ahead --budget-s 310 > "$W/ab.txt" 2>&1; r=$?
      grep "^cells with" "$W/ab.txt"; tail -16 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    ahead7csan)  # v7c-v7d sanitizers: memcheck and racecheck of the pipelined QK_AHEAD builds (the persistent one on 3 CTAs)
      rc=0; cfg=$(wgmma_builds 64:ahead 64:dynamic+ahead:3 128:ahead)
      for tool in memcheck racecheck; do
        sanitize_wgmma "$tool" float16 6 150 140 "$cfg"
        r=$?; tail -1 "$W/$tool.txt"; rc=$(( rc != 0 ? rc : r ))
      done ;;
    ahead7dncu)  # v7d: why QK_AHEAD loses at d = 64 (1.05-1.35x the time of the same build without it): ncu of CONFIGS[64]
                 # and its QK_AHEAD build beside forward()'s default and cuDNN at N = 4096 and 512, non-causal
      builds=$(python3 -c "
import json
from kernels import fa2_wgmma as f
print(json.dumps({'base': f.CONFIGS[64], 'ahead': f.speed_configs(64)['ahead']}))")
      OUT=$W MOONSHOT_CELLS=4096x64x0,512x64x0 MOONSHOT_BUILDS=$builds timeout 200 bash lab/ncu_moonshot.sh \
        > "$W/ncu.txt" 2>&1; rc=$?
      tail -14 "$W/ncu.txt" ;;
    rs64)  # issue 14: d = 64 Br = Bc = 128 persistent with O_TILE / O_TMA (whole tiles at N = 512 and 1k, where Br = 192 and
           # the 3-CTA build's Bc = 96 each put 11% of their products on padding), with and without ping-pong: GPU tests,
           # memcheck on 3 CTAs, then the A/B (abba) at N <= 4k against forward()'s default and the builds it runs
      timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        -k "size_candidate and rs-dyn-oqt and not br192" > "$W/tests.log" 2>&1; rc=$?
      tail -2 "$W/tests.log"
      cfg=$(wgmma_builds 64:rs-dyn-oqt:3 64:rs-dyn-oqt-pp:3)
      sanitize_wgmma memcheck float16,bfloat16 6 80 75 "$cfg"
      r=$?; tail -1 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64 --seqs 512,1024,2048,4096 --order abba \
        --variants default,rs-dyn-oqt,rs-dyn-oqt-pp,br192-rs-dyn-oqt,small-tma3-dyn-oq --budget-s 180 > "$W/ab.txt" 2>&1
      r=$?; grep "^cells with" "$W/ab.txt"; tail -24 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    levels_persist)  # issue 11: the GPU model's levels held out on the builds forward() runs since v6 (persistent, O_TMA,
                     # the causal sections): ncu levels of fa2_wgmma's default and cuDNN at N = 512, 1k and 4k
      ncu_levels 250 512x64,512x128,1024x128,4096x64,4096x128 fa2_wgmma,sdpa_cudnn; rc=$?
      tail -24 "$W/run.txt" ;;
    levels256)  # issue 11: the levels at d = 256, never profiled (forward()'s Bc = 64 / 80 builds, persistent for causal, and
                # cuDNN's one-K/V-stage kernel): N = 512, 4k (causal too) and 16k
      ncu_levels 250 512x256,4096x256,16384x256 fa2_wgmma,sdpa_cudnn; rc=$?
      tail -16 "$W/run.txt" ;;
    levels_causal)  # issue 11: the levels of forward()'s persistent causal builds at short N, where the tile order in sections
                    # of heads (v6a) is what keeps DRAM near compulsory: d = 64, 128 at N = 512, 1k, 2k, causal and not
      ncu_levels 250 512x64,1024x64,2048x64,512x128,1024x128,2048x128 fa2_wgmma,sdpa_cudnn 1; rc=$?
      tail -30 "$W/run.txt" ;;
    levels96)  # issue 11: ncu levels at d = 96, never profiled (fa2_wgmma's default, cuDNN, SDPA flash; N = 1k and 4k, causal
               # and not): which tile cuDNN runs at d = 96 (its kernel name), and held-out DRAM / L2 rows at a fourth d
      ncu_levels 280 1024x96,4096x96 fa2_wgmma,sdpa_cudnn,sdpa_flash 1; rc=$?
      tail -20 "$W/run.txt" ;;
    d96)  # issue 14: d = 96 at short N, d = 128's persistent O_TMA form (SIZE_CANDIDATES[96]): GPU tests, memcheck and
          # racecheck on 3 CTAs, then the A/B (abba) at N = 512-4096 against the default (CONFIGS[96]) and cuDNN
      timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        -k "size_candidate and 96-dyn-oqt" > "$W/tests.log" 2>&1; rc=$?
      tail -2 "$W/tests.log"
      cfg=$(wgmma_builds 96:dyn-oqt:3 96:dyn-oqt-r:3)
      for tool in memcheck racecheck; do
        sanitize_wgmma "$tool" float16,bfloat16 6 80 75 "$cfg"
        r=$?; tail -1 "$W/$tool.txt"; rc=$(( rc != 0 ? rc : r ))
      done
      timeout 170 python3 lab/ab_wgmma_speed.py --out "$W" --dims 96 --seqs 512,768,1024,1536,2048,3072,4096 \
        --order abba --variants default,dyn-oqt,dyn-oqt-r --budget-s 150 > "$W/ab.txt" 2>&1
      r=$?; grep "^cells with" "$W/ab.txt"; tail -14 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    d96rule)  # issue 14: SIZE_RULES[96] (dyn-oqt-r up to Nk = 4096): racecheck of the build on 3 CTAs (fp16; d96's
              # fp16+bf16 run outlived its limit), forward()'s dispatch and layouts tests, d = 96's grid (abba)
      sanitize_wgmma racecheck float16 6 230 220 "$(wgmma_builds 96:dyn-oqt-r:3)"
      rc=$?; tail -1 "$W/racecheck.txt"
      dispatch_tests "$W/tests.log" 120; r=$?; tail -2 "$W/tests.log"; rc=$(( rc != 0 ? rc : r ))
      timeout 120 python3 lab/ab_wgmma_speed.py --out "$W" --dims 96 --seqs 512,1024,2048,4096,8192,16384 \
        --order abba --variants default,base --budget-s 100 > "$W/ab.txt" 2>&1
      r=$?; grep "^cells with" "$W/ab.txt"; tail -10 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    opcodes512)  # issue 14: where cuDNN's fewer instructions at N = 512 come from: SASS instructions executed per opcode
                 # (sass__inst_executed_per_opcode, its instances printed), forward()'s default against cuDNN at N = 512,
                 # d = 64 / 128 / 256 non-causal; the InstructionStats section if this ncu cannot print instances
      cells=512x64x0,512x128x0,512x256x0
      MOONSHOT_CELLS=$cells timeout 150 ncu --clock-control none --csv --page raw --print-metric-instances details \
        --kernel-name "regex:fa2_wgmma|fprop" --metrics sass__inst_executed_per_opcode,sass__inst_executed_per_opcode_with_modifier_selective,smsp__inst_executed.sum \
        python3 lab/ncu_moonshot_target.py > "$W/opcodes.csv" 2> "$W/opcodes.stderr"; rc=$?
      if [ $rc -ne 0 ]; then
        MOONSHOT_CELLS=$cells timeout 150 ncu --clock-control none --csv --page details --section InstructionStats \
          --kernel-name "regex:fa2_wgmma|fprop" python3 lab/ncu_moonshot_target.py > "$W/opcodes_details.csv" \
          2> "$W/opcodes_details.stderr"; rc=$?
      fi
      tail -3 "$W"/opcodes*.stderr; wc -c "$W"/opcodes*.csv ;;
    desc9)  # issue 14 v9: DESC_STEP=1 (each wgmma descriptor built once per product, stepped per k-slice; opcodes512
            # counted ~10% of the d = 128 N = 512 instructions in per-wgmma descriptor math): its GPU tests on every rule
            # build, memcheck of two persistent builds on 3 CTAs, then the grid (abba) against forward()'s default
      speed_tests 200 "desc_step"; rc=$?
      tail -2 "$W/tests.log"
      cfg=$(python3 -c "
import json
from kernels import fa2_wgmma as f
b = lambda d, n: {d: dict(f.named_build(d, n), DESC_STEP=1, GRID=3)}
print(json.dumps({'fa2_wgmma': [b(128, 'bc128-dyn-oqt-r'), b(64, 'br192-rs-dyn-oq')]}))")
      sanitize_wgmma memcheck float16 6 70 65 "$cfg"
      r=$?; tail -1 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128,256 --seqs 512,1024,2048,4096,8192,16384 \
        --order abba --variants default,default+DESC_STEP=1 --budget-s 180 > "$W/ab.txt" 2>&1
      r=$?; grep "^cells with" "$W/ab.txt"; tail -12 "$W/ab.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    desc9ab)  # issue 14 v9: the DESC_STEP grid A/B again (desc9's gains were ~1%, one run)
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128,256 --seqs 512,1024,2048,4096,8192,16384 \
        --order abba --variants default,default+DESC_STEP=1 --budget-s 180 > "$W/ab.txt" 2>&1
      rc=$?; grep "^cells with" "$W/ab.txt"; tail -12 "$W/ab.txt" ;;
    desc9final)  # issue 14 v9: forward()'s default now with DESC_STEP=1 (kernels/fa2_wgmma.py DEFAULT_KNOBS): the dispatch,
                 # head-dim and layouts GPU tests (strided, GQA) on that path
      dispatch_tests "$W/tests.log" 250; rc=$?; tail -2 "$W/tests.log" ;;
    wgskip)  # issue 14 v10: WG_SKIP's GPU tests, memcheck (every WG_SKIP build) and racecheck (d = 64 Br = 192 and d = 128
             # ping-pong) on 3 CTAs
      speed_tests 220 "wg_skip"; rc=$?; tail -2 "$W/tests.log"
      sanitize_wgmma memcheck float16 3 130 120 "$(skip_builds 3)"; r=$?; tail -2 "$W/memcheck.txt"
      rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma racecheck float16 3 150 140 "$(skip_builds 3 'i in (0, 2, 3, 5)')"; r=$?; tail -2 "$W/racecheck.txt"
      rc=$(( rc != 0 ? rc : r )) ;;
    wgskipab)
      timeout 280 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 --seqs 512,1000,1024,2048,3000,4096,8192 \
        --order abba --variants default,default+WG_SKIP=1 --budget-s 250 > "$W/ab.txt" 2>&1
      rc=$?; grep "^cells with" "$W/ab.txt"; tail -8 "$W/ab.txt" ;;
    wgskipsan)  # WG_SKIP's persistent builds on 2 CTAs at the sanitizer's first 7 at-scale shapes, the 2-head ones giving
                # each CTA idle and working tiles in turn (Nq = 300: a warpgroup idle in every head's last Q block)
      cfg=$(skip_builds 2 "c.get('PERSISTENT')")
      sanitize_wgmma memcheck float16 7 110 100 "$cfg"; rc=$?; tail -2 "$W/memcheck.txt"
      sanitize_wgmma racecheck float16 7 150 140 "$cfg"; r=$?; tail -2 "$W/racecheck.txt"
      rc=$(( rc != 0 ? rc : r )) ;;
    wgskipfinal)  # what the v10 stop could not run: forward()'s dispatch / layouts tests with WG_SKIP at every d (d = 96 and
                  # 128 were not run with it), and racecheck of the two d = 256 persistent WG_SKIP builds on 2 CTAs (wgskipsan's
                  # racecheck stopped at its limit in the first of them)
      dispatch_tests "$W/dispatch.log" 200; rc=$?; tail -2 "$W/dispatch.log"
      sanitize_wgmma racecheck float16 7 280 270 "$(skip_builds 2 "d == 256 and c.get('PERSISTENT')")"; r=$?
      tail -2 "$W/racecheck.txt"
      rc=$(( rc != 0 ? rc : r )) ;;
    wgskipab2)  # the second run (when WG_SKIP was d = 64's default only): forward()'s default against the same builds with it
                # off at d = 64 and on at d = 96/128/256
      timeout 280 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 --seqs 512,1000,1024,2048,3000,4096,8192 \
        --order abba --variants default,default+WG_SKIP=0@64,default+WG_SKIP=1@96+128+256 --budget-s 250 > "$W/ab.txt" 2>&1
      rc=$?; grep "^cells with" "$W/ab.txt"; tail -8 "$W/ab.txt" ;;
    knobs)  # the GPU tests of every speed, size and tile build (tests/test_kernels_wgmma_speed_gpu.py): the d = 64
            # speed builds (persistent, QK_AHEAD) carry ROW_SUM_MMA since it entered CONFIGS[64]
      timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        > "$W/tests.log" 2>&1; rc=$?
      tail -5 "$W/tests.log" ;;
    fresh11t)  # issue 11: the one-slot K/V ring builds (ring1, d = 128 and 256: measurement builds for the GPU model's
               # cuDNN) before fresh11 times them: their GPU tests (hypothesis shapes, a long key loop, strided / GQA)
               # and racecheck at scale
      speed_tests 150 "size_candidate and ring1"; rc=$?
      tail -2 "$W/tests.log"
      sanitize_wgmma racecheck float16 6 150 140 "$(wgmma_builds 128:ring1 256:ring1)"
      r=$?; tail -2 "$W/racecheck.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    fresh11)  # issue 11 (and 14): shapes no earlier run timed (N = 768, 1536, 3072, 6144, 12288; d = 64, 96, 128, 256),
              # the GPU model's fresh held-out check: forward()'s default, CONFIGS, the ring1 builds, SDPA flash and
              # cuDNN, twice (abba; the first run also compiles every build)
      rc=0
      for rep in 1 2; do
        timeout $(( rep == 1 ? 270 : 210 )) python3 lab/ab_wgmma_speed.py --out "$W/run$rep" --dims 64,96,128,256 \
          --seqs 768,1536,3072,6144,12288 --variants default,base,ring1@128+256 --order abba \
          --budget-s $(( rep == 1 ? 240 : 180 )) > "$W/ab$rep.txt" 2>&1
        r=$?; grep "^cells with" "$W/ab$rep.txt"; rc=$(( rc != 0 ? rc : r ))
      done ;;
    cskip)
      timeout 260 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        -k "wg_causal_skip" > "$W/tests.log" 2>&1; rc=$?; tail -3 "$W/tests.log"
      cfg=$(builds 2 "t.CSKIP" "c.get('PERSISTENT') and (d, c['BLOCK_N'], c.get('NWG', 2), c.get('O_TMA', 0)) in
        {(256, 64, 2, 0), (128, 128, 2, 1), (64, 128, 3, 1), (128, 64, 2, 1)}")
      sanitize_wgmma memcheck float16 7 120 110 "$cfg"; r=$?; tail -2 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma racecheck float16 7 170 160 "$cfg"; r=$?; tail -2 "$W/racecheck.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    cskipab)
      timeout 300 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 --seqs 512,1024,2048,4096,8192 \
        --order abba --variants default,default+WG_CAUSAL_SKIP=1,br192-rs-dyn-oqt-cs@64,bc64-dyn-oqt-r-cs@128 \
        --budget-s 270 > "$W/ab.txt" 2>&1
      rc=$?; grep "^cells with" "$W/ab.txt"; tail -12 "$W/ab.txt" ;;
    carry)
      speed_tests 240 "turn_carry"; rc=$?; tail -3 "$W/tests.log"
      cfg=$(builds 2 "t.CARRY" "c.get('PERSISTENT')")
      sanitize_wgmma synccheck float16 7 100 90 "$cfg"; r=$?; tail -2 "$W/synccheck.txt"; rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma memcheck float16 7 80 70 "$cfg"; r=$?; tail -2 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma racecheck float16 7 150 140 "$cfg"; r=$?; tail -2 "$W/racecheck.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    carryab)
      timeout 300 python3 lab/ab_wgmma_speed.py --out "$W" --dims 96,128,256 --seqs 512,1024,2048,4096,8192 \
        --order abba --variants default,default+TURN_CARRY=1 --budget-s 270 > "$W/ab.txt" 2>&1
      rc=$?; grep "^cells with" "$W/ab.txt"; tail -10 "$W/ab.txt" ;;
    d64rule)
      speed_tests 100 "desc_step and d64-0"; rc=$?; tail -2 "$W/tests.log"
      dispatch_tests "$W/dispatch.log" 100; r=$?; rc=$(( rc != 0 ? rc : r )); tail -2 "$W/dispatch.log"
      cfg=$(builds 2 "[(64, f.default_config(64, 512, True, True))]")
      sanitize_wgmma memcheck float16 7 40 35 "$cfg"; r=$?; tail -1 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma racecheck float16 1 50 45 "$cfg"; r=$?; tail -1 "$W/racecheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 60 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64 --seqs 512,1024 --order abba \
        --variants default,default+BLOCK_N=96+O_TMA=0 --budget-s 50 > "$W/ab.txt" 2>&1
      r=$?; rc=$(( rc != 0 ? rc : r )); grep "^cells with" "$W/ab.txt"; tail -4 "$W/ab.txt" ;;
    d64small)
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64 --seqs 512,1024,2048 --order abba \
        --variants default,default+BLOCK_N=64,default+O_TMA=1,default+BLOCK_N=64+O_TMA=1 --budget-s 180 > "$W/ab.txt" 2>&1
      rc=$?; grep "^cells with" "$W/ab.txt"; tail -12 "$W/ab.txt" ;;
    carryfinal)
      dispatch_tests "$W/dispatch.log" 150; rc=$?; tail -2 "$W/dispatch.log"
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W" --dims 96,128,256 --seqs 512,1024,2048,4096,8192 \
        --order abba --variants default,default+TURN_CARRY=0@96+128 --budget-s 180 > "$W/ab.txt" 2>&1
      r=$?; rc=$(( rc != 0 ? rc : r )); grep "^cells with" "$W/ab.txt"; tail -10 "$W/ab.txt" ;;
    cskipfinal)
      dispatch_tests "$W/dispatch.log" 150; rc=$?; tail -2 "$W/dispatch.log"
      timeout 300 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 --seqs 512,1024,2048,4096,8192 \
        --order abba --variants default,default+WG_CAUSAL_SKIP=0 --budget-s 270 > "$W/ab.txt" 2>&1
      r=$?; rc=$(( rc != 0 ? rc : r )); grep "^cells with" "$W/ab.txt"; tail -12 "$W/ab.txt" ;;
    waithint)
      timeout 300 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 --seqs 512,1024,2048,4096,8192 \
        --order abba --variants default,default+WAIT_HINT=10000000 --budget-s 270 > "$W/ab.txt" 2>&1
      rc=$?; grep "^cells with" "$W/ab.txt"; tail -8 "$W/ab.txt" ;;
    grid20)  # issues 11/14 after v11/v12: the target grid with forward()'s defaults, SDPA flash and cuDNN beside, abba,
             # fp16/bf16, d = 64/96/128/256, N = 512..16k, causal and not (the first full grid since v10)
      timeout 480 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 --seqs 512,1024,2048,4096,8192,16384 \
        --variants default --order abba --budget-s 440 > "$W/ab.txt" 2>&1; rc=$?
      grep "^cells with" "$W/ab.txt"; tail -12 "$W/ab.txt" ;;
    odirect)  # issue 14 v13 O_DIRECT (O from registers, Q handed back after the last S): GPU tests of its builds,
              # memcheck / racecheck / synccheck of d = 256's on 2 CTAs at scale, then the A/B at d = 256 (abba)
      speed_tests 200 "o_direct"; rc=$?; tail -3 "$W/tests.log"
      cfg=$(builds 2 "t.ODIRECT" "d == 256 and i < 2")
      sanitize_wgmma memcheck float16 7 60 50 "$cfg"; r=$?; tail -2 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma racecheck float16 5 110 100 "$cfg"; r=$?; tail -2 "$W/racecheck.txt"; rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma synccheck float16 5 60 50 "$cfg"; r=$?; tail -2 "$W/synccheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W" --dims 256 --seqs 512,1024,2048,4096,8192 --order abba \
        --variants default,default+PERSISTENT=2+O_DIRECT=1,default+PERSISTENT=2+O_DIRECT=1+TURN_CARRY=0 --budget-s 180 \
        > "$W/ab.txt" 2>&1; r=$?; rc=$(( rc != 0 ? rc : r )); grep "^cells with" "$W/ab.txt"; grep -A30 "^dtype" "$W/ab.txt" | tail -24 ;;
    odirect2)  # v13 after odirect (O_DIRECT=1 with TURN_CARRY 1.03-1.11x the time at N <= 2k): the 16-byte form
               # (O_DIRECT=2) tested and sanitized, then A/B of both forms with and without TURN_CARRY at d = 256
      speed_tests 200 "o_direct"; rc=$?; tail -3 "$W/tests.log"
      cfg=$(builds 2 "t.ODIRECT" "d == 256 and c['O_DIRECT'] == 2")
      sanitize_wgmma memcheck float16 7 60 50 "$cfg"; r=$?; tail -2 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma racecheck float16 5 110 100 "$cfg"; r=$?; tail -2 "$W/racecheck.txt"; rc=$(( rc != 0 ? rc : r ))
      v=default+PERSISTENT=2+O_DIRECT
      timeout 220 python3 lab/ab_wgmma_speed.py --out "$W" --dims 256 --seqs 512,1024,2048,4096 --order abba \
        --variants default,$v=1+TURN_CARRY=0,$v=2,$v=2+TURN_CARRY=0 --budget-s 200 \
        > "$W/ab.txt" 2>&1; r=$?; rc=$(( rc != 0 ? rc : r )); grep "^cells with" "$W/ab.txt"; grep -A40 "^dtype" "$W/ab.txt" | tail -30 ;;
    odirect3)  # v13, second run: O_DIRECT=2 without TURN_CARRY against forward()'s d = 256 builds at every N (odirect2:
               # 0.968-0.973 geomean at N <= 4k), and O_DIRECT=2 in place of O_TILE + O_TMA in d = 96/128's rule builds
      mkdir -p "$W/d256" "$W/d128"
      timeout 230 python3 lab/ab_wgmma_speed.py --out "$W/d256" --dims 256 --seqs 512,1024,2048,4096,8192,16384 \
        --order abba --variants default,default+PERSISTENT=2+O_DIRECT=2+TURN_CARRY=0 --budget-s 210 \
        > "$W/d256/ab.txt" 2>&1; rc=$?; grep "^cells with" "$W/d256/ab.txt"; grep -A40 "^dtype" "$W/d256/ab.txt" | tail -32
      timeout 170 python3 lab/ab_wgmma_speed.py --out "$W/d128" --dims 96,128 --seqs 512,1024,2048,4096 \
        --order abba --variants default,default+O_TILE=0+O_TMA=0+O_DIRECT=2 --budget-s 150 \
        > "$W/d128/ab.txt" 2>&1; r=$?; rc=$(( rc != 0 ? rc : r )); grep -A40 "^dtype" "$W/d128/ab.txt" | tail -12 ;;
    odirectfinal)  # v13 in forward() (SIZE_RULES[256]: O_DIRECT=2, persistent at every N): the O_DIRECT GPU tests,
                   # forward()'s dispatch tests, the sanitizers on its two d = 256 builds at scale, the second run of
                   # O_DIRECT=2 in place of O_TILE + O_TMA at d = 96/128 (odirect3: causal 0.982-0.985), then the grid
      mkdir -p "$W/d128" "$W/grid"
      speed_tests 120 "o_direct"; rc=$?; tail -2 "$W/tests.log"
      dispatch_tests "$W/dispatch.log" 130; r=$?; tail -2 "$W/dispatch.log"; rc=$(( rc != 0 ? rc : r ))
      cfg=$(builds 2 "t.ODIRECT" "d == 256 and i < 2")
      sanitize_wgmma memcheck bfloat16 7 50 40 "$cfg"; r=$?; tail -1 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma racecheck float16 5 80 70 "$cfg"; r=$?; tail -1 "$W/racecheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 70 python3 lab/ab_wgmma_speed.py --out "$W/d128" --dims 96,128 --seqs 512,1024,2048,4096 \
        --order abba --variants default,default+O_TILE=0+O_TMA=0+O_DIRECT=2+TURN_CARRY=1 --budget-s 60 \
        > "$W/d128/ab.txt" 2>&1; r=$?; rc=$(( rc != 0 ? rc : r )); grep -A40 "^dtype" "$W/d128/ab.txt" | tail -7
      timeout 140 python3 lab/ab_wgmma_speed.py --out "$W/grid" --dims 64,96,128,256 \
        --seqs 512,1024,2048,4096,8192,16384 --variants default --order abba --budget-s 125 > "$W/grid/ab.txt" 2>&1
      r=$?; rc=$(( rc != 0 ? rc : r )); grep "^cells with" "$W/grid/ab.txt" | tail -1; grep -A100 "^dtype" "$W/grid/ab.txt" | awk '$8+0 < 1.0' ;;
    layouts13)  # issue 14 after v13: strided / GQA against contiguous with forward()'s defaults at every d (d = 256 now
                # persistent with O_DIRECT=2; the v6 check ran d = 64/128 only), N = 2k/4k, causal and not
      timeout 230 python3 bench/layouts_speed.py --out "$W" --n 2048,4096 --d 64,96,128,256 --sets 3 \
        > "$W/layouts.txt" 2>&1; rc=$?
      grep "^fa2_wgmma" "$W/layouts.txt" | awk '{print $2, $3, $4, $5, $8}' | tr '\n' ';'; echo; tail -4 "$W/layouts.txt" ;;
    d64c13)  # issue 14 after v13: d = 64 causal N <= 2k (0.96-0.98 of cuDNN): forward()'s 3-CTA builds with l from the
             # tensor core (ROW_SUM_MMA, fp16 only: bf16 drops it) and with O from registers in place of O_TILE
      timeout 120 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64 --seqs 512,1024,2048 --order abba \
        --variants default,default+ROW_SUM_MMA=1,default+O_TILE=0+O_TMA=0+O_DIRECT=2 --budget-s 100 \
        > "$W/ab.txt" 2>&1; rc=$?; grep -A20 "^dtype" "$W/ab.txt" | tail -16 ;;
    d64od)  # after d64c13 (d = 64 with O_DIRECT=2 in place of O_TILE: causal 0.962, non-causal 0.984 at N <= 2k): the
            # O_DIRECT GPU tests with d = 64's rule builds so changed, the second A/B at every N, strided / GQA twice
      mkdir -p "$W/ab" "$W/rep1" "$W/rep2"
      speed_tests 150 "o_direct"; rc=$?; tail -2 "$W/tests.log"
      timeout 130 python3 lab/ab_wgmma_speed.py --out "$W/ab" --dims 64 --seqs 512,1024,2048,4096,8192,16384 \
        --order abba --variants default,default+O_TILE=0+O_TMA=0+O_DIRECT=2 --budget-s 110 \
        > "$W/ab/ab.txt" 2>&1; r=$?; rc=$(( rc != 0 ? rc : r )); grep -A40 "^dtype" "$W/ab/ab.txt" | tail -30
      for rep in 1 2; do
        timeout 100 python3 bench/layouts_speed.py --out "$W/rep$rep" --n 2048,4096 --d 64,96,128,256 --sets 3 \
          > "$W/rep$rep/layouts.txt" 2>&1; r=$?; rc=$(( rc != 0 ? rc : r ))
        grep "^fa2_wgmma" "$W/rep$rep/layouts.txt" | awk '$2 != "contiguous" {print $2, $3, $4, $5, $8}' | tr '\n' ';'; echo
      done ;;
    v13final)  # d = 64's causal rules with O_DIRECT=2 (d64c13, d64od): the O_DIRECT GPU tests, forward()'s dispatch tests,
               # memcheck / racecheck of the three new d = 64 builds on 2 CTAs at scale, then the target grid
      mkdir -p "$W/grid"
      speed_tests 90 "o_direct"; rc=$?; tail -1 "$W/tests.log"
      dispatch_tests "$W/dispatch.log" 100; r=$?; tail -1 "$W/dispatch.log"; rc=$(( rc != 0 ? rc : r ))
      cfg=$(builds 2 "f.default_builds()" "d == 64 and c.get('O_DIRECT')")
      sanitize_wgmma memcheck bfloat16 7 60 50 "$cfg"; r=$?; tail -1 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma racecheck float16 5 110 100 "$cfg"; r=$?; tail -1 "$W/racecheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 150 python3 lab/ab_wgmma_speed.py --out "$W/grid" --dims 64,96,128,256 \
        --seqs 512,1024,2048,4096,8192,16384 --variants default --order abba --budget-s 130 > "$W/grid/ab.txt" 2>&1
      r=$?; rc=$(( rc != 0 ? rc : r )); grep "^cells with" "$W/grid/ab.txt" | tail -1; grep -A100 "^dtype" "$W/grid/ab.txt" | awk '$9+0 < 1.0' ;;
    d96od)  # d = 96's causal rule with O_DIRECT=2 (two runs: causal 0.985 / 0.981): forward()'s dispatch tests, memcheck and
            # racecheck of the build on 2 CTAs at scale, a third A/B against the O_TILE build it replaced
      dispatch_tests "$W/dispatch.log" 80; rc=$?; tail -1 "$W/dispatch.log"
      cfg=$(builds 2 "f.default_builds()" "d == 96 and c.get('O_DIRECT')")
      sanitize_wgmma memcheck bfloat16 7 40 30 "$cfg"; r=$?; tail -1 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma racecheck float16 5 80 70 "$cfg"; r=$?; tail -1 "$W/racecheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 60 python3 lab/ab_wgmma_speed.py --out "$W" --dims 96 --seqs 512,1024,2048,4096 --order abba \
        --variants default,default+O_DIRECT=0+O_TILE=1+O_TMA=1 --budget-s 50 > "$W/ab.txt" 2>&1; r=$?
      rc=$(( rc != 0 ? rc : r )); grep -A20 "^dtype" "$W/ab.txt" | tail -8 ;;
    stages21)  # stop 21: the O_DIRECT GPU tests after the dead s_stage copy left O_DIRECT builds (their cubins changed),
               # the A/B tool's rotation with its control entry (default-again), and a third K/V slot for the N = 512
               # cells still behind cuDNN: d = 96/128 with O from registers (frees O_TILE's 32 KB) + STAGES=3, d = 64's
               # 3-CTA causal build with 3 and 4 slots
      mkdir -p "$W/d128" "$W/d64"
      speed_tests 120 "o_direct"; rc=$?; tail -1 "$W/tests.log"
      v=default+O_TILE=0+O_TMA=0+O_DIRECT=2+TURN_CARRY=1
      timeout 150 python3 lab/ab_wgmma_speed.py --out "$W/d128" --dims 96,128 --seqs 512,1024,2048 --order abba \
        --variants default,default-again,$v,$v+STAGES=3 --budget-s 135 > "$W/d128/ab.txt" 2>&1; r=$?
      rc=$(( rc != 0 ? rc : r )); grep -A40 "^dtype" "$W/d128/ab.txt" | tail -26
      timeout 70 python3 lab/ab_wgmma_speed.py --out "$W/d64" --dims 64 --seqs 512 --order abba \
        --variants default,default-again,default+STAGES=3,default+STAGES=4 --budget-s 60 > "$W/d64/ab.txt" 2>&1; r=$?
      rc=$(( rc != 0 ? rc : r )); grep -A20 "^dtype" "$W/d64/ab.txt" | tail -10 ;;
    stages21b)  # after stages21 (d = 64 N = 512 with four K/V slots: causal 0.957-0.970, non-causal 0.978-0.989): the GPU
                # tests of d = 64's four-slot builds (SIZE_CANDIDATES *-s4), then the A/B at N = 512-8k
      speed_tests 150 "size_candidate and s4"; rc=$?; tail -1 "$W/tests.log"
      timeout 230 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64 --seqs 512,1024,2048,4096,8192 --order abba \
        --variants default,default-again,default+STAGES=3,default+STAGES=4,small-tma3-bc64-dyn-od2-s4 --budget-s 210 \
        > "$W/ab.txt" 2>&1; r=$?; rc=$(( rc != 0 ? rc : r )); grep -A30 "^dtype" "$W/ab.txt" | tail -28 ;;
    stages21c)  # SIZE_RULES[64] with four K/V slots in three of its builds (stages21, stages21b): the GPU tests of the
                # four-slot builds and of d = 128's two-CTA candidates, the O_DIRECT tests (forward()'s O_DIRECT builds
                # now include the four-slot ones), forward()'s dispatch tests, memcheck / racecheck of the new rule
                # builds on 2 CTAs at scale; the third A/B of the slots (default against default+STAGES=2, the builds
                # they replaced) at N = 512-16k; d = 128's two-CTA builds against the default at N <= 2k
      mkdir -p "$W/d64" "$W/d128"
      timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        -k "(size_candidate and (s4 or small2)) or o_direct" > "$W/tests.log" 2>&1; rc=$?; tail -1 "$W/tests.log"
      dispatch_tests "$W/dispatch.log" 100; r=$?; tail -1 "$W/dispatch.log"; rc=$(( rc != 0 ? rc : r ))
      cfg=$(builds 2 "f.default_builds()" "d == 64 and c.get('STAGES') == 4")
      sanitize_wgmma memcheck bfloat16 7 60 50 "$cfg"; r=$?; tail -1 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma racecheck float16 5 100 90 "$cfg"; r=$?; tail -1 "$W/racecheck.txt"; rc=$(( rc != 0 ? rc : r ))
      timeout 110 python3 lab/ab_wgmma_speed.py --out "$W/d64" --dims 64 --seqs 512,1024,2048,4096,8192,16384 \
        --order abba --variants default,default-again,default+STAGES=2 --budget-s 100 > "$W/d64/ab.txt" 2>&1; r=$?
      rc=$(( rc != 0 ? rc : r )); grep -A30 "^dtype" "$W/d64/ab.txt" | tail -30
      timeout 80 python3 lab/ab_wgmma_speed.py --out "$W/d128" --dims 128 --seqs 512,1024,2048 --order abba \
        --variants default,default-again,small2-bc64-dyn-od2,small2-bc80-dyn-od2 --budget-s 70 > "$W/d128/ab.txt" 2>&1
      r=$?; rc=$(( rc != 0 ? rc : r )); grep -A20 "^dtype" "$W/d128/ab.txt" | tail -18 ;;
    grid21)  # SIZE_RULES[64] after stages21c (four K/V slots at causal N <= 512 and non-causal N <= 2k): forward()'s
             # dispatch tests, the target grid, then d = 256 at N <= 1k (non-causal fp16 512 trailed cuDNN, 0.975) with
             # Bc = 80 and with TURN_CARRY beside the rule's Bc = 64 build
      mkdir -p "$W/grid" "$W/d256"
      dispatch_tests "$W/dispatch.log" 80; rc=$?; tail -1 "$W/dispatch.log"
      timeout 160 python3 lab/ab_wgmma_speed.py --out "$W/grid" --dims 64,96,128,256 \
        --seqs 512,1024,2048,4096,8192,16384 --variants default --order abba --budget-s 145 > "$W/grid/ab.txt" 2>&1
      r=$?; rc=$(( rc != 0 ? rc : r )); grep "^cells with" "$W/grid/ab.txt" | tail -1; grep -A100 "^dtype" "$W/grid/ab.txt" | awk '$9+0 < 1.0'
      timeout 80 python3 lab/ab_wgmma_speed.py --out "$W/d256" --dims 256 --seqs 512,1024 --order abba \
        --variants default,default-again,default+BLOCK_N=80,default+TURN_CARRY=1 --budget-s 70 > "$W/d256/ab.txt" 2>&1; r=$?
      rc=$(( rc != 0 ? rc : r )); grep -A12 "^dtype" "$W/d256/ab.txt" | tail -10 ;;
    passes21)  # stop 21: cuDNN's first timing pass in a cell ran 3-7% faster than its second in every grid: each entry
               # timed four passes with no check first, then cuDNN after its float64 check (lab/pass_probe.py)
      timeout 150 python3 lab/pass_probe.py --out "$W" > "$W/probe.txt" 2>&1; rc=$?; cat "$W/probe.txt" | tail -10 ;;
    grid21b)  # the target grid again (the second after stages21's rules), with the A/B's retime of disturbed cells
      timeout 190 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 \
        --seqs 512,1024,2048,4096,8192,16384 --variants default --order abba --budget-s 175 > "$W/ab.txt" 2>&1
      rc=$?; grep -A3 "^cells with" "$W/ab.txt" | head -4; grep -A100 "^dtype" "$W/ab.txt" | awk '$9+0 < 1.0'
      python3 -c "import json; r=json.load(open('$W/ab_wgmma_speed.json'))['rows']; print('retimed rows:', sum('retimed_from_ms' in x for x in r))" ;;
    knobs21)  # the v9-v13 knob tests as one registry (tests/test_kernels_wgmma_speed_gpu.py KNOB_SETS: the same 154 tests
              # as the five knob-by-knob sets they replace), on forward()'s stop-21 builds
      speed_tests 420 "knob"; rc=$?; tail -2 "$W/tests.log" ;;
    stall21)  # d = 128 N = 512, the cells still behind cuDNN (ncu: level time, 13-14% lower IPC): the warp-state stall
              # reasons of both kernels (raw metrics), and where in our SASS the warps stall (SourceCounters, causal 512)
      MOONSHOT_CELLS=512x128x0,512x128x1,4096x128x1 timeout 150 ncu --clock-control none --csv --page raw \
        --kernel-name "regex:fa2_wgmma|fprop" --section WarpStateStats --section SchedulerStats --section InstructionStats \
        python3 lab/ncu_moonshot_target.py > "$W/ncu_stall.csv" 2> "$W/ncu_stall.stderr"; rc=$?
      MOONSHOT_CELLS=512x128x1 timeout 150 ncu --clock-control none --csv --kernel-name "regex:fa2_wgmma" --launch-count 1 \
        --section SourceCounters --page source --print-source sass python3 lab/ncu_moonshot_target.py \
        > "$W/ncu_sass.csv" 2> "$W/ncu_sass.stderr"; r=$?; rc=$(( rc != 0 ? rc : r ))
      wc -c "$W"/*.csv; tail -2 "$W"/*.stderr ;;
    tree21)  # stop 21 MAX_TREE (each row's block max as a tree, stall21: our warps wait 2.2 cycles per instruction on
             # fixed-latency dependences, cuDNN's 1.0): the GPU tests of forward()'s builds with it, then the A/B
      mkdir -p "$W/ab"
      speed_tests 130 "max_tree"; rc=$?; tail -1 "$W/tests.log"
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W/ab" --dims 64,96,128,256 --seqs 512,1024,2048,4096 \
        --order abba --variants default,default-again,default+MAX_TREE=1 --budget-s 185 > "$W/ab/ab.txt" 2>&1; r=$?
      rc=$(( rc != 0 ? rc : r )); grep -A80 "^dtype" "$W/ab/ab.txt" | tail -20 ;;
    tree21b)  # MAX_TREE at d = 128, the second run (tree21: d = 128 geomean 0.986, control 1.004; d = 64/96/256 level)
      timeout 150 python3 lab/ab_wgmma_speed.py --out "$W" --dims 128 --seqs 512,1024,2048,4096,8192,16384 \
        --order abba --variants default,default-again,default+MAX_TREE=1 --budget-s 135 > "$W/ab.txt" 2>&1; rc=$?
      grep -A40 "^dtype" "$W/ab.txt" | tail -36 ;;
    checkfirst21)  # the A/B with every entry of a cell checked before its first pass (lab/ab_wgmma_speed.py time_cell):
                   # cuDNN's first / second pass ratio (0.93-0.97 when each entry's check came right before its own first
                   # pass) and the control's spread, d = 64 / 128 at N = 512-2048
      timeout 100 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128 --seqs 512,1024,2048 --order abba \
        --variants default,default-again --budget-s 90 > "$W/ab.txt" 2>&1; rc=$?
      grep -A3 "^cells with" "$W/ab.txt" | head -3; grep -A30 "^dtype" "$W/ab.txt" | tail -8 ;;
    grid21c)  # the target grid with every entry of a cell checked before its first timing pass (checkfirst21)
      timeout 190 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 \
        --seqs 512,1024,2048,4096,8192,16384 --variants default --order abba --budget-s 150 > "$W/ab.txt" 2>&1
      rc=$?; grep -A3 "^cells with" "$W/ab.txt" | head -4; grep -A100 "^dtype" "$W/ab.txt" | awk '$9+0 < 1.0' ;;
    grid22)  # the target grid again on main as committed (issue 14's standing; held-out cells for the GPU model's
             # stage-4 sigma_ws3, fitted on the first Br = 192 A/B before this run)
      timeout 190 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 \
        --seqs 512,1024,2048,4096,8192,16384 --variants default --order abba --budget-s 150 > "$W/ab.txt" 2>&1
      rc=$?; grep -A3 "^cells with" "$W/ab.txt" | head -4; grep -A100 "^dtype" "$W/ab.txt" | awk '$9+0 < 1.0' ;;
    fresh22)  # issue 11: lengths no earlier run timed (N = 640, 1280, 2560, 5120, 10240) at d = 64 and 128: forward()'s
              # default (Br = 192 at d = 64, N >= 2k), CONFIGS, the one-tile Br = 192 build (d = 64), SDPA flash and
              # cuDNN, fp16 / bf16, causal and not (abba): the model's held-out check of sigma_ws3, timed after it was
              # committed
      timeout 250 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128 --seqs 640,1280,2560,5120,10240 \
        --variants default,base,br192-rs@64 --order abba --budget-s 220 > "$W/ab.txt" 2>&1
      rc=$?; grep -A3 "^cells with" "$W/ab.txt" | head -4 ;;
    knobs22)  # issue 14: d = 128 at N <= 2k, where the grid trails cuDNN by 1-2%: forward()'s build without the
              # ping-pong (both warpgroups issue their products freely, as d = 64's builds do), with the static
              # persistent scheduler (equal tiles need no atomic counter), and with MAX_TREE; default-again the control
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W" --dims 128 --seqs 512,1024,2048 --order abba \
        --variants default,default-again,default+PINGPONG=0+TURN_CARRY=0,default+PERSISTENT=1,default+MAX_TREE=1 \
        --budget-s 170 > "$W/ab.txt" 2>&1; rc=$?
      grep -A3 "^cells with" "$W/ab.txt" | head -3; grep -A30 "^dtype" "$W/ab.txt" | tail -16 ;;
    layouts22)  # issue 14: strided (B, N, H, d) views and GQA against contiguous with forward()'s current builds
      timeout 240 python3 bench/layouts_speed.py --out "$W" --n 2048,4096,16384 --d 64,96,128,256 --sets 2 \
        > "$W/layouts.txt" 2>&1; rc=$?; grep -E "bnhd|gqa" "$W/layouts.txt" | awk '{print $1,$2,$3,$4,$5,$8}' | head -60 ;;
    tree22)  # MAX_TREE in forward()'s d = 128 builds (kernels.fa2_wgmma.DEFAULT_KNOBS_BY_D): the GPU tests of every
             # forward() build with the tree (d = 128's now carry it), forward()'s dispatch / layouts tests, the grid
      speed_tests 150 "max_tree"; rc=$?; tail -1 "$W/tests.log"
      dispatch_tests "$W/dispatch.log" 150; r=$?; tail -1 "$W/dispatch.log"; rc=$(( rc != 0 ? rc : r ))
      mkdir -p "$W/grid"
      timeout 190 python3 lab/ab_wgmma_speed.py --out "$W/grid" --dims 64,96,128,256 \
        --seqs 512,1024,2048,4096,8192,16384 --variants default --order abba --budget-s 150 > "$W/grid/ab.txt" 2>&1
      r=$?; rc=$(( rc != 0 ? rc : r )); grep -A3 "^cells with" "$W/grid/ab.txt" | head -4
      grep -A100 "^dtype" "$W/grid/ab.txt" | awk '$9+0 < 1.0' ;;
    half22)  # stop 22 HALF_DIAG (fa2_wgmma_tma.cu v14): its GPU tests (the knob registry: hypothesis shapes, fixed shapes
             # across tiles, strided GQA), memcheck and racecheck of the d = 128 and 256 builds on 2 CTAs at scale (the
             # A/B is half22ab)
      speed_tests 200 "half_diag"; rc=$?; tail -1 "$W/tests.log"
      cfg=$(builds 2 "f.half_diag_builds()" "d in (128, 256)")
      sanitize_wgmma memcheck float16 7 100 90 "$cfg"; r=$?; tail -1 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r ))
      sanitize_wgmma racecheck float16 7 130 120 "$cfg"; r=$?; tail -1 "$W/racecheck.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    half22ab)  # the A/B of half22's builds (run after its tests and sanitizers passed)
      rc=0; mkdir -p "$W/ab" "$W/ab256"
      timeout 150 python3 lab/ab_wgmma_speed.py --out "$W/ab" --dims 96,128 --seqs 512,1024,2048,4096 --order abba \
        --variants default,default-again,default+HALF_DIAG=1 --budget-s 140 > "$W/ab/ab.txt" 2>&1; r=$?
      rc=$(( rc != 0 ? rc : r )); grep -A3 "^cells with" "$W/ab/ab.txt" | head -3; grep -A40 "^dtype" "$W/ab/ab.txt" | tail -22
      timeout 60 python3 lab/ab_wgmma_speed.py --out "$W/ab256" --dims 256 --seqs 512 --order abba \
        --variants default,default-again,default+HALF_DIAG=1 --budget-s 50 > "$W/ab256/ab.txt" 2>&1; r=$?
      rc=$(( rc != 0 ? rc : r )); grep -A12 "^dtype" "$W/ab256/ab.txt" | tail -8 ;;
    final22)  # forward()'s d = 128 builds with HALF_DIAG (and MAX_TREE): the dispatch / layouts GPU tests, then the grid
      dispatch_tests "$W/dispatch.log" 150; rc=$?; tail -1 "$W/dispatch.log"
      mkdir -p "$W/grid"
      timeout 190 python3 lab/ab_wgmma_speed.py --out "$W/grid" --dims 64,96,128,256 \
        --seqs 512,1024,2048,4096,8192,16384 --variants default --order abba --budget-s 150 > "$W/grid/ab.txt" 2>&1
      r=$?; rc=$(( rc != 0 ? rc : r )); grep -A3 "^cells with" "$W/grid/ab.txt" | head -4
      grep -A100 "^dtype" "$W/grid/ab.txt" | awk '$9+0 < 1.0' ;;
    isolate22)  # after review: HALF_DIAG's GPU tests with the Bc = 64 non-causal tail shape, then an A/B that times
                # forward()'s d = 128 build (HALF_DIAG on) against itself again and against HALF_DIAG=0 (the binary
                # without it), to separate the half step (causal) from the binary's place in the run (non-causal)
      speed_tests 150 "half_diag"; rc=$?; tail -1 "$W/tests.log"
      timeout 150 python3 lab/ab_wgmma_speed.py --out "$W" --dims 128 --seqs 512,1024,2048,4096 --order abba \
        --variants default,default-again,default+HALF_DIAG=0 --budget-s 140 > "$W/ab.txt" 2>&1; r=$?
      rc=$(( rc != 0 ? rc : r )); grep -A3 "^cells with" "$W/ab.txt" | head -3; grep -A12 "d build" "$W/ab.txt" ;;
    bias22)  # the A/B's added-entry bias (stop 22: any default+KNOB entry ran 1-2% under default-again): a no-op added
             # entry (default+DESC_STEP=1: forward()'s own build, same cubin, through the added entries' path), with
             # SDPA flash and cuDNN beside (the added entry follows flash in the reversed pass), then with cuDNN only
      rc=0
      for sd in flash,cudnn cudnn; do
        mkdir -p "$W/$sd"
        timeout 100 python3 lab/ab_wgmma_speed.py --out "$W/$sd" --dims 128 --seqs 512,1024,2048,4096 --order abba \
          --variants default,default-again,default+DESC_STEP=1 --sdpa $sd --budget-s 90 > "$W/$sd/ab.txt" 2>&1; r=$?
        rc=$(( rc != 0 ? rc : r )); echo "sdpa=$sd"; grep -A6 "d build" "$W/$sd/ab.txt"
      done ;;
    recheck22)  # with the Williams-design order (bias22 again: the no-op entry 0.996 against the control's 0.999):
                # HALF_DIAG added, and forward()'s d = 128 build without MAX_TREE, beside the control
      timeout 150 python3 lab/ab_wgmma_speed.py --out "$W" --dims 128 --seqs 512,1024,2048,4096 --order abba \
        --variants default,default-again,default+HALF_DIAG=1,default+MAX_TREE=0 --budget-s 140 > "$W/ab.txt" 2>&1
      rc=$?; grep -A3 "^cells with" "$W/ab.txt" | head -3; grep -A12 "d build" "$W/ab.txt" ;;
    recheck22b)  # earlier small-margin decisions under the Williams order: d = 64's four K/V slots (without: STAGES=2),
                 # d = 96 / 128's carried ping-pong turn (without: TURN_CARRY=0), N <= 2k
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128 --seqs 512,1024,2048 --order abba \
        --variants default,default-again,default+STAGES=2@64,default+TURN_CARRY=0@96+128 --budget-s 180 \
        > "$W/ab.txt" 2>&1; rc=$?; grep -A3 "^cells with" "$W/ab.txt" | head -3; grep -A20 "d build" "$W/ab.txt" ;;
    layouts_abba)  # the layouts again with each cell's four layouts timed in order and then reversed (bench/layouts_speed.py
                   # time_abba; layouts22's single fixed-order pass put every strided layout right after the contiguous one)
      timeout 300 python3 bench/layouts_speed.py --out "$W" --n 2048,4096,16384 --d 64,96,128,256 --sets 2 \
        > "$W/layouts.txt" 2>&1; rc=$?; grep -E "bnhd|gqa" "$W/layouts.txt" | awk '{print $1,$2,$3,$4,$5,$8}' | head -80 ;;
    recheck_knobs)  # older exact knobs decided on 1-2% margins under the cyclic order (before stop 22), each taken out
                    # of forward()'s build under the Williams order, control beside (/ctrl column): v9 DESC_STEP, v3a
                    # RESCALE_THRESHOLD, v5a ROW_SUM_MMA (d = 64, fp16)
      timeout 280 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 --seqs 512,1024,2048,4096 \
        --order abba --variants default,default-again,default+DESC_STEP=0,default+RESCALE_THRESHOLD=0,default+ROW_SUM_MMA=0@64 \
        --budget-s 260 > "$W/ab.txt" 2>&1; rc=$?; grep -A30 "d build" "$W/ab.txt" | head -30 ;;
    layouts_rounds)  # the layouts in balanced rounds (bench/layouts_speed.py time_rounds)
      timeout 420 python3 bench/layouts_speed.py --out "$W" --n 2048,4096,16384 --d 64,96,128,256 --sets 2 --rounds 8 \
        > "$W/layouts.txt" 2>&1; rc=$?; grep -E "bnhd|gqa" "$W/layouts.txt" | awk '{print $1,$2,$3,$4,$5,$8}' | head -80 ;;
    sections23)  # at causal N = 512 the first wave's K/V reads run DRAM at ~50%: smaller sections spread them
      timeout 300 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 --seqs 512,1024,2048,4096 \
        --order abba --sdpa cudnn --variants default,default-again,default+CAUSAL_SECTION_KB=4096,default+CAUSAL_SECTION_KB=8192,default+CAUSAL_SECTION_KB=32768 \
        --budget-s 270 > "$W/ab.txt" 2>&1; rc=$?; grep -A40 "d build" "$W/ab.txt" | grep "causal cells" ;;
    sections23b)
      rc=0; for rep in rep1 rep2; do
        ab_rep "$rep" 140 120 6 5 --dims 128 --seqs 512,768,1024,1536,2048,3072,4096 \
          --causal 1 --order abba --sdpa cudnn --variants default,default-again,default+CAUSAL_SECTION_KB=8192 || rc=1; done ;;
    fresh23)
      timeout 560 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 --seqs 768,1536,3072,6144,12288 \
        --order abba --variants default --budget-s 500 > "$W/ab.txt" 2>&1; rc=$?; grep -E "cells with|faster pass|first pass" "$W/ab.txt" ;;
    d64c23)
      rc=0; for rep in rep1 rep2; do
        ab_rep "$rep" 140 120 8 6 --dims 64 --seqs 512,768,1024,1536,2048 \
          --causal 1 --order abba --sdpa cudnn \
          --variants default,default-again,default+BLOCK_N=64+STAGES=4,default+BLOCK_N=64+STAGES=3 || rc=1; done ;;
    final23)
      dispatch_tests "$W/dispatch.log" 150; rc=$?; tail -1 "$W/dispatch.log"
      timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        -k "knob_across_tiles and desc_step and 64" > "$W/knobs.log" 2>&1; r=$?; rc=$(( rc != 0 ? rc : r )); tail -1 "$W/knobs.log"
      mkdir -p "$W/short" "$W/grid"
      timeout 80 python3 lab/ab_wgmma_speed.py --out "$W/short" --dims 64 --seqs 576,640,704,768,896 --causal 1 \
        --variants default --order abba --budget-s 70 > "$W/short/ab.txt" 2>&1; r=$?; rc=$(( rc != 0 ? rc : r ))
      grep -A12 "^dtype" "$W/short/ab.txt" | head -13
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W/grid" --dims 64,96,128,256 \
        --seqs 512,1024,2048,4096,8192,16384 --variants default --order abba --budget-s 180 > "$W/grid/ab.txt" 2>&1
      r=$?; rc=$(( rc != 0 ? rc : r )); grep -A3 "^cells with" "$W/grid/ab.txt" | head -4
      grep -A100 "^dtype" "$W/grid/ab.txt" | awk '$9+0 < 1.0' ;;
    d64c23b)
      rc=0; for rep in rep1 rep2; do
        ab_rep "$rep" 140 120 8 4 --dims 64 --seqs 832,896,960,1024 \
          --causal 1 --order abba --sdpa cudnn --variants default,default-again,default+BLOCK_N=64+STAGES=4 || rc=1; done ;;
    grid23c|grid23d|grid23e|grid24|grid25)  # grid23e, grid24, grid25: four passes per cell, with the time to match
      passes=2; limit=240; [ "$part" = grid23e ] || [ "$part" = grid24 ] || [ "$part" = grid25 ] && passes=4 && limit=400
      timeout $limit python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 \
        --seqs 512,1024,2048,4096,8192,16384 --variants default --order abba --passes $passes \
        --budget-s $(( limit - 20 )) > "$W/ab.txt" 2>&1
      rc=$?; grep -E "^cells with|faster pass|first pass|SM clock|in cycles" "$W/ab.txt"
      grep -A100 "^dtype" "$W/ab.txt" | awk '$9+0 < 1.0' ;;
    short23)
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64 --seqs 576,640,704,800,896,960 --causal 1 \
        --variants default --order abba --passes 4 --budget-s 180 > "$W/ab.txt" 2>&1; rc=$?
      grep -A14 "^dtype" "$W/ab.txt" | head -15; grep -E "^cells with|in cycles" "$W/ab.txt" ;;
    sect24)
      rc=0; for rep in rep1 rep2; do
        ab_rep "$rep" 150 135 8 8 --dims 64,96,128,256 --seqs 512,768,1024,2048 \
          --causal 1 --order abba --sdpa cudnn \
          --variants default,default-again,default+CAUSAL_SECTION_KB=256,default+CAUSAL_SECTION_KB=1024 || rc=1; done ;;
    q24)
      speed_tests 260 "q_slots"; rc=$?; tail -3 "$W/tests.log"
      cfg=$(builds 2 "f.q_slots_builds()")
      sanitize_wgmma memcheck float16 7 120 110 "$cfg"; r=$?; tail -2 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    q24race)
      cfg=$(builds 2 "f.q_slots_builds()")
      sanitize_wgmma racecheck float16 4 150 140 "$cfg"; rc=$?; tail -2 "$W/racecheck.txt"
      sanitize_wgmma synccheck float16 4 80 70 "$cfg"; r=$?; tail -2 "$W/synccheck.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    q24ab)
      rc=0; for rep in rep1 rep2; do
        ab_rep "$rep" 150 135 8 8 --dims 96,128 --seqs 512,1024,2048,4096 \
          --order abba --sdpa cudnn --variants default,default-again,default+Q_SLOTS=2 || rc=1
        ab_rep "${rep}_d64" 60 50 8 8 --dims 64 --seqs 512,1024,2048 --causal 0 \
          --order abba --sdpa cudnn --variants default,default-again,default+Q_SLOTS=2 || rc=1; done ;;
    fresh24)
      timeout 570 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,96,128,256 --seqs 640,1000,1280,2560,5120 \
        --order abba --variants default --budget-s 530 > "$W/ab.txt" 2>&1; rc=$?; grep -E "cells with|faster pass|first pass|in cycles" "$W/ab.txt" ;;
    bc24)
      timeout 300 python3 lab/ab_wgmma_speed.py --out "$W" --dims 128 --seqs 4608,5120,5632,7168,8192 \
        --order abba --sdpa cudnn \
        --variants default,default-again,default+BLOCK_N=160,default+BLOCK_N=128,default+BLOCK_N=128+PERSISTENT=2+O_TILE=1+O_TMA=1 \
        --budget-s 280 > "$W/ab.txt" 2>&1; rc=$?; grep -A12 "d build" "$W/ab.txt" | head -12 ;;
    bc24b)
      rc=0; for rep in rep1 rep2; do
        ab_rep "$rep" 200 185 12 12 --dims 128 --seqs 4608,6144,8192,12288,16384 \
          --order abba --sdpa cudnn \
          --variants default,default-again,default+BLOCK_N=128+PERSISTENT=2+O_TILE=1+O_TMA=1,default+PERSISTENT=2+O_DIRECT=2,default+PERSISTENT=2+O_DIRECT=2+TURN_CARRY=1 || rc=1; done ;;
    bc24c)
      rc=0; for rep in rep1 rep2; do
        ab_rep "$rep" 150 135 8 8 --dims 128 --seqs 5120,7168,10240,14336,16384 \
          --causal 1 --order abba --sdpa cudnn \
          --variants default,default-again,default+BLOCK_N=128+PERSISTENT=2+O_TILE=1+O_TMA=1,default+PERSISTENT=2+O_DIRECT=2 || rc=1; done ;;
    rf24)
      speed_tests 300 "ragged_first"; rc=$?; tail -3 "$W/tests.log"
      cfg=$(builds 2 "t.RAGGED")
      sanitize_wgmma memcheck float16 7 150 140 "$cfg"; r=$?; tail -2 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    rf24ab)
      P=BLOCK_N=128+PERSISTENT=2+O_TILE=1+O_TMA=1
      rc=0; for rep in rep1 rep2; do
        ab_rep "$rep" 120 105 8 8 --dims 128 --seqs 4608,6144,10240,12288 --causal 1 \
          --order abba --sdpa cudnn --variants default,default-again,default+$P,default+$P+SECTION_RAGGED_FIRST=1 || rc=1; done
      ab_rep "other" 150 135 12 12 --dims 64,96 --seqs 3000,6144,10240 --causal 1 \
        --order abba --sdpa cudnn --variants default,default-again,default+SECTION_RAGGED_FIRST=1 || rc=1 ;;
    final24)
      dispatch_tests "$W/dispatch.log" 150; rc=$?; tail -1 "$W/dispatch.log"
      timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py \
        -k "knob_across_tiles and desc_step" > "$W/knobs.log" 2>&1; r=$?; rc=$(( rc != 0 ? rc : r )); tail -1 "$W/knobs.log"
      mkdir -p "$W/long" "$W/grid"
      timeout 70 python3 lab/ab_wgmma_speed.py --out "$W/long" --dims 128 --seqs 5120,6144,10240 --causal 1 \
        --variants default --order abba --budget-s 60 > "$W/long/ab.txt" 2>&1; r=$?; rc=$(( rc != 0 ? rc : r ))
      grep -A8 "^dtype" "$W/long/ab.txt" | head -9
      timeout 200 python3 lab/ab_wgmma_speed.py --out "$W/grid" --dims 64,96,128,256 \
        --seqs 512,1024,2048,4096,8192,16384 --variants default --order abba --budget-s 185 > "$W/grid/ab.txt" 2>&1
      r=$?; rc=$(( rc != 0 ? rc : r )); grep -A3 "^cells with" "$W/grid/ab.txt" | head -4
      grep -A100 "^dtype" "$W/grid/ab.txt" | awk '$9+0 < 1.0' ;;
    rf24race)  # (its first run reached the d = 128 build in 190 s; rf24race2: the builds from d = 128 on, 4 shapes)
      cfg=$(builds 2 "t.RAGGED")
      sanitize_wgmma racecheck float16 7 200 190 "$cfg"; rc=$?; tail -2 "$W/racecheck.txt" ;;
    rf24race2)
      cfg=$(builds 2 "t.RAGGED[5:]")
      sanitize_wgmma racecheck float16 4 200 190 "$cfg"; rc=$?; tail -2 "$W/racecheck.txt" ;;
    q24c)
      rc=0; for rep in rep1 rep2; do
        ab_rep "$rep" 60 50 6 6 --dims 96,128 --seqs 1024,2048,4096 --causal 1 \
          --order abba --sdpa cudnn --variants default,default-again,default+Q_SLOTS=2 || rc=1
        ab_rep "${rep}_long" 50 40 4 4 --dims 128 --seqs 6144,8192 --causal 1 \
          --order abba --sdpa cudnn --variants default,default-again,default+Q_SLOTS=2 || rc=1; done ;;
    mask25)  # issue 11: does cuDNN mask every key block when Bc = 128 does not divide N? Its instructions per tile at
      # N = 1000 against 1024 (ncu), SDPA flash's and fa2_wgmma's beside, d = 64 / 128, causal and not
      ncu_levels 280 1000x64,1024x64,1000x128,1024x128 sdpa_cudnn,sdpa_flash,fa2_wgmma 1; rc=$?
      tail -30 "$W/run.txt" ;;
    ceiling25)  # issue 11: the tensor cores' rate alone, in FLOP per SM clock (lab/tc_ceiling.cu: wgmma SS / RS,
      # mma.sync), one CTA per SM: the model's R_wgmma and R_mma_sync from a measurement, not the fit
      timeout 200 python3 lab/tc_ceiling.py --out "$W" > "$W/ceiling.txt" 2>&1; rc=$?; cat "$W/ceiling.txt" ;;
    ragged25)  # issue 11: lengths Bc does not divide, none timed before (the masked-step term and cuDNN's
      # every-step mask, predicted before this run: results/fwd_wgmma_fresh_lengths/ragged_n1500_7000/prediction.json); forward()'s build,
      # SDPA flash and cuDNN, fp16 / bf16, causal and not, d = 64 / 128
      timeout 400 python3 lab/ab_wgmma_speed.py --out "$W" --dims 64,128 --seqs 1500,2500,3500,5000,7000 \
        --order abba --variants default --budget-s 380 > "$W/ab.txt" 2>&1; rc=$?; grep -E "cells with|in cycles" "$W/ab.txt" ;;
    names26)  # issue 11: the kernel, grid and block SDPA flash and cuDNN launch per head dim (the descriptors' traits;
      # torch's source names 64 x 64 tiles, 4 warps, for flash at d = 256), N = 512 / 4096, fp16 / bf16, causal and not
      timeout 200 python3 lab/kernel_names.py --out "$W" > "$W/names.txt" 2>&1; rc=$?; grep -v "^$" "$W/names.txt" | tail -70 ;;
    n512ab26)  # issue 14: d = 128 at N <= 2k, the cells behind cuDNN since stop 21: O from registers (O_DIRECT=2, no
      # staging tile) with the ping-pong turn carried, and with the smem it frees as a third K/V slot (Q + 3 x K/V, the
      # 227 KB cuDNN's d = 128 kernel takes) or a second Q slot; two runs, abba, every entry checked against float64
      O=default+O_TILE=0+O_TMA=0+O_DIRECT=2+TURN_CARRY=1
      rc=0; for rep in rep1 rep2; do
        ab_rep "$rep" 150 135 10 10 --dims 128 --seqs 512,1024,2048 --order abba --sdpa cudnn \
          --variants default,default-again,$O,$O+STAGES=3,$O+Q_SLOTS=2 || rc=1; done ;;
    br192d128)  # issue 14: d = 128 with three consumer warpgroups (SIZE_CANDIDATES[128] br192-bc64/80-dyn-oqt, stop 26,
      # never run): their GPU tests (hypothesis shapes, Nk = 4100, 3 persistent CTAs, strided / GQA) and memcheck at
      # scale on 3 CTAs. Their A/B is br192ab26 or d128ab26: run it after this part passed (nothing here checks that)
      speed_tests 240 "size_candidate and 128-br192"; rc=$?; tail -3 "$W/tests.log"
      cfg=$(builds 3 "[(128, f.SIZE_CANDIDATES[128][k]) for k in ('br192-bc64-dyn-oqt', 'br192-bc80-dyn-oqt')]")
      sanitize_wgmma memcheck float16 7 150 140 "$cfg"; r=$?; tail -2 "$W/memcheck.txt"; rc=$(( rc != 0 ? rc : r )) ;;
    br192ab26)  # issue 14: the A/B of br192d128's builds (run it after br192d128 passed), twice, N = 512-4096
      rc=0; for rep in rep1 rep2; do
        ab_rep "$rep" 150 135 10 10 --dims 128 --seqs 512,1024,2048,4096 --order abba --sdpa cudnn \
          --variants default,default-again,br192-bc64-dyn-oqt,br192-bc80-dyn-oqt || rc=1; done ;;
    d128ab26)  # issue 14: br192ab26 and n512ab26 in one A/B (one visit's time), d = 128 N = 512-2048, twice: forward()'s
      # build, again, O_DIRECT=2 (+ a third K/V slot), Br = 192 at Bc = 64 / 80, cuDNN (results/fwd_wgmma_d128_br192/ab_prediction.json)
      O=default+O_TILE=0+O_TMA=0+O_DIRECT=2+TURN_CARRY=1
      rc=0; for rep in rep1 rep2; do
        ab_rep "$rep" 170 155 10 12 --dims 128 --seqs 512,1024,2048 --order abba --sdpa cudnn \
          --variants default,default-again,$O,$O+STAGES=3,br192-bc64-dyn-oqt,br192-bc80-dyn-oqt || rc=1; done ;;
    clock26)  # issue 11: the SM clock over each timing's window (300 ms, nvidia-smi) and the cycles, fp16 and bf16,
      # d = 64 / 128 / 256 at N = 1k / 4k / 16k, causal and not: what a clock model under the power cap would stand on
      # (stop 23's probe had 5 cells; the A/B's 40 ms windows hold two samples each)
      timeout 420 python3 lab/clock_probe.py --out "$W" --rounds 4 --rep-ms 250 \
        --cells 64:1024:0,64:1024:1,64:4096:0,64:4096:1,64:16384:0,64:16384:1,128:1024:0,128:1024:1,128:4096:0,128:4096:1,128:16384:0,128:16384:1,256:1024:0,256:1024:1,256:4096:0,256:4096:1,256:16384:0,256:16384:1 \
        > "$W/clock.txt" 2>&1; rc=$?; tail -40 "$W/clock.txt" ;;
    flash256)  # issue 11: SDPA flash at d = 256, never profiled: the model has it 0.84x its time at the median (stop 26) with
      # 64 x 64 tiles read off torch's source; its levels, instructions and the SMs' write bytes (its spills) at N = 512,
      # 4k, 16k, beside fa2_wgmma's; the kernel name gives its traits
      ncu_levels 250 512x256,4096x256,16384x256 sdpa_flash,fa2_wgmma; rc=$?
      tail -16 "$W/run.txt" ;;
    inputs27)  # stop 27: the tensor-core forwards at scale < 0 and = 0 (fa2_tc, v_once_tc, fa2_wgmma, v_once_cluster), fp16 /
      # bf16, causal with Nq > Nk and tails, poisoned outputs, against float64 (never run: stop 27 had no device)
      timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_tc.py tests/test_kernels_bwd_gpu.py \
        -k "non_positive" > "$W/tests.log" 2>&1; rc=$?; tail -5 "$W/tests.log" ;;
    check28)  # stop 28: every GPU test of the launchers stop 27 changed (config / out / alignment / grid-row checks,
      # positive_scale, the plan cache): teaching tier, fa2_tc, v_once_tc, fa2_wgmma forward and backward, the cluster
      # kernel, layouts and GQA, the loader; the first GPU run since those wrapper changes
      timeout 300 python3 -m pytest -q -p no:cacheprovider -rf --durations=8 tests/test_kernels_gpu.py \
        tests/test_kernels_tc.py tests/test_kernels_cluster.py tests/test_kernels_bwd_gpu.py tests/test_kernels_layouts.py \
        tests/test_loader_gpu.py > "$W/tests.log" 2>&1; rc=$?; tail -22 "$W/tests.log" ;;
    check28b)  # check28's tests past its 300 s limit (it stopped after 243 of 318, all passed: the teaching tier,
      # fa2_tc, v_once_tc, fa2_wgmma and the cluster kernel's tuning candidates): the cluster kernel's forced / GQA /
      # error tests, the Hopper backward, the layouts and the loader
      # (not the backward's tuning candidates: builds forward() does not run, unchanged by stop 27 but for their wrapper)
      timeout 270 python3 -m pytest -q -p no:cacheprovider -rf --durations=8 tests/test_kernels_cluster.py \
        tests/test_kernels_bwd_gpu.py tests/test_kernels_layouts.py tests/test_loader_gpu.py \
        -k "not every_tuning_candidate" > "$W/tests.log" 2>&1; rc=$?; tail -22 "$W/tests.log" ;;
    tcdram28)  # issue 11: fa2_tc's DRAM gap (model 1.18x ncu at N = 16k, 0.71x at 64k, while SDPA flash at the same tiling
      # is within 3%): its spill-free Bc = 32 build beside the shipped one at N = 16k / 32k / 64k, d = 128, so the spill
      # stream is in or out of the cause (prediction: results/ncu_fa2_tc_dram/spill_free_bc32/prediction.json)
      ncu_levels 300 16384x128,32768x128,65536x128 \
        'fa2_tc,fa2_tc{"BLOCK_M":128,"BLOCK_N":32,"NWARPS":4,"Q_IN_REGS":0,"MIN_BLOCKS":2},sdpa_flash'; rc=$?
      tail -12 "$W/run.txt" ;;
    trace29)  # issue 11: fa2_tc's DRAM gap, stop 29's hypothesis: its CTAs do not sweep in lockstep (the walk of
      # lab/l2_sim.py gives the model's bytes in lockstep, other bytes when each CTA keeps its own pace), with
      # fa2_wgmma's one-tile build, whose bytes ncu has at the lockstep walk's, as the control. Per kernel: the traced
      # build checked (float64, bit-equal to its untraced build), timed beside it, traced twice per N; then its
      # launches alone under ncu, so each recorded schedule has its own DRAM bytes
      # (prediction: results/ncu_fa2_tc_dram/cta_trace_prediction.json)
      rc=0; mkdir -p "$W/ncu"
      for kern in fa2_tc fa2_wgmma; do
        timeout 150 python3 lab/cta_trace.py --kernel $kern --out "$W" > "$W/trace_$kern.txt" 2>&1 || rc=1
        tail -8 "$W/trace_$kern.txt"
        timeout 150 ncu --clock-control none --kernel-name regex:"${kern}_(tma_)?fwd" \
          --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum --csv \
          python3 lab/cta_trace.py --kernel $kern --ncu --out "$W/ncu" > "$W/ncu/trace_dram_$kern.csv" \
          2> "$W/ncu/run_$kern.err" || rc=1
        tail -3 "$W/ncu/run_$kern.err"
        python3 -m lab.l2_sim --trace "$W/cta_trace_$kern.json" || rc=1
        python3 -m lab.l2_sim --trace "$W/ncu/cta_trace_$kern.json" --ncu-csv "$W/ncu/trace_dram_$kern.csv" || rc=1
      done ;;
    gap)  # what a do_bench timing holds besides the kernel
      timeout 300 python3 lab/gap_probe.py --out "$W" > "$W/gap.txt" 2>&1; rc=$?; tail -25 "$W/gap.txt" ;;
    clock)  # time = cycles / clock: each entry's clock and power over its own timing window
      timeout 240 python3 lab/clock_probe.py --out "$W" > "$W/clock.txt" 2>&1; rc=$?; cat "$W/clock.txt" | tail -40 ;;
    *) echo "unknown part $part"; rc=2 ;;
  esac
  echo "== $part rc=$rc $(( $(date +%s) - t0 )) s (total $(( $(date +%s) - T0 )) s)" | tee -a "$ROOT_OUT/steps.txt"
  tar czf "$ROOT_OUT/$part.tgz" -C "$ROOT_OUT" "$part" && rm -rf "$W"
done
