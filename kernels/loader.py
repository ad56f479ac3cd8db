"""The one place where CUDA kernels are compiled, cached, loaded and launched.

Every kernel of every tier goes through this module, so compile options live here and nowhere else.

Public API (used by the teaching launchers and by the tensor-core launchers alike):

    compile_cubin(source, *, defines=None, arch=None, extra_options=()) -> bytes
        NVRTC-compile kernels/cuda/<source> (or an absolute path) to a cubin. Needs no GPU: arch
        defaults to the current GPU's "sm_XY" when one is visible, else "sm_90". Cached in-process
        and on disk (key: hash of source + local headers + options + arch + NVRTC version).
    resource_usage(source, kernel_name, *, defines=None, arch=None, extra_options=()) -> dict
        registers, shared_static, spill_stores, spill_loads, local_bytes (stack frame), read from
        ptxas' verbose report of that compilation. Needs no GPU.
    get_function(source, kernel_name, *, defines=None, arch=None, extra_options=(), device=None) -> Kernel
        The compiled kernel loaded on `device` (default: torch's current device). Kernel.launch(grid, block, args,
        shared_mem=0) launches it on torch's current stream; args are torch tensors (passed as
        raw device pointers: no copies), numpy scalars (passed as their exact type), Python
        int/float (passed as int32/float32), or a numpy array passed by value as its raw bytes (a
        struct such as kernels.tma's CUtensorMap). Dynamic shared memory over 48 KB is opted into
        with the max-dynamic-shared-memory function attribute.
    check_cuda_inputs(q, k, v, *, supported_dtypes, max_head_dim=None, head_dims=None)
        TypeError/ValueError with a clear message for non-tensors, CPU tensors, tensors on different
        devices, mismatched shapes, unsupported dtype or head dim, non-contiguous inputs.
    max_dynamic_smem(device=None) -> int
        The opt-in per-block shared-memory limit of the device (227 KB on an H100/H200).

Runtime, all public and maintained: NVRTC through NVIDIA's cuda.core (Program, ProgramOptions; no GPU
needed), the cubin loaded by CuPy (RawModule, in the primary context torch uses too), launched with
cuda.bindings.driver.cuLaunchKernel (CuPy's launch cannot pass a struct by value, which fa2_wgmma's
__grid_constant__ CUtensorMap needs, and costs tens of µs of host time per call).

Compile options (all kernels): -arch=<arch> -std=c++17 -lineinfo --ptxas-options=-v
-I<the source's folder> -I<CUDA include dir> -D<name>=<value> for each define. -lineinfo costs no
speed and lets compute-sanitizer name source lines. No --use_fast_math: the teaching tier is held
to float32 accuracy against the float64 oracle. extra_options: (ProgramOptions field, value) pairs,
e.g. (("max_register_count", 128),).

Environment: FA_KERNEL_CACHE sets the on-disk cache folder (default ~/.cache/fa-workbench/cubins);
CUDA_PATH / CUDA_HOME name a CUDA toolkit whose include/ holds cuda_fp16.h; FA_KERNEL_ARCH overrides
the default arch. NVRTC itself comes from the nvidia-cuda-nvrtc wheel (or a CUDA toolkit), found by
cuda-pathfinder on cuda.bindings' behalf.
"""
from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
import tempfile
import threading
import time
import warnings
from pathlib import Path

from counting.checks import check_tensors
from kernels.launch_args import ArgPlan, dim3

CUDA_DIR = Path(__file__).resolve().parent / "cuda"
DEFAULT_ARCH = "sm_90"
BASE_OPTIONS = ("-std=c++17", "-lineinfo", "--ptxas-options=-v")
DEFAULT_SMEM_LIMIT = 48 * 1024  # what a launch gets without opting in

_lock = threading.Lock()
_compiled: dict[str, tuple[bytes, str]] = {}  # key -> (cubin, ptxas log)
_loaded: dict[tuple, "Kernel"] = {}  # (key, kernel name, device index) -> Kernel


class CompileError(RuntimeError):
    """NVRTC rejected a source; the message carries NVRTC's log."""


class ToolchainMissing(RuntimeError):
    """NVRTC or the CUDA headers cannot be found on this machine."""


class SerializedWgmmaWarning(RuntimeWarning):
    """ptxas compiled a kernel's wgmma products to run one at a time (its C7510-C7518 'Potential Performance Loss').
    The kernel computes the right result; only its speed shows it (lab/NOTES-tc.md v7). The test suite makes this
    warning an error (pyproject.toml), so a build that tests compile cannot be serialised unnoticed."""


# ----------------------------------------------------------------------------- toolchain discovery

def cuda_core():
    """The cuda.core module with Program and ProgramOptions (it left cuda.core.experimental in 0.4)."""
    try:
        import cuda.core as core

        if not hasattr(core, "Program"):
            raise ImportError("cuda.core without Program")
        return core
    except ImportError:
        try:
            import cuda.core.experimental as core

            return core
        except ImportError as exc:
            raise ToolchainMissing(f"cuda.core is not installed (pip install cuda-core): {exc}") from exc


def nvrtc_version() -> tuple[int, int]:
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()  # loads libnvrtc: fails here when it is absent
    except Exception as exc:  # ImportError, or cuda-pathfinder's "library not found"
        raise ToolchainMissing(
            "NVRTC is not available (pip install cuda-bindings nvidia-cuda-nvrtc, or install a CUDA "
            f"toolkit): {exc}") from exc
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise ToolchainMissing(f"nvrtcVersion failed: {err}")
    return int(major), int(minor)


def runtime_versions() -> dict:
    """Versions of the runtime pieces, for benchmark records and GPU logs ("missing: ..." when absent)."""
    out = {}
    for name, mod in (("cuda_core", "cuda.core"), ("cuda_bindings", "cuda.bindings"), ("cupy", "cupy")):
        try:
            out[name] = __import__(mod, fromlist=["__version__"]).__version__
        except Exception as exc:
            out[name] = f"missing: {type(exc).__name__}"
    try:
        out["nvrtc"] = ".".join(map(str, nvrtc_version()))
    except ToolchainMissing as exc:
        out["nvrtc"] = f"missing: {exc}"[:120]
    return out


def cuda_include_dirs() -> list[str]:
    """Folders holding cuda_fp16.h: $CUDA_PATH, $CUDA_HOME, /usr/local/cuda*, the nvidia wheels."""
    candidates = []
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "include"))
    candidates += ["/usr/local/cuda/include"] + sorted(glob.glob("/usr/local/cuda-*/include"),
                                                        reverse=True)
    try:  # the nvidia-cuda-runtime wheel ships the headers under nvidia/cu13/include (or cuda_runtime/)
        import nvidia

        for root in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(root, "*", "include")))
    except ImportError:
        pass
    for c in candidates:
        if os.path.isfile(os.path.join(c, "cuda_fp16.h")):
            return [c]
    raise ToolchainMissing("no CUDA include folder with cuda_fp16.h found (set CUDA_PATH); looked in "
                           + ", ".join(candidates))


def default_arch() -> str:
    """FA_KERNEL_ARCH, else the current GPU's sm_XY, else sm_90 (the H100/H200 that CI targets)."""
    if os.environ.get("FA_KERNEL_ARCH"):
        return os.environ["FA_KERNEL_ARCH"]
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except Exception:
        pass
    return DEFAULT_ARCH


def cache_dir() -> Path:
    path = Path(os.environ.get("FA_KERNEL_CACHE", Path.home() / ".cache" / "fa-workbench" / "cubins"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def source_path(source) -> Path:
    path = Path(source)
    if not path.is_absolute() and not path.exists():
        path = CUDA_DIR / path
    if not path.is_file():
        raise FileNotFoundError(f"CUDA source not found: {source} (looked in {CUDA_DIR})")
    return path.resolve()


# ----------------------------------------------------------------------------- compilation

def _option_fields(path: Path, defines, arch, extra_options) -> dict:
    """The compilation as cuda.core ProgramOptions fields (the single source of compile flags)."""
    fields = dict(name=path.name, arch=arch or default_arch(), std="c++17", lineinfo=True, ptxas_options="-v",
                  include_path=[str(path.parent), *cuda_include_dirs()],
                  define_macro=[name if value is None else (name, str(value))
                                for name, value in sorted((defines or {}).items())])
    for item in extra_options:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"extra_options holds (ProgramOptions field, value) pairs, got {item!r}")
        fields[item[0]] = item[1]
    if not fields["define_macro"]:
        fields["define_macro"] = None  # cuda.core refuses an empty list
    return fields


def compile_options(source, *, defines=None, arch=None, extra_options=()) -> list[str]:
    """The NVRTC command line of one compilation (what the cache key hashes and logs show)."""
    f = _option_fields(source_path(source), defines, arch, tuple(extra_options))
    opts = [f"-arch={f['arch']}", *BASE_OPTIONS, *(f"-I{d}" for d in f["include_path"])]
    opts += [f"-D{m}" if isinstance(m, str) else f"-D{m[0]}={m[1]}" for m in f["define_macro"] or ()]
    opts += [f"--{k}={v}" for k, v in f.items()
             if k not in ("name", "arch", "std", "lineinfo", "ptxas_options", "include_path", "define_macro")]
    return opts


def _cache_key(path: Path, options: list[str]) -> str:
    h = hashlib.sha256()
    h.update(path.read_bytes())
    # the source's folder and kernels/cuda/, whose headers lab/cuda/ sources include by relative path
    for folder in dict.fromkeys((path.parent, CUDA_DIR)):
        for header in sorted(folder.glob("*.cuh")) + sorted(folder.glob("*.h")):
            h.update(header.name.encode())
            h.update(header.read_bytes())
    h.update(json.dumps([str(path.name), [o for o in options if not o.startswith("-I")],
                         list(nvrtc_version())]).encode())
    return h.hexdigest()[:32]


def check_arch(arch) -> str:
    """ValueError unless `arch` names a real GPU arch, sm_XY or sm_XYa (a cubin is built for one)."""
    if not (isinstance(arch, str) and re.fullmatch(r"sm_\d+a?", arch)):
        raise ValueError(f"a cubin needs a real arch (sm_XY), got {arch!r}")
    return arch


def _compile(source, defines, arch, extra_options) -> tuple[str, bytes, str]:
    """(key, cubin, ptxas log), from the in-process cache, the disk cache, or NVRTC."""
    path = source_path(source)
    fields = _option_fields(path, defines, arch, extra_options)
    check_arch(fields["arch"])
    key = _cache_key(path, compile_options(path, defines=defines, arch=arch, extra_options=extra_options))
    with _lock:
        if key in _compiled:
            return (key, *_compiled[key])
    cubin_file, log_file = cache_dir() / f"{key}.cubin", cache_dir() / f"{key}.log"
    if cubin_file.is_file() and log_file.is_file():
        result = cubin_file.read_bytes(), log_file.read_text()
    else:
        result = _nvrtc_compile(path, fields)
        _atomic_write(cubin_file, result[0])
        _atomic_write(log_file, result[1].encode())
    _warn_serialized(path, defines, result[1])
    with _lock:
        _compiled[key] = result
    return (key, *result)


def _warn_serialized(path: Path, defines, log: str) -> None:
    """Once per build and process (the in-process cache answers later calls): a SerializedWgmmaWarning per kernel
    whose wgmma pipeline ptxas serialised."""
    for name, res in parse_ptxas_log(log).items():
        if res.get("wgmma_serialized"):
            warnings.warn(f"{name} ({path.name}, {dict(defines or {})}): ptxas serialised its wgmma pipeline "
                          f"({res['wgmma_serialized']}); it computes the right result, one product at a time",
                          SerializedWgmmaWarning, stacklevel=4)


def _nvrtc_compile(path: Path, fields: dict) -> tuple[bytes, str]:
    core = cuda_core()
    nvrtc_version()  # a clear ToolchainMissing before cuda.core's own error
    log = io.StringIO()
    try:
        try:
            options = core.ProgramOptions(**fields)
        except TypeError:  # an older cuda.core without the name field: only NVRTC's messages lose it
            options = core.ProgramOptions(**{k: v for k, v in fields.items() if k != "name"})
        program = core.Program(path.read_text(), "c++", options)
        try:
            cubin = bytes(program.compile("cubin", logs=log).code)
        except TypeError:  # a cuda.core whose compile() takes no logs: no ptxas report (resource_usage fails)
            cubin = bytes(program.compile("cubin").code)
    except Exception as exc:  # cuda.core raises nvrtcError-carrying RuntimeErrors; the log names the line
        raise CompileError(f"NVRTC failed on {path.name} with {fields}:\n{log.getvalue()}\n{exc}") from exc
    return cubin, log.getvalue()


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def compile_cubin(source, *, defines=None, arch=None, extra_options=()) -> bytes:
    return _compile(source, defines, arch, tuple(extra_options))[1]


def cubin_path(source, *, defines=None, arch=None, extra_options=()) -> Path:
    key = _compile(source, defines, arch, tuple(extra_options))[0]
    return cache_dir() / f"{key}.cubin"


_PTXAS_FUNC = re.compile(r"Compiling entry function '(\w+)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_PTXAS_SERIAL = re.compile(r"wgmma\.mma_async instructions are serialized due to (.+?) (?:in|for) (?:the )?function '(\w+)'")


def parse_ptxas_log(log: str) -> dict[str, dict]:
    """kernel name -> resources, from ptxas' -v report (one 'Compiling entry function' section each).
    wgmma_serialized: ptxas' reason when it serialised the kernel's wgmma pipeline (its "Potential Performance Loss:
    wgmma.mma_async instructions are serialized due to ..." lines, C7510-C7518, printed before the section; the first
    one for a kernel), else ''. Such a kernel issues every product alone and is correct: no error, spill or test shows
    it, only a timing (lab/NOTES-tc.md v7)."""
    out, current, serialized = {}, None, {}
    for line in log.splitlines():
        if m := _PTXAS_SERIAL.search(line):
            serialized.setdefault(m.group(2), m.group(1))
        elif m := _PTXAS_FUNC.search(line):
            current = out.setdefault(m.group(1), dict(registers=0, shared_static=0, spill_stores=0,
                                                      spill_loads=0, local_bytes=0))
        elif current is None:
            continue
        elif m := _PTXAS_FRAME.search(line):
            current.update(local_bytes=int(m.group(1)), spill_stores=int(m.group(2)),
                           spill_loads=int(m.group(3)))
        elif m := _PTXAS_USED.search(line):
            current["registers"] = int(m.group(1))
            if s := _PTXAS_SMEM.search(line):
                current["shared_static"] = int(s.group(1))
    for name, res in out.items():
        res["wgmma_serialized"] = serialized.get(name, "")
    return out


def resource_usage(source, kernel_name, *, defines=None, arch=None, extra_options=()) -> dict:
    log = _compile(source, defines, arch, tuple(extra_options))[2]
    table = parse_ptxas_log(log)
    if kernel_name not in table:
        raise KeyError(f"{kernel_name} not among the kernels of {source}: {sorted(table)}")
    return dict(table[kernel_name])


# ----------------------------------------------------------------------------- loading, launching

def _check(result, what: str, kernel: str) -> None:
    """cuda.bindings returns (CUresult, ...) tuples: turn a failure into one clear error."""
    from cuda.bindings import driver

    err = result[0]
    if err != driver.CUresult.CUDA_SUCCESS:
        _, text = driver.cuGetErrorString(err)
        raise RuntimeError(f"{kernel}: {what} failed: {err.name}"
                           + (f" ({text.decode()})" if isinstance(text, bytes) else ""))


class Kernel:
    """A loaded kernel, launched on torch's current stream of the device it was loaded on.

    Per call: the argument signature's ArgPlan (a numpy buffer made on the first call with those
    argument types) is refilled and cuLaunchKernel reads it; nothing else is built per launch."""

    def __init__(self, raw_kernel, name: str, device_index: int):
        from cuda.bindings import driver

        self.raw, self.name, self.device_index = raw_kernel, name, device_index
        self._smem_opt_in = DEFAULT_SMEM_LIMIT
        self._function = driver.CUfunction(raw_kernel.kernel.ptr)  # the CUfunction CuPy loaded
        self._launch_fn, self._ok = driver.cuLaunchKernel, driver.CUresult.CUDA_SUCCESS
        self._plans: dict[tuple, ArgPlan] = {}

    def launch(self, grid, block, args, shared_mem: int = 0) -> None:
        import torch

        gx, gy, gz = dim3(grid)
        bx, by, bz = dim3(block)
        if gx < 1 or gy < 1 or gz < 1 or gy > 65535 or gz > 65535:
            raise ValueError(f"{self.name}: grid {(gx, gy, gz)} out of range (y and z at most 65535)")
        current = torch.cuda.current_stream()  # the current device's: one call answers both questions
        if current.device_index != self.device_index:  # launch in the kernel's own context
            with torch.cuda.device(self.device_index):
                return self.launch(grid, block, args, shared_mem)
        if shared_mem > self._smem_opt_in:
            self._opt_in(shared_mem)
        stream = current.cuda_stream
        signature = tuple(map(type, args))
        with _lock:  # the plan's buffer is shared: one launch fills it at a time (the driver copies it)
            plan = self._plans.get(signature)
            if plan is None:
                plan = self._plans[signature] = ArgPlan(args, self.device_index, self.name)
            result = self._launch_fn(self._function, gx, gy, gz, bx, by, bz, shared_mem, stream,
                                     plan.fill(args), 0)
            if result[0] != self._ok and self._bind_context(result[0]):  # a thread torch never bound
                result = self._launch_fn(self._function, gx, gy, gz, bx, by, bz, shared_mem, stream,
                                         plan.fill(args), 0)
        if result[0] != self._ok:
            _check(result, f"cuLaunchKernel (grid {(gx, gy, gz)}, block {(bx, by, bz)}, "
                           f"{shared_mem} B shared memory)", self.name)

    def _bind_context(self, err) -> bool:
        """On CUDA_ERROR_INVALID_CONTEXT make the device's primary context current on this thread (what a
        runtime-API call does on first use; cuLaunchKernel is a driver call); True if it did."""
        import cupy
        from cuda.bindings import driver

        if err != driver.CUresult.CUDA_ERROR_INVALID_CONTEXT:
            return False
        cupy.cuda.runtime.setDevice(self.device_index)
        return True

    def _opt_in(self, shared_mem: int) -> None:
        from cuda.bindings import driver

        limit = max_dynamic_smem(self.device_index)
        if shared_mem > limit:
            raise ValueError(f"{self.name} needs {shared_mem:,} bytes of shared memory; "
                             f"the device allows {limit:,} per block")
        _check(driver.cuFuncSetAttribute(
            self._function, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared_mem), "cuFuncSetAttribute", self.name)
        self._smem_opt_in = shared_mem


def get_function(source, kernel_name, *, defines=None, arch=None, extra_options=(),
                 device=None) -> Kernel:
    """The kernel loaded on `device` (an index; default torch's current device): pass the inputs'
    device, so that a launch needs no device switch by the caller (Kernel.launch makes it current)."""
    import torch

    if device is None:
        device = torch.cuda.current_device() if torch.cuda.is_available() else 0
    # Fast path: the call's arguments plus the sources' mtimes. Hashing the source and headers
    # (_cache_key) costs 0.2-0.5 ms, which a CUDA-event-timed launch would count as kernel time.
    # (defines in the caller's order: launchers build them in a fixed order; another order only misses)
    fast = (str(source), kernel_name, tuple(defines.items()) if defines else (), arch,
            tuple(extra_options), device, _source_stamp(source))
    hit = _launch_memo.get(fast)
    if hit is not None:
        return hit
    if not torch.cuda.is_available():
        raise RuntimeError("launching a CUDA kernel needs a GPU (torch.cuda.is_available() is False)")
    import cupy

    device = int(device)
    key = _compile(source, defines, arch, tuple(extra_options))[0]
    with _lock:
        kernel = _loaded.get((key, kernel_name, device))
    if kernel is None:
        with cupy.cuda.Device(device):
            module = cupy.RawModule(path=str(cache_dir() / f"{key}.cubin"))
            kernel = Kernel(module.get_function(kernel_name), kernel_name, device)
            kernel.module = module  # the CUmodule lives as long as the kernel
    with _lock:
        kernel = _loaded.setdefault((key, kernel_name, device), kernel)
        _launch_memo[fast] = kernel
    return kernel


_launch_memo: dict[tuple, Kernel] = {}


_stamp_files: dict[str, tuple[str, ...]] = {}
_stamps: dict[str, tuple[float, tuple]] = {}  # source -> (when looked at, mtimes)
STAMP_RECHECK_S = 0.5  # an edit is noticed within this long (two stat calls per launch cost ~5 µs)


def _source_stamp(source, *, max_age_s: float | None = None) -> tuple:
    """mtimes of the source and the headers beside it: an edit (say, in a notebook) misses the memo.
    Looked up again once the last look is max_age_s old (STAMP_RECHECK_S; 0 = every call).
    (A header added after the first launch is not noticed; the full key in _compile would be.)"""
    key = str(source)
    now = time.monotonic()
    cached = _stamps.get(key)
    if cached is not None and now - cached[0] < (STAMP_RECHECK_S if max_age_s is None else max_age_s):
        return cached[1]
    files = _stamp_files.get(key)
    if files is None:
        path = source_path(source)
        headers = sorted(path.parent.glob("*.cuh")) + sorted(path.parent.glob("*.h"))
        files = _stamp_files.setdefault(key, tuple(str(f) for f in [path, *headers]))
    stamp = tuple(os.stat(f).st_mtime_ns for f in files)
    _stamps[key] = (now, stamp)
    return stamp


_smem_limits: dict[int, int] = {}


def max_dynamic_smem(device=None) -> int:
    """cudaDevAttrMaxSharedMemoryPerBlockOptin of the device (bytes)."""
    import cupy
    import torch

    index = torch.cuda.current_device() if device is None else int(device)
    if index not in _smem_limits:
        _smem_limits[index] = cupy.cuda.runtime.deviceGetAttribute(
            cupy.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, index)
    return _smem_limits[index]


# ----------------------------------------------------------------------------- input checks

def check_aligned(name: str, t, align: int = 16) -> None:
    """ValueError unless t starts on an `align`-byte boundary: kernels that move it in 16-byte pieces (cp.async, uint4;
    align 16) or 4-byte ones (a half2 store; align 4) fault on a view at an element offset that breaks that alignment
    (a sticky CUDA error that ends the process's use of the GPU), so it is refused before the launch."""
    if t.data_ptr() % align:
        raise ValueError(f"{name} must start on a {align}-byte boundary (its data pointer is {t.data_ptr() % align} bytes "
                         f"past one: a view at an element offset); the kernel moves it in {align}-byte pieces, so pass "
                         ".clone()")


def check_cuda_inputs(q, k, v, *, supported_dtypes, max_head_dim=None, head_dims=None, aligned=False,
                      gqa=False) -> None:
    """Reject what a kernel cannot take, naming the problem: counting.checks (the references' and
    closed forms' rules and messages) plus what only a kernel needs (CUDA, head dims, contiguity, and with aligned
    16-byte aligned data: the tensor-core kernels' cp.async loads). gqa: k, v may have H_kv heads dividing H."""
    *_, d = check_tensors(q, k, v, dtypes=supported_dtypes, cuda=True, gqa=gqa)
    if max_head_dim is not None and d > max_head_dim:
        raise ValueError(f"head dim d={d} is over this kernel's maximum {max_head_dim}")
    if head_dims is not None and d not in head_dims:
        raise ValueError(f"head dim d={d} unsupported; this kernel takes d in {sorted(head_dims)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (strides {t.stride()} for shape "
                             f"{tuple(t.shape)}); call .contiguous() first")
        if aligned:
            check_aligned(name, t)


_HOPPER: set = set()  # device indices already found to be compute capability 9.x


def require_hopper(device, what: str, instead: str | None = None) -> None:
    """RuntimeError "<what>; <device> is <major>.x [-- use kernels.<instead> there]" unless `device` is compute
    capability 9.x (the sm_90a launchers: wgmma, TMA, clusters). Checked once per device: launchers call it per call."""
    if device.index in _HOPPER:
        return
    import torch

    major = torch.cuda.get_device_capability(device)[0]
    if major != 9:
        raise RuntimeError(f"{what}; {device} is {major}.x" + (f" -- use kernels.{instead} there" if instead else ""))
    _HOPPER.add(device.index)
