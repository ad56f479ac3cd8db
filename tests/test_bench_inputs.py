"""The bench scripts' command lines: --help works, a bad argument is refused in one line (exit 2) before any GPU
work, and a machine without a CUDA GPU is told so in one line (exit 2), not shown a traceback."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch


def _script(name: str):
    """A GPU script by name: the entry points live in bench/, the probes and A/Bs in lab/."""
    import importlib

    root = Path(__file__).resolve().parent.parent
    return importlib.import_module(f"bench.{name}" if (root / "bench" / f"{name}.py").exists() else f"lab.{name}")


def _refused(capsys, main, argv) -> str:
    """The error line of a command line main() refuses (argparse: the usage, then one line; exit 2)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2, err
    return err[-1]


@pytest.fixture
def gpu_work_forbidden(monkeypatch):
    """A GPU that is there (so only the arguments can stop a script) but must not be used."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def forbidden(*_a, **_k):
        raise AssertionError("GPU work started before the arguments were checked")
    return forbidden


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("argv,match", [
    (["--dims", "80"], "--dims: 80 unsupported (fa2_wgmma's head dims); choose from 64, 96, 128, 256"),
    (["--seqs", "-5"], "--seqs must be a comma-separated list of positive integers, got '-5'"),
    (["--seqs", ","], "--seqs: empty list ','"),
    (["--seqs", "32768"], "--seqs: 32768 is over 16384 (batch*N = 16384 tokens)"),
    (["--dtypes", "float32"], "--dtypes: unknown dtype 'float32'; choose from float16, bfloat16"),
    (["--sdpa", "foo"], "--sdpa: unknown SDPA backend 'foo'"),
    (["--rep-ms", "0"], "--rep-ms must be a positive finite number"),
    (["--variants", "nosuch"], "--variants: unknown variant 'nosuch' at d = 64, 128, 256"),
    (["--variants", "br192", "--dims", "128"], "unknown variant 'br192' at d = 128"),  # a d = 64 candidate
    (["--variants", "default@80"], "--variants: default@80: fa2_wgmma's head dims are 64, 96, 128, 256"),
    (["--variants", "default@96", "--dims", "64"], "limited to d = 96, none of --dims"),
    (["--variants", "default@x"], "--variants: malformed 'default@x'"),
    (["--variants", "default+NWG"], "--variants: malformed 'default+NWG'"),
    (["--variants", "default+NWG=9"], "default+NWG=9 at d=64, N=512: fa2_wgmma: NWG=9: 1 to 3 consumer warpgroups"),
    (["--variants", "default+FOO=1"], "fa2_wgmma: unknown config keys ['FOO']"),
    (["--summary", "/nonexistent/ab.json"], "--summary: cannot read /nonexistent/ab.json"),
])
def test_ab_wgmma_speed_refuses_bad_arguments_before_gpu_work(capsys, monkeypatch, gpu_work_forbidden, argv, match):
    """Each used to crash on the GPU (KeyError: 80, a zero batch, getattr(torch, 'float32') timed as fp32...) or, for
    a variant, be dropped without a word."""
    from lab import ab_wgmma_speed as ab

    monkeypatch.setattr(ab, "run", gpu_work_forbidden)
    assert match in _refused(capsys, ab.main, argv)


def test_ab_wgmma_speed_summary_refuses_what_is_not_its_json(capsys, tmp_path):
    from lab import ab_wgmma_speed as ab

    (tmp_path / "x.json").write_text("{}")
    assert "is not an ab_wgmma_speed.json" in _refused(capsys, ab.main, ["--summary", str(tmp_path / "x.json")])
    (tmp_path / "x.json").write_text("not json")
    assert "--summary: cannot read" in _refused(capsys, ab.main, ["--summary", str(tmp_path / "x.json")])


def test_ab_wgmma_speed_takes_good_variants_and_needs_a_gpu(capsys, no_gpu):
    from lab import ab_wgmma_speed as ab

    argv = ["--variants", "default,default-again,base,cp.async@64+128,default+WG_SKIP=0", "--dims", "64,128"]
    assert ab.main(argv) == 2
    assert capsys.readouterr().err.strip() == f"ab_wgmma_speed: needs a CUDA GPU (torch {torch.__version__} sees none)"


@pytest.mark.parametrize("argv,match", [
    (["--kernels", "nosuch"], "--kernels: unknown kernel 'nosuch'; choose from naive, fa1, fa2,"),
    (["--kernels", "fa2,sdpa_foo"], "--kernels: unknown kernel 'sdpa_foo'"),
    (["--budget-s", "-1"], "--budget-s must be a positive finite number, got -1.0"),
    (["--target-s", "nan"], "--target-s must be a positive finite number, got nan"),
])
def test_bench_kernels_refuses_bad_arguments_before_gpu_work(capsys, monkeypatch, gpu_work_forbidden, argv, match):
    """An unknown --kernels name used to select nothing (an empty benchmark); without a GPU, a traceback."""
    from bench import bench_kernels

    monkeypatch.setattr(bench_kernels, "run", gpu_work_forbidden)
    assert match in _refused(capsys, bench_kernels.main, argv)


def test_bench_kernels_takes_every_entry_name_and_needs_a_gpu(capsys, no_gpu, tmp_path):
    from bench import bench_kernels, harness

    names = harness.entry_names()
    assert {"fa2", "v_once_tc_sram_lazy", "sdpa", "sdpa_cudnn"} <= set(names)
    assert bench_kernels.main(["--out", str(tmp_path), "--kernels", ",".join(names)]) == 2
    assert capsys.readouterr().err.strip() == f"bench_kernels: needs a CUDA GPU (torch {torch.__version__} sees none)"


@pytest.mark.parametrize("argv,match", [
    (["check", "--kernels", "nosuch"], "--kernels: 'nosuch' starts no entry's label; the labels are fa2_tc,"),
    (["bench", "--seqs", "-5"], "--seqs must be a comma-separated list of positive integers, got '-5'"),
    (["bench", "--dtypes", "float32"], "--dtypes: unknown dtype 'float32'"),
    (["bench", "--configs-from", "/nonexistent/tc_sweep.json"], "--configs-from: cannot read /nonexistent/tc_sweep"),
    (["sweep", "--sweep-configs", "notjson"], "--sweep-configs: not JSON"),
    (["sweep", "--sweep-configs", '{"80": []}'], "--sweep-configs: the sweep runs d = 64 and 128: give a list"),
    (["sweep", "--sweep-configs", '{"64": {}, "128": []}'], "--sweep-configs: d=64: give a list of configs"),
    (["sweep", "--sweep-kernel", "fa2_wgmma", "--sweep-configs", '{"64": [{"BLOCK_N": 64, "NWG": 9}], "128": []}'],
     "fa2_wgmma config {'BLOCK_N': 64, 'NWG': 9} at d=64: fa2_wgmma: NWG=9: 1 to 3 consumer warpgroups"),
    (["sweep", "--sweep-configs", '{"64": [{"BLOCK_N": 64}], "128": []}'],
     "fa2_tc config {'BLOCK_N': 64} at d=64: fa2_tc: a config needs ['BLOCK_M', 'NWARPS']"),
    (["target", "--d", "80"], "--d: 80 unsupported (no tensor-core kernel takes it); choose from 64, 96, 128, 256"),
    (["target", "--ncu-seqs", "0"], "--ncu-seqs must be a comma-separated list of positive integers, got '0'"),
    (["target", "--wgmma-configs", '[{"NOPE": 1}]'], "fa2_wgmma: unknown config keys ['NOPE']"),
    (["precompile", "--jobs", "0"], "--jobs must be a positive integer, got 0"),
])
def test_bench_tc_refuses_bad_arguments_before_gpu_work(capsys, monkeypatch, gpu_work_forbidden, argv, match):
    """`check --kernels nosuch` used to pass with nothing checked; the others were KeyErrors or JSON tracebacks on the
    GPU, and `precompile --jobs 0` compiled everything in one process."""
    from bench import bench_tc

    for cmd in ("cmd_precompile", "cmd_check", "cmd_sweep", "cmd_bench", "cmd_target"):
        monkeypatch.setattr(bench_tc, cmd, gpu_work_forbidden)
    assert match in _refused(capsys, bench_tc.main, argv)


@pytest.mark.parametrize("cmd", ["check", "sweep", "bench", "target"])
def test_bench_tc_gpu_commands_need_a_gpu(capsys, no_gpu, tmp_path, cmd):
    from bench import bench_tc

    assert bench_tc.main([cmd, "--out", str(tmp_path), "--kernels", "fa2,v_once_tc,sdpa_flash"]) == 2
    assert capsys.readouterr().err.strip() == f"bench_tc {cmd}: needs a CUDA GPU (torch {torch.__version__} sees none)"


@pytest.mark.parametrize("script,argv,match", [
    ("cluster_speed", ["--d", "80"], "--d: 80 unsupported (v_once_cluster's head dims); choose from 64, 128"),
    ("cluster_speed", ["--n", "0"], "--n must be a comma-separated list of positive integers, got '0'"),
    ("cluster_speed", ["--causal", "2"], "--causal: unknown value '2'; choose from 0, 1"),
    ("cluster_speed", ["--dtypes", "fp16"], "--dtypes: unknown dtype 'fp16'; choose from float16, bfloat16"),
    ("cluster_speed", ["--max-sets", "0"], "--max-sets must be a positive integer, got 0"),
    ("layouts_speed", ["--d", "80"], "--d: 80 unsupported (fa2_wgmma's head dims); choose from 64, 96, 128, 256"),
    ("layouts_speed", ["--n", "4096,x"], "--n must be a comma-separated list of positive integers, got 'x'"),
    ("layouts_speed", ["--causal", "yes"], "--causal: unknown value 'yes'"),
    ("layouts_speed", ["--sets", "0"], "--sets must be a positive integer, got 0"),
    ("layouts_speed", ["--rounds", "-1"], "--rounds must be a positive integer, got -1"),
    ("clock_probe", ["--cells", "128:512"], "--cells: malformed cell '128:512'; give d:N:causal"),
    ("clock_probe", ["--cells", "128:512:2"], "--cells: malformed cell '128:512:2'"),
    ("clock_probe", ["--cells", "80:512:1"], "--cells: 80:512:1: d=80 unsupported; fa2_wgmma takes d in 64, 96,"),
    ("clock_probe", ["--cells", "128:0:1"], "--cells: 128:0:1: N must be a positive integer"),
    ("clock_probe", ["--rounds", "0"], "--rounds must be a positive integer, got 0"),
    ("clock_probe", ["--dtypes", "float32"], "--dtypes: unknown dtype 'float32'"),
    ("kernel_names", ["--dims", "4096"], "--dims: 4096 is over 2048 (H = 2048 / d heads)"),
    ("kernel_names", ["--seqs", "-1"], "--seqs must be a comma-separated list of positive integers, got '-1'"),
    ("kernel_names", ["--backends", "flash,foo"], "--backends: unknown SDPA backend 'foo'"),
])
def test_speed_and_probe_scripts_refuse_bad_arguments_before_gpu_work(capsys, monkeypatch, gpu_work_forbidden,
                                                                     script, argv, match):
    """cluster_speed / layouts_speed: --d 80 or --n 0 failed every cell on the GPU (or, without one, a traceback);
    --rounds -1 ran one round. clock_probe / kernel_names: a malformed --cells was a ValueError from int() after the
    clock started; --dims 4096 made H = 0 heads; an unknown backend was recorded as a KeyError row per cell."""

    from bench import harness

    for name in ("entries", "start_clock", "input_sets", "sdpa"):
        monkeypatch.setattr(harness, name, gpu_work_forbidden)
    assert match in _refused(capsys, _script(script).main, argv)


def _verdict_table():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "verdict_table.py"
    spec = importlib.util.spec_from_file_location("verdict_table", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_verdict_table_refuses_what_it_cannot_read_in_one_line(capsys, tmp_path):
    """A missing file, a JSON without rows, a dtype with no cell (min() of an empty list) were tracebacks; a second
    file without --cluster was silently ignored."""
    main = _verdict_table().main
    assert "cannot read /nonexistent.json: [Errno 2]" in _refused(capsys, main, ["/nonexistent.json"])
    (tmp_path / "a.json").write_text("{}")
    assert "is not a benchmark's JSON (no list of rows)" in _refused(capsys, main, [str(tmp_path / "a.json")])
    (tmp_path / "b.json").write_text('{"rows": []}')
    assert "reads one tc_bench.json, got 2 files (several: --cluster)" in _refused(
        capsys, main, [str(tmp_path / "b.json"), str(tmp_path / "b.json")])
    assert "no float16 cell with both fa2_tc and a v_once_tc mode timed in" in _refused(
        capsys, main, [str(tmp_path / "b.json")])
    assert "no bfloat16 cell with both v_once_cluster and fa2_wgmma timed in" in _refused(
        capsys, main, ["--cluster", "--dtype", "bfloat16", str(tmp_path / "b.json")])
    assert "invalid choice: 'float32'" in _refused(capsys, main, ["--dtype", "float32"])
    assert capsys.readouterr().out == ""  # nothing half-printed before a refusal


def test_verdict_table_reads_its_own_trees_analysis(tmp_path):
    """`python bench/verdict_table.py --cluster`, as its docstring runs it (no PYTHONPATH): the cluster table imports
    analysis, which must be this tree's (it was a ModuleNotFoundError, or another checkout's installed copy)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    script = root / "bench" / "verdict_table.py"
    code = ("import os, runpy, sys\n"
            f"sys.argv = [{str(script)!r}, '--cluster']; sys.path[0] = {str(script.parent)!r}\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('ANALYSIS', sys.modules['analysis'].__file__)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"ANALYSIS {root / 'analysis' / '__init__.py'}" in out.stdout


@pytest.mark.parametrize("argv,match", [
    (["--kernel", "nosuch"], "--kernel 'nosuch' is not a registered kernel; those with a backward: naive, fa2, fa2_wgmma"),
    (["--fallback", "fa3"], "--fallback 'fa3' is not a registered kernel"),
    (["--steps", "0"], "--steps, --batch and --ctx must be positive"),
    (["--lr", "nan"], "--lr must be a positive finite number, got nan"),
    (["--log-every", "-1"], "--log-every must be 0 (no log) or positive, got -1"),
    (["--device", "cpu"], "--device cpu: kernels.attention runs CUDA kernels; give a CUDA device"),
    (["--device", "foo"], "--device 'foo': Expected one of cpu, cuda"),
])
def test_train_gpt_refuses_bad_arguments_before_gpu_work(capsys, monkeypatch, gpu_work_forbidden, argv, match):
    """A misspelt --kernel was replaced by --fallback (or exited 1), --device cpu failed in kernels.attention after
    the SDPA warm-up, and --lr nan trained to NaN losses; --steps 0 was refused only after the GPU check."""
    import model.train
    from bench import train_gpt

    monkeypatch.setattr(model.train, "train", gpu_work_forbidden)
    assert match in _refused(capsys, train_gpt.main, argv)


def test_train_gpt_exits_2_when_no_kernel_runs_here(capsys, monkeypatch, gpu_work_forbidden):
    """A GPU where fa2_wgmma does not run and the fallback cannot train: one line, exit 2 (sys.exit(text) was 1)."""
    import model.train
    from bench import train_gpt
    from kernels import fa2_wgmma

    monkeypatch.setattr(model.train, "train", gpu_work_forbidden)
    monkeypatch.setattr(fa2_wgmma, "supported", lambda device=None: False)
    with pytest.raises(SystemExit) as e:
        train_gpt.main(["--fallback", "fa2_tc"])
    assert e.value.code == 2
    assert capsys.readouterr().out.strip() == ("train_gpt: fa2_wgmma does not run on this GPU, nor does --fallback "
                                               "fa2_tc (fa2_tc has no backward)")


@pytest.mark.parametrize("argv,match", [
    (["--kernels", "nosuch"], "--kernels: 'nosuch' is not a registered kernel with a backward; those with one:"),
    (["--kernels", "fa2_tc"], "--kernels: 'fa2_tc' is not a registered kernel with a backward"),
    (["--dims", "80"], "--kernels fa2_wgmma with --dims 80, --dtypes float16: head dim d=80 unsupported: kernel "
                       "'fa2_wgmma' takes d in [64, 96, 128, 256]"),
    (["--kernels", "fa2", "--dims", "256"], "head dim d=256 unsupported: kernel 'fa2' takes d <= 128"),
    (["--dtypes", "float32"], "--dtypes: unknown dtype 'float32'; choose from float16, bfloat16"),
    (["--seqs", "0"], "--seqs must be a comma-separated list of positive integers, got '0'"),
    (["--seqs", "32768"], "--seqs: 32768 is over 16384 (batch*N = 16384 tokens)"),
    (["--causal", "x"], "--causal: unknown value 'x'; choose from 0, 1"),
])
def test_bench_bwd_refuses_bad_arguments_before_gpu_work(capsys, monkeypatch, gpu_work_forbidden, argv, match):
    """An unknown or backward-less --kernels name was skipped with a log line (every one: a run of SDPA alone), and a
    head dim a kernel cannot take failed each of its cells; --dtypes float32 was a KeyError in the first cell."""
    from bench import bench_bwd

    monkeypatch.setattr(bench_bwd, "bench_cell", gpu_work_forbidden)
    monkeypatch.setattr(bench_bwd, "our_kernels", gpu_work_forbidden)
    assert match in _refused(capsys, bench_bwd.main, argv)


@pytest.mark.parametrize("argv,match", [
    (["check", "--arch", "foo"], "--arch: a cubin needs a real arch (sm_XY), got 'foo'"),
    (["check", "--arch", "90"], "--arch: a cubin needs a real arch (sm_XY), got '90'"),
    (["check", "--kernels", "naive", "--json", "/nonexistent/k.json"],
     "--json /nonexistent/k.json: no folder /nonexistent to write it in"),
])
def test_kernels_check_refuses_bad_arguments_before_compiling(capsys, monkeypatch, gpu_work_forbidden, argv, match):
    """--arch foo compiled nothing and printed a failed row for every configuration (exit 1); --json into a missing
    folder was a traceback after every compile."""
    from kernels import __main__ as cli
    from kernels import loader

    monkeypatch.setattr(loader, "resource_usage", gpu_work_forbidden)
    assert match in _refused(capsys, cli.main, argv)


@pytest.mark.parametrize("script,argv", [
    ("gap_probe", []), ("launch_overhead", []), ("cluster_sanitize_target", []), ("tc_ceiling", []),
    ("ab_speed", ["--tag", "new"]), ("fa2_teaching_ab", []), ("pass_probe", []),
    ("cluster_speed", []), ("layouts_speed", []), ("clock_probe", []), ("kernel_names", []),
    ("bench_bwd", []), ("teach_bwd_ab", []), ("train_gpt", []), ("cta_trace", []), ("ring_speed", []),
])
def test_the_gpu_scripts_need_a_gpu(capsys, no_gpu, tmp_path, script, argv):
    """Past their argument checks, each says in one line that it needs a GPU (harness.no_gpu), and exits 2. The probes
    printed the traceback of their first CUDA call (fa2_teaching_ab: 'WRONG' and exit 1, a correct kernel judged by a
    generator that could not be made)."""

    if script != "cluster_sanitize_target":
        argv = argv + ["--out", str(tmp_path)]
    assert _script(script).main(argv) == 2
    assert capsys.readouterr().err.strip() == f"{script}: needs a CUDA GPU (torch {torch.__version__} sees none)"


@pytest.mark.parametrize("script,argv,match", [
    ("gap_probe", ["--cells", "128:512"], "--cells: malformed cell '128:512'; give d:N:causal"),
    ("gap_probe", ["--dtype", "float32"], "--dtype: unknown dtype 'float32'"),
    ("launch_overhead", ["--kernels", "fa2,nosuch"], "--kernels: unknown kernel 'nosuch'"),
    ("cluster_sanitize_target", ["--configs", "default,NWG=3"], "--configs: 'NWG=3': v_once_cluster config NWG=3"),
    ("cluster_sanitize_target", ["--configs", "NWG"], "--configs: 'NWG': a build is default or KNOB=V[+KNOB=V]"),
    ("tc_ceiling", ["--iters", "0"], "--iters must be a positive integer, got 0"),
    ("ab_speed", ["--tag", "new", "--seqs", "0"], "--seqs must be a comma-separated list of positive integers"),
    ("precompile_bwd", ["--jobs", "0"], "--jobs must be a positive integer, got 0"),
    ("cta_trace", ["--seqs", "0"], "--seqs must be a comma-separated list of positive integers, got '0'"),
    ("cta_trace", ["--traces", "0"], "--traces must be a positive integer, got 0"),
    ("cta_trace", ["--kernel", "sdpa_flash"], "argument --kernel: invalid choice: 'sdpa_flash'"),
    ("cta_trace", ["--head-dim", "96"], "argument --head-dim: invalid choice: 96"),
    ("ring_speed", ["--seqs", "0"], "--seqs must be a comma-separated list of positive integers, got '0'"),
    ("ring_speed", ["--layouts", "spiral"], "--layouts: unknown layout 'spiral'; choose from contiguous, zigzag"),
    ("ring_speed", ["--local", "v_once_tc"], "--local: 'v_once_tc' is not a kernel with a backward"),
    ("ring_speed", ["--cp", "math"], "--cp: unknown SDPA backend 'math'; choose from flash, cudnn"),
    ("ring_speed", ["--d", "96"], "--d: 96 unsupported (fa2_wgmma's backward); choose from 64, 128"),
    ("cta_trace", ["--seqs", "2097152", "--heads", "16"], "over the 131072 CTAs the trace buffer holds"),
])
def test_the_gpu_probes_refuse_bad_arguments_before_gpu_work(capsys, gpu_work_forbidden, monkeypatch, script, argv,
                                                             match):

    from bench import harness

    for name in ("entries", "input_sets", "random_qkv"):
        monkeypatch.setattr(harness, name, gpu_work_forbidden)
    mod = _script(script)
    if hasattr(mod, "builds"):
        monkeypatch.setattr(mod, "builds", gpu_work_forbidden)
    assert match in _refused(capsys, mod.main, argv)


@pytest.mark.parametrize("script,argv,match", [
    ("teach_bwd_ab", ["--names", "fa2,nosuch"], "--names: unknown contender 'nosuch'; choose from fa2,"),
    ("teach_bwd_ab", ["--dims", "256"], "--dims: 256 is over 128 (the teaching kernels' largest head dim)"),
    ("teach_bwd_ab", ["--seqs", "0"], "--seqs must be a comma-separated list of positive integers, got '0'"),
    ("sanitize", ["--kernels", "nosuch"], "--kernels: unknown kernel 'nosuch'; choose from naive,"),
    ("sanitize", ["--dtypes", "fp8"], "--dtypes: unknown dtype 'fp8'"),
    ("sanitize", ["--tools", "memcheck,foo"], "--tools: unknown tool 'foo'"),
    ("sanitize", ["--configs", "x"], "--configs: not JSON"),
    ("sanitize", ["--configs", '{"fa3": []}'], '--configs: give {"name": [config, ...]} with registered kernel names'),
    ("sanitize", ["--shapes", "-1"], "--shapes must be a count, 0 or more, got -1"),
])
def test_teach_bwd_ab_and_sanitize_refuse_bad_arguments_before_gpu_work(capsys, monkeypatch, gpu_work_forbidden,
                                                                        script, argv, match):
    """An unknown --names entry was dropped without a word and d = 256 failed every cell; sanitize's unknown kernel,
    dtype or tool failed inside compute-sanitizer (KeyError, AttributeError, a tool error), bad JSON a traceback."""

    mod = _script(script)
    for name in ("fp32_exactness", "contenders", "find_sanitizer", "run_tool", "child"):
        if hasattr(mod, name):
            monkeypatch.setattr(mod, name, gpu_work_forbidden)
    assert match in _refused(capsys, mod.main, argv)


def test_sanitize_needs_a_gpu(capsys, no_gpu, monkeypatch, tmp_path):
    from bench import sanitize

    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: "/usr/bin/compute-sanitizer")  # there, but no GPU
    assert sanitize.main(["--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"sanitize: needs a CUDA GPU (torch {torch.__version__} sees none)"


def test_bwd_wgmma_check_answers_help_and_refuses_unknown_steps(capsys, monkeypatch, tmp_path):
    """--help or a misspelt step was dropped, so the script ran every step: the whole GPU visit (checks, pytest,
    the benchmark, the sanitizer)."""
    import importlib

    monkeypatch.setenv("OUT", str(tmp_path))  # the module writes its results there
    mod = importlib.import_module("lab.bwd_wgmma_check")
    with pytest.raises(SystemExit) as e:
        mod.parse_steps(["--help"])
    assert e.value.code == 0 and "checks   every tuning candidate" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        mod.parse_steps(["checks", "benhc"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip() == ("bwd_wgmma_check: unknown step 'benhc'; choose from checks, pytest, "
                                               "bench, ablate, sanitize (or --one)")
    assert mod.parse_steps(["bench", "checks"]) == ["bench", "checks"] and mod.parse_steps([]) == list(mod.STEPS)


@pytest.mark.parametrize("script", ["bwd_sanitize_target", "cluster_ncu_target", "inputs_gpu_check", "ncu_bwd_target",
                                    "ncu_levels_target", "ncu_moonshot_target", "racecheck_mbarrier_probe"])
def test_the_argumentless_gpu_scripts_need_a_gpu(capsys, no_gpu, script):
    """The ncu / sanitizer targets and probes take no arguments; without a GPU they printed the traceback of their first
    CUDA call (stop 28): now one line (harness.no_gpu) and exit 2."""

    assert _script(script).main() == 2
    assert capsys.readouterr().err.strip() == f"{script}: needs a CUDA GPU (torch {torch.__version__} sees none)"
