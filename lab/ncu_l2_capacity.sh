#!/usr/bin/env bash
# Where K/V re-reads start to reach DRAM (docs/gpu-model.md, "Not done"): lab/ncu_levels.sh on shapes whose
# heads span more than one wave of CTAs, so every wave re-reads a head's K/V a whole pass later:
# d = 128, N = 32768 (B = 1, H = 16: 256 Q blocks per head, K/V 16 MB a head) and N = 65536 (512 Q blocks,
# 32 MB a head), fa2_tc, fa2_wgmma and SDPA flash, non-causal, fp16.
#
#   PYTHONPATH=. bash lab/ncu_l2_capacity.sh        # on the H200; ~1-2 minutes
#
# Read the last table: DRAM/model near 1 (within 10%) at both N says the residency model (half the L2,
# separated re-reads only) holds past the committed 16k rows; DRAM/model well above 1 says the capacity is
# smaller than assumed, below 1 that it is larger. Commit $OUT/ncu_levels.csv as
# results/ncu_l2_capacity.csv (gpumodel/measured.py reads every *ncu*.csv) and run `fa-traffic validate`.
set -u
export NCU_LEVELS_SHAPES=${NCU_LEVELS_SHAPES:-32768x128,65536x128}
export NCU_LEVELS_KERNELS=${NCU_LEVELS_KERNELS:-fa2_tc,fa2_wgmma,sdpa_flash}
exec bash "$(dirname "$0")/ncu_levels.sh"
