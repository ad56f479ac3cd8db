"""GPU check of issue 17's input changes (one run, < 4 minutes on an H200):

1. every kernel launcher refuses bad input (shape mismatches, a truthy non-bool causal, a NaN scale)
   with one clear error, and says whether its message is the references' (counting.checks; the
   strided/GQA launchers of kernels.layouts word theirs differently); NumPy scalars as scale work;
2. every kernel, with scale given as np.float32 and causal as np.bool_, matches the float64 reference
   on odd shapes (Nq != Nk, tails, causal rows that see no key), outputs poisoned first;
3. naive's CUDA kernel on fp16 scores past 65504 (the references warn; the kernel's behaviour is
   recorded, not asserted).

    PYTHONPATH=. python3 lab/inputs_gpu_check.py      # writes $OUT/inputs_gpu_check.json
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np
import torch

from kernels import KERNELS
from variants import VARIANTS, attention_reference

OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="inputs_gpu_")
TOL = {torch.float32: 2e-4, torch.float16: 2e-2, torch.bfloat16: 8e-2}


def message(fn):
    try:
        fn()
    except (ValueError, TypeError) as e:
        return f"{type(e).__name__}: {e}"
    except Exception as e:  # anything else is a finding
        return f"UNEXPECTED {type(e).__name__}: {e}"
    return None


def main() -> int:
    from bench import harness

    if harness.no_gpu("inputs_gpu_check"):  # one line and exit 2, not the traceback of the first CUDA call
        return 2
    results, t0 = [], time.time()
    for name, spec in KERNELS.items():
        if spec.decode:  # cache-shaped inputs: tests/test_split_kv_inputs.py holds their refusals
            continue
        if not spec.available():
            results.append(dict(kernel=name, skipped="not available on this GPU"))
            continue
        dtype = torch.float16
        d = 64 if spec.supports_head_dim(64) else sorted(spec.head_dims or [64])[0]
        fwd = spec.forward
        opts = spec.configs()[0]
        rec = dict(kernel=name, d=d, options=opts, bad_input={}, ok=True)
        shapes = {"batch": ((2, 2, 40, d), (1, 2, 40, d), (1, 2, 40, d)),
                  "heads": ((1, 3, 40, d), (1, 2, 40, d), (1, 2, 40, d)),
                  "seq": ((1, 2, 40, d), (1, 2, 40, d), (1, 2, 41, d))}
        for what, (sq, sk, sv) in shapes.items():
            q, k, v = (torch.randn(s, device="cuda", dtype=dtype) for s in (sq, sk, sv))
            got = message(lambda: fwd(q, k, v, **opts))
            want = message(lambda: VARIANTS[spec.variant].forward(q.cpu(), k.cpu(), v.cpu()))
            refused = bool(got) and not got.startswith("UNEXPECTED")
            rec["bad_input"][what] = dict(kernel=got, reference=want, same=got == want, refused=refused)
            rec["ok"] &= refused  # `same` is reported: the strided/GQA launchers (kernels.layouts) word it their way
        q, k, v = (torch.randn(1, 2, 40, d, device="cuda", dtype=dtype) for _ in range(3))
        for what, kw in (("causal=1", dict(causal=1)), ("scale=nan", dict(scale=float("nan")))):
            got = message(lambda: fwd(q, k, v, **kw, **opts))
            rec["bad_input"][what] = dict(kernel=got, refused=bool(got) and not got.startswith("UNEXPECTED"))
            rec["ok"] &= rec["bad_input"][what]["refused"]
        errs = []
        for n_q, n_k, causal in ((77, 77, False), (130, 61, True), (61, 130, True), (1, 200, False)):
            gen = torch.Generator(device="cuda").manual_seed(n_q * 1000 + n_k)
            q = torch.randn(2, 3, n_q, d, device="cuda", generator=gen).to(dtype)
            k = torch.randn(2, 3, n_k, d, device="cuda", generator=gen).to(dtype)
            v = torch.randn(2, 3, n_k, d, device="cuda", generator=gen).to(dtype)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    o, lse = fwd(q, k, v, causal=np.bool_(causal), scale=np.float32(0.11), **opts)
                torch.cuda.synchronize()
                ro, rl = attention_reference(q, k, v, causal=causal, scale=0.11)
                seen = torch.isfinite(rl)
                err = (o.double() - ro).abs().max().item()
                okk = err <= TOL[dtype] and torch.equal(torch.isneginf(lse), ~seen) and not torch.isnan(o).any()
                errs.append(dict(n_q=n_q, n_k=n_k, causal=causal, max_err=err, ok=bool(okk)))
                rec["ok"] &= bool(okk)
            except Exception as e:
                errs.append(dict(n_q=n_q, n_k=n_k, causal=causal, error=f"{type(e).__name__}: {e}"))
                rec["ok"] = False
        rec["numpy_scalars"] = errs
        results.append(rec)
    # 3: naive's kernel past fp16's range (recorded)
    naive = {}
    if "naive" in KERNELS:
        q, k, v = (torch.randn(1, 1, 64, 64, device="cuda") for _ in range(3))
        q[..., 0, 0], k[..., 0, 0] = 1000.0, 1000.0  # score 1e6/sqrt(64) = 1.25e5 > 65504
        try:
            o, lse = KERNELS["naive"].forward(q.half(), k.half(), v.half())
            torch.cuda.synchronize()
            naive = dict(o_row0_nan=bool(torch.isnan(o[..., 0, :]).any()), lse_row0=float(lse[0, 0, 0]))
        except Exception as e:
            naive = dict(error=f"{type(e).__name__}: {e}")
    out = dict(device=torch.cuda.get_device_name(), seconds=round(time.time() - t0, 1), kernels=results,
               naive_fp16_overflow=naive)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "inputs_gpu_check.json"), "w") as f:
        json.dump(out, f, indent=1, default=str)
    print(f"{'kernel':16s} {'bad input same msg':>20s} {'refuses causal=1/nan':>22s} {'np scalars ok':>14s}")
    for r in results:
        if "skipped" in r:
            print(f"{r['kernel']:16s} skipped: {r['skipped']}")
            continue
        same = all(x.get("same", True) for x in r["bad_input"].values())
        refused = all(x.get("refused", True) for x in r["bad_input"].values())
        npok = all(x.get("ok") for x in r["numpy_scalars"])
        print(f"{r['kernel']:16s} {str(same):>20s} {str(refused):>22s} {str(npok):>14s}")
    print(f"naive kernel, fp16 score 1.25e5: {naive}")
    print(f"results: {os.path.join(OUT, 'inputs_gpu_check.json')}; all ok: "
          f"{all(r.get('ok', True) for r in results)}")
    return 0 if all(r.get("ok", True) for r in results) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)
