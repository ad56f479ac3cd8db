"""CPU-side kernel checks, run in CI without a GPU: every registered kernel configuration compiles
for sm_90 with NVRTC, with no more spill bytes than the launcher's stated budget (0 unless stated); the loader's cache, log parser
and input checks behave; the registry imports without a GPU."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from kernels import KERNELS, loader
from tests.tiers import one_per
from tests.toolchain import TOOLCHAIN, needs_nvrtc

CONFIGS = [(spec.name, src, kernel, defines) for spec in KERNELS.values()
           for src, kernel, defines in spec.compile_configs()]


def _id(cfg):
    name, _, kernel, defines = cfg
    return f"{name}-{kernel}-" + "-".join(f"{k}={v}" for k, v in sorted(defines.items()))


@needs_nvrtc
@pytest.mark.parametrize("config", one_per(CONFIGS, key=lambda c: (c[0], c[2]), ids=[_id(c) for c in CONFIGS]))
def test_compiles_for_sm90(config):
    """Every configuration compiles within its spill budget; a plain pytest compiles one per launcher and kernel
    function, the slow tier (pytest -m slow) every one."""
    name, source, kernel, defines = config
    arch = KERNELS[name].arch or "sm_90"  # fa2_wgmma: sm_90a (wgmma)
    cubin = loader.compile_cubin(source, defines=defines, arch=arch)
    assert cubin[:4] == b"\x7fELF", "NVRTC must return a cubin (ELF), not PTX"
    res = loader.resource_usage(source, kernel, defines=defines, arch=arch)
    assert 0 < res["registers"] <= 255
    budget = KERNELS[name].max_spill_bytes
    assert res["spill_stores"] <= budget and res["spill_loads"] <= budget, (
        f"{kernel} spills more than its stated budget of {budget} B: {res}")
    assert res["local_bytes"] <= budget, f"{kernel} has a stack frame over {budget} B: {res}"
    assert not res["wgmma_serialized"], f"ptxas serialised {kernel}'s wgmma pipeline: {res['wgmma_serialized']}"


def _text_sections(cubin: bytes) -> dict:
    """name -> bytes of a cubin's .text sections (ELF64 section headers)."""
    import struct

    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    entsize, num, strndx = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize) for i in range(num)]
    names = heads[strndx][4]
    out = {}
    for h in heads:
        name = cubin[names + h[0]:cubin.index(b"\0", names + h[0])].decode()
        if name.startswith(".text"):
            out[name] = cubin[h[4]:h[4] + h[5]]
    assert out, "no .text section: not a cubin"
    return out


@needs_nvrtc
@pytest.mark.parametrize("d", [64, 128])
def test_fa2_tc_trace_build_compiles_within_the_spill_budget(d):
    """lab/cta_trace.py's probe build (CTA_TRACE=1): what it measures is the shipped build's schedule, so it may not
    spill past the shipped build's budget (d = 128: 68 / 64 B against 64 / 48 B, NVRTC 13.0)."""
    from kernels import fa2_tc

    defines = fa2_tc.defines_for(d, False, dict(fa2_tc.CONFIGS[d], CTA_TRACE=1))
    res = loader.resource_usage(str(fa2_tc.SOURCE), fa2_tc.KERNEL, defines=defines, arch="sm_90")
    assert res["registers"] <= 255
    traced = loader.compile_cubin(str(fa2_tc.SOURCE), defines=defines, arch="sm_90")
    plain = loader.compile_cubin(str(fa2_tc.SOURCE), defines=fa2_tc.defines_for(d, False), arch="sm_90")
    assert b"g_cta_trace" in traced and b"g_cta_trace" not in plain  # the probe's buffer, only where asked for
    assert _text_sections(traced) != _text_sections(plain), "the traced build records nothing"
    assert max(res["spill_stores"], res["spill_loads"], res["local_bytes"]) <= fa2_tc.MAX_SPILL_BYTES, res
    with pytest.raises(ValueError, match="CTA_TRACE=2: a switch"):
        fa2_tc.defines_for(d, False, dict(fa2_tc.CONFIGS[d], CTA_TRACE=2))


def test_fa2_wgmma_has_no_trace_build():
    """CTA_TRACE left fa2_wgmma_tma.cu with the experiments' knobs (issue 40; its build, trace29's control, is at commit
    0bb604a): fa2_tc keeps the probe, fa2_wgmma refuses the knob by name."""
    from kernels import fa2_wgmma

    with pytest.raises(ValueError, match="CTA_TRACE: removed.*0bb604a"):
        fa2_wgmma.defines_for(128, False, dict(fa2_wgmma.CONFIGS[128], CTA_TRACE=1))


def test_registry_has_every_teaching_variant():
    from variants import VARIANTS

    teaching = {n for n, s in KERNELS.items() if s.tier == "teaching" and not s.decode}
    assert teaching == {"naive", "fa1", "fa2", "v_once"}
    assert {n for n, s in KERNELS.items() if s.decode} == {"split_kv", "split_kv_fast"}
    for spec in KERNELS.values():
        if spec.decode:  # variants/split_kv.py is the reference of both (not a VARIANTS training entry)
            assert spec.compile_configs(), spec
            continue
        assert spec.tier in ("teaching", "tensor-core")
        assert spec.variant in VARIANTS, spec
        assert spec.compile_configs(), spec
    # every placement but "cluster" (issue 18: one thread block per Q block; the cluster kernel is its own)
    ref = dict(VARIANTS["v_once"].options)
    ref["placement"] = tuple(p for p in ref["placement"] if p != "cluster")
    assert KERNELS["v_once"].options == ref
    assert KERNELS["v_once"].label(placement="hbm", rescale="lazy") == "v_once_hbm_lazy"


def test_import_needs_no_gpu():
    code = ("import sys, kernels; from kernels import KERNELS; KERNELS['fa2'].compile_configs(); "
            "assert 'cupy' not in sys.modules, 'importing kernels must not import cupy'")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, "-c", code], check=True, env=env,
                   cwd=str(loader.CUDA_DIR.parent.parent))


PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma \
instructions defining accumulator registers of a wgmma between start and end of the pipeline stage in the function 'b_kernel'
ptxas info    : Compiling entry function 'a_kernel' for 'sm_90'
ptxas info    : Function properties for a_kernel
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 97 registers, used 1 barriers, 4096 bytes smem
ptxas info    : Compiling entry function 'b_kernel' for 'sm_90'
ptxas info    : Function properties for b_kernel
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers
ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient \
register resources for the function 'c_kernel'
ptxas info    : (C7518) Potential Performance Loss: wgmma.mma_async instructions are serialized due to wgmma pipeline \
crossing function boundary in divergent path in the function 'c_kernel'
ptxas info    : Compiling entry function 'c_kernel' for 'sm_90a'
ptxas info    : Function properties for c_kernel
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers
"""


def test_parse_ptxas_log():
    table = loader.parse_ptxas_log(PTXAS_LOG)
    assert table["a_kernel"] == dict(registers=97, shared_static=4096, spill_stores=8,
                                     spill_loads=12, local_bytes=16, wgmma_serialized="")
    assert table["b_kernel"] == dict(registers=32, shared_static=0, spill_stores=0, spill_loads=0,
                                     local_bytes=0, wgmma_serialized="non wgmma instructions defining accumulator "
                                     "registers of a wgmma between start and end of the pipeline stage")
    assert table["c_kernel"]["wgmma_serialized"] == "insufficient register resources"  # "for the function", the first


@needs_nvrtc
def test_cache_is_keyed_by_options(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(loader, "_compiled", {})
    a = loader.compile_cubin("fa2.cu", defines={"STORAGE": "float", "BR": 32, "BC": 16})
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and any(f.endswith(".cubin") for f in files)  # cubin + ptxas log
    monkeypatch.setattr(loader, "_compiled", {})  # a fresh process: served from disk, same bytes
    assert loader.compile_cubin("fa2.cu", defines={"STORAGE": "float", "BR": 32, "BC": 16}) == a
    assert len(list(tmp_path.iterdir())) == 2
    b = loader.compile_cubin("fa2.cu", defines={"STORAGE": "__half", "BR": 32, "BC": 16})
    assert b != a and len(list(tmp_path.iterdir())) == 4


@needs_nvrtc
def test_compile_error_carries_the_log(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void k() { undeclared_thing = 1; }\n')
    with pytest.raises(loader.CompileError, match="undeclared_thing"):
        loader.compile_cubin(bad)


def test_options_are_in_one_place():
    if TOOLCHAIN is not None:
        pytest.skip(TOOLCHAIN)
    opts = loader.compile_options("fa2.cu", defines={"STORAGE": "__half", "BR": 64}, arch="sm_90")
    assert opts[0] == "-arch=sm_90" and "-lineinfo" in opts and "-DSTORAGE=__half" in opts
    assert "--use_fast_math" not in opts
    assert any(o.startswith("-I") and o.endswith("cuda") for o in opts)  # kernels/cuda headers


@pytest.mark.parametrize("name", ["naive", "fa1", "fa2", "v_once"])
def test_cpu_tensors_are_refused_clearly(name):
    q = torch.randn(1, 1, 8, 8)
    with pytest.raises(ValueError, match="CUDA tensors"):
        KERNELS[name].forward(q, q, q)
    with pytest.raises(TypeError, match="torch.Tensor"):
        KERNELS[name].forward(q.numpy(), q, q)


@needs_nvrtc
@pytest.mark.parametrize("names,functions", [
    ("fa1", ("fa1_forward",)),  # 3 builds: the default tier
    pytest.param("fa2,naive", ("fa2_forward", "naive_scores", "naive_softmax", "naive_pv"), marks=pytest.mark.slow),
])
def test_check_command_prints_every_kernel(names, functions):
    """`python -m kernels check` compiles every build of the kernels named and prints each function's resources."""
    out = subprocess.run([sys.executable, "-m", "kernels", "check", "--kernels", names],
                         capture_output=True, text=True, cwd=str(loader.CUDA_DIR.parent.parent))
    assert out.returncode == 0, out.stderr
    for kernel in functions:
        assert kernel in out.stdout


def test_launch_memo_stamp_follows_edits(tmp_path):
    """get_function's fast path is keyed by the sources' mtimes: editing the .cu or a header beside it
    must change the stamp (so the full hash runs again), an untouched tree must not."""
    src, header = tmp_path / "k.cu", tmp_path / "h.cuh"
    src.write_text("// kernel\n")
    header.write_text("// header\n")
    first = loader._source_stamp(src, max_age_s=0)
    assert loader._source_stamp(src, max_age_s=0) == first and len(first) == 2
    os.utime(header, ns=(1, 1))
    assert loader._source_stamp(src) == first, "within STAMP_RECHECK_S the last look is reused"
    assert loader._source_stamp(src, max_age_s=0) != first


def _slot(plan, i, dtype):
    """Slot i of an ArgPlan, read back through the address the driver would read (plan.pointers)."""
    import numpy as np

    base = plan.buffer.__array_interface__["data"][0]
    offset = int(plan.pointers[i]) - base
    return plan.buffer[offset:offset + np.dtype(dtype).itemsize].view(dtype)[0]


def test_arg_plan_refills_its_slots():
    """The kernelParams array is built once per argument signature and refilled per call: each call's
    values must land in the slots the pointer array names, with the per-call checks."""
    import numpy as np

    from kernels.launch_args import ArgPlan

    plan = ArgPlan([7, 0.5, np.int64(2**40), True], 0, "k")
    assert plan.params == plan.pointers.__array_interface__["data"][0]
    assert plan.fill([-3, 1.25, np.int64(5), False]) == plan.params
    values = [_slot(plan, i, t) for i, t in enumerate((np.int32, np.float32, np.int64, np.int32))]
    assert values == [-3, 1.25, 5, 0]
    assert all(int(p) % 8 == 0 for p in plan.pointers), "scalars are at least 8-byte aligned"
    with pytest.raises(OverflowError, match="does not fit int32"):
        plan.fill([2**31, 1.0, np.int64(1), True])
    with pytest.raises(TypeError, match="k: "):
        plan.fill([1.5, 1.0, np.int64(1), True])  # a float where the plan has an int32
    with pytest.raises(ValueError, match="tensor argument on cpu"):
        ArgPlan([torch.zeros(1)], 0, "k")
    with pytest.raises(TypeError, match="cannot pass str"):
        ArgPlan(["x"], 0, "k")


def test_arg_plan_passes_structs_by_value():
    """A CUtensorMap (128 bytes, a numpy array from kernels.tma) goes into the argument array by value,
    64-byte aligned: the plan keeps its own copy, refilled per call, so a later change to the caller's
    map cannot leak into a launch."""
    import numpy as np

    from kernels.launch_args import ArgPlan
    from kernels.tma import TENSOR_MAP_WORDS

    first = np.arange(TENSOR_MAP_WORDS, dtype=np.uint64)
    second = np.arange(100, 100 + TENSOR_MAP_WORDS, dtype=np.uint64)
    plan = ArgPlan([3, first, 4], 0, "k")
    plan.fill([5, second, 6])
    base = plan.buffer.__array_interface__["data"][0]
    offset = int(plan.pointers[1]) - base
    assert int(plan.pointers[1]) % 64 == 0
    copied = plan.buffer[offset:offset + 128].view(np.uint64)
    assert list(copied) == list(range(100, 116)) and _slot(plan, 0, np.int32) == 5
    assert _slot(plan, 2, np.int32) == 6
    second[0] = 999
    assert copied[0] == 100
    with pytest.raises(ValueError, match="struct argument of 64 bytes"):
        plan.fill([5, second[:8], 6])


def test_runtime_uses_public_apis_only():
    """The loader, the argument packing and the tensor maps import no ctypes and no private module
    (cupy_backends, a leading underscore): the runtime is cuda.core, cuda.bindings and CuPy."""
    import ast

    for name in ("loader.py", "launch_args.py", "tma.py"):
        tree = ast.parse((loader.CUDA_DIR.parent / name).read_text())
        for node in ast.walk(tree):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for mod in mods:
                parts = mod.split(".")
                assert mod != "ctypes" and "cupy_backends" not in parts, f"{name} imports {mod}"
                assert mod == "__future__" or not any(p.startswith("_") for p in parts), f"{name} imports {mod}"
            if isinstance(node, ast.Attribute):
                assert not node.attr.startswith("_C"), f"{name} reaches into torch._C"


def test_extra_options_are_program_options_fields():
    if TOOLCHAIN is not None:
        pytest.skip(TOOLCHAIN)
    opts = loader.compile_options("fa2.cu", defines={"BR": 64}, arch="sm_90",
                                  extra_options=(("max_register_count", 128),))
    assert "--max_register_count=128" in opts
    with pytest.raises(TypeError, match="ProgramOptions field"):
        loader.compile_options("fa2.cu", arch="sm_90", extra_options=("-maxrregcount=128",))


def test_tensor_map_refuses_what_tma_cannot_describe():
    from kernels.tma import tensor_map_3d

    with pytest.raises(TypeError, match="float16/bfloat16"):
        tensor_map_3d(torch.zeros(1, 1, 8, 64), 64)
    with pytest.raises(ValueError, match="contiguous"):
        tensor_map_3d(torch.zeros(1, 1, 64, 8, dtype=torch.float16).transpose(2, 3), 64)
    with pytest.raises(ValueError, match="128 bytes"):
        tensor_map_3d(torch.zeros(1, 1, 8, 64, dtype=torch.float16), 64, box_cols=32)


def test_wgmma_header_is_what_its_generator_writes():
    """kernels/cuda/wgmma.cuh is generated (one asm operand per accumulator register): it must not drift
    from kernels/cuda/gen_wgmma.py."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_wgmma", loader.CUDA_DIR / "gen_wgmma.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (loader.CUDA_DIR / "wgmma.cuh").read_text() == gen.render(), "run python kernels/cuda/gen_wgmma.py"


@needs_nvrtc
def test_a_serialised_build_warns(monkeypatch):
    """d = 256 with Bc = 128 (one K/V slot, cuDNN's d = 256 tile) compiles, but O and S do not fit the registers and
    ptxas serialises its wgmma pipeline (C7512): its first load in a process warns (an error elsewhere in this suite,
    pyproject.toml), and resource_usage names the reason."""
    from kernels import fa2_wgmma

    defs = fa2_wgmma.defines_for(256, False, dict(fa2_wgmma.CONFIGS[256], BLOCK_N=128, STAGES=1))
    src, kernel = fa2_wgmma.source_of(defs)
    monkeypatch.setattr(loader, "_compiled", {})  # a fresh process: the build is loaded from disk or NVRTC
    with pytest.warns(loader.SerializedWgmmaWarning, match="serialised its wgmma pipeline"):
        loader.compile_cubin(src, defines=defs, arch=fa2_wgmma.ARCH)
    res = loader.resource_usage(src, kernel, defines=defs, arch=fa2_wgmma.ARCH)  # served in-process: no second warning
    assert res["wgmma_serialized"] == "insufficient register resources"


def test_the_sms_limits_are_named_once():
    """counting/sm90.py holds the SM's shared-memory limits; the launchers and the analysis package read them there."""
    from counting import cluster
    from gpumodel import cluster_model
    from counting import sm90
    from kernels import fa2_tc, teaching_model, v_once_tc

    assert sm90.SMEM_PER_BLOCK == 232448 and sm90.SMEM_PER_SM == 233472  # 227 KB opt-in of the SM's 228 KB
    assert fa2_tc.SMEM_PER_SM == teaching_model.SMEM_PER_SM == cluster_model.SMEM_PER_SM == sm90.SMEM_PER_SM
    assert (fa2_tc.SMEM_PER_BLOCK == teaching_model.SMEM_PER_BLOCK == v_once_tc.SMEM_LIMIT_H100 == cluster.SMEM_PER_CTA
            == sm90.SMEM_PER_BLOCK)
    assert sm90.ctas_by_smem(115_784) == 1 and sm90.ctas_by_smem(115_640) == 2  # the 1 KB each CTA reserves
    assert sm90.ctas_by_registers(168, 12) == 1 and sm90.ctas_by_registers(128, 8) == 2
