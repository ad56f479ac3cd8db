#!/usr/bin/env bash
# Issue 42, the client side, on a GPU: kernels.attention with grouped-query K/V and strided views, the teaching fa2
# forward and backward with GQA, the transformers adapter (kernels/hf.py), the teaching forward under memcheck.
#   bash lab/gpu_check_bwd_client.sh          # merged (the default): every kernel, with main's fa2_wgmma GQA backward
#   bash lab/gpu_check_bwd_client.sh alone    # the teaching fa2 only (no fa2_wgmma test)
# Logs under $OUT (default /tmp/bwd_client). Exit status: pytest's, or the sanitizer's if pytest passed.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/bwd_client}
mkdir -p "$OUT"
# transformers 5.x depends on Hugging Face's `kernels` distribution, whose import name is this project's `kernels`
# package: transformers' `from kernels import ...` would find ours. It runs without that distribution.
if python -c "import importlib.metadata as m; m.version('kernels')" 2>/dev/null; then
  echo "uninstalling Hugging Face's kernels distribution (import-name collision with this project's kernels/)"
  python -m pip uninstall -y kernels
fi
python -c "import transformers; print('transformers', transformers.__version__)" \
  || echo "transformers missing: tests/test_hf_adapter.py's GPU test will skip"
case "${1:-merged}" in
  alone) sel='not wgmma and not test_compiled_model_matches_eager_without_graph_breaks' ;;
  merged) sel='' ;;
  *) echo "usage: $0 alone|merged" >&2; exit 2 ;;
esac
python -m pytest -q -rs -s -m gpu tests/test_attention_gqa.py tests/test_hf_adapter.py tests/test_kernels_backward.py \
  ${sel:+-k "$sel"} 2>&1 | tee "$OUT/pytest.log"
rc=${PIPESTATUS[0]}
python -m pytest -q -rs -m gpu tests/test_kernels_gpu.py -k fa2 2>&1 | tail -3 | tee -a "$OUT/pytest.log"
rc2=${PIPESTATUS[0]}
PYTHONPATH=. python bench/sanitize.py --kernels fa2 --tools memcheck --out "$OUT/sanitize" 2>&1 | tail -6
rc3=${PIPESTATUS[0]}
[ "$rc" -ne 0 ] && exit "$rc"
[ "$rc2" -ne 0 ] && exit "$rc2"
exit "$rc3"
