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
        raw device pointers: no copies), numpy scalars (passed as their exact type), or Python
        int/float (passed as int32/float32). Dynamic shared memory over 48 KB is opted into with
        the max-dynamic-shared-memory function attribute.
    check_cuda_inputs(q, k, v, *, supported_dtypes, max_head_dim=None, head_dims=None)
        TypeError/ValueError with a clear message for non-tensors, CPU tensors, tensors on different
        devices, mismatched shapes, unsupported dtype or head dim, non-contiguous inputs.
    max_dynamic_smem(device=None) -> int
        The opt-in per-block shared-memory limit of the device (227 KB on an H100/H200).

Compile options (all kernels): -arch=<arch> -std=c++17 -lineinfo --ptxas-options=-v
-I<the source's folder> -I<CUDA include dir> -D<name>=<value> for each define. -lineinfo costs no
speed and lets compute-sanitizer name source lines. No --use_fast_math: the teaching tier is held
to float32 accuracy against the float64 oracle.

Environment: FA_KERNEL_CACHE sets the on-disk cache folder (default ~/.cache/fa-workbench/cubins);
CUDA_PATH / CUDA_HOME name a CUDA toolkit whose include/ holds cuda_fp16.h; FA_KERNEL_ARCH overrides
the default arch. NVRTC itself comes from the nvidia-cuda-nvrtc wheel (or a CUDA toolkit), found
through cupy_backends.
"""
from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import re
import tempfile
import threading
import time
from pathlib import Path

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


# ----------------------------------------------------------------------------- toolchain discovery

def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()  # loads libnvrtc: fails here when it is absent
        return nvrtc
    except Exception as exc:  # ImportError, or cuda-pathfinder's "library not found"
        raise ToolchainMissing(
            "NVRTC is not available (pip install nvidia-cuda-nvrtc, or install a CUDA toolkit): "
            f"{exc}") from exc


def nvrtc_version() -> tuple[int, int]:
    return tuple(_nvrtc().getVersion())


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

def compile_options(source, *, defines=None, arch=None, extra_options=()) -> list[str]:
    """The full NVRTC command line for one compilation (the single source of compile flags)."""
    path = source_path(source)
    arch = arch or default_arch()
    opts = [f"-arch={arch}", *BASE_OPTIONS, f"-I{path.parent}"]
    opts += [f"-I{d}" for d in cuda_include_dirs()]
    for name, value in sorted((defines or {}).items()):
        opts.append(f"-D{name}" if value is None else f"-D{name}={value}")
    opts += list(extra_options)
    return opts


def _cache_key(path: Path, options: list[str]) -> str:
    h = hashlib.sha256()
    h.update(path.read_bytes())
    for header in sorted(path.parent.glob("*.cuh")) + sorted(path.parent.glob("*.h")):
        h.update(header.name.encode())
        h.update(header.read_bytes())
    h.update(json.dumps([str(path.name), [o for o in options if not o.startswith("-I")],
                         list(nvrtc_version())]).encode())
    return h.hexdigest()[:32]


def _compile(source, defines, arch, extra_options) -> tuple[str, bytes, str]:
    """(key, cubin, ptxas log), from the in-process cache, the disk cache, or NVRTC."""
    path = source_path(source)
    options = compile_options(path, defines=defines, arch=arch, extra_options=extra_options)
    if not any(o.startswith("-arch=sm_") for o in options):
        raise ValueError(f"a cubin needs a real arch (sm_XY), got options {options}")
    key = _cache_key(path, options)
    with _lock:
        if key in _compiled:
            return (key, *_compiled[key])
    cubin_file, log_file = cache_dir() / f"{key}.cubin", cache_dir() / f"{key}.log"
    if cubin_file.is_file() and log_file.is_file():
        result = cubin_file.read_bytes(), log_file.read_text()
    else:
        result = _nvrtc_compile(path, options)
        _atomic_write(cubin_file, result[0])
        _atomic_write(log_file, result[1].encode())
    with _lock:
        _compiled[key] = result
    return (key, *result)


def _nvrtc_compile(path: Path, options: list[str]) -> tuple[bytes, str]:
    nvrtc = _nvrtc()
    prog = nvrtc.createProgram(path.read_text(), path.name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as exc:
            raise CompileError(f"NVRTC failed on {path.name} with {' '.join(options)}:\n"
                               f"{nvrtc.getProgramLog(prog)}") from exc
        return nvrtc.getCUBIN(prog), nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)


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


def parse_ptxas_log(log: str) -> dict[str, dict]:
    """kernel name -> resources, from ptxas' -v report (one 'Compiling entry function' section each)."""
    out, current = {}, None
    for line in log.splitlines():
        if m := _PTXAS_FUNC.search(line):
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
    return out


def resource_usage(source, kernel_name, *, defines=None, arch=None, extra_options=()) -> dict:
    log = _compile(source, defines, arch, tuple(extra_options))[2]
    table = parse_ptxas_log(log)
    if kernel_name not in table:
        raise KeyError(f"{kernel_name} not among the kernels of {source}: {sorted(table)}")
    return dict(table[kernel_name])


# ----------------------------------------------------------------------------- loading, launching

class Kernel:
    """A loaded kernel, launched on torch's current stream of the device it was loaded on.

    Launch path: cuLaunchKernel through ctypes (a few µs of host work) once the first launch has gone
    through CuPy (which opts into the dynamic shared memory); CuPy's own launch costs tens of µs,
    which a CUDA-event-timed call counts as kernel time. FA_KERNEL_LAUNCH=cupy keeps CuPy's path
    (for comparison), as does a machine whose libcuda cannot be opened.
    """

    def __init__(self, raw_kernel, name: str, device_index: int):
        self.raw, self.name, self.device_index = raw_kernel, name, device_index
        self._smem_opt_in = DEFAULT_SMEM_LIMIT
        self._launched_by_cupy = False
        self._function_ptr = raw_kernel.kernel.ptr  # the CUfunction cuLaunchKernel takes
        self._plans: dict[tuple, _LaunchPlan] = {}  # argument types -> ctypes holders

    def launch(self, grid, block, args, shared_mem: int = 0) -> None:
        grid = _dim3(grid)
        block = _dim3(block)
        if grid[0] < 1 or grid[1] < 1 or grid[2] < 1 or grid[1] > 65535 or grid[2] > 65535:
            raise ValueError(f"{self.name}: grid {grid} out of range (y and z at most 65535)")
        raw_args = any(isinstance(a, ctypes.Array) for a in args)  # e.g. a CUtensorMap passed by value
        if raw_args:  # CuPy cannot pass a struct by value: the driver does it all, smem opt-in included
            drv = _driver()
            if drv is None:
                raise RuntimeError(f"{self.name}: a by-value struct argument needs the driver launch path "
                                   "(libcuda through ctypes; FA_KERNEL_LAUNCH=cupy cannot pass it)")
            if shared_mem > self._smem_opt_in:
                self._opt_in_driver(drv, shared_mem)
        else:
            drv = _driver() if self._launched_by_cupy and shared_mem <= self._smem_opt_in else None
        if drv is None:
            self._launch_cupy(grid, block, args, shared_mem)
            return
        import torch

        if torch.cuda.current_device() != self.device_index:  # launch in the kernel's own context
            with torch.cuda.device(self.device_index):
                return self.launch(grid, block, args, shared_mem)
        signature = tuple(map(type, args))
        with _lock:  # the plan's ctypes holders are shared: one launch fills them at a time
            plan = self._plans.get(signature)
            if plan is None:
                plan = self._plans[signature] = _LaunchPlan(args, self.device_index, self.name)
            params = plan.fill(args)
            stream = _current_raw_stream(self.device_index)
            rc = drv.cuLaunchKernel(self._function_ptr, grid[0], grid[1], grid[2], block[0], block[1],
                                    block[2], shared_mem, stream, params, None)
        if rc != 0:
            raise RuntimeError(f"{self.name}: cuLaunchKernel failed: {_driver_error(drv, rc)} "
                               f"(grid {grid}, block {block}, {shared_mem} B shared memory)")

    def _opt_in_driver(self, drv, shared_mem: int) -> None:
        limit = max_dynamic_smem(self.device_index)
        if shared_mem > limit:
            raise ValueError(f"{self.name} needs {shared_mem:,} bytes of shared memory; "
                             f"the device allows {limit:,} per block")
        rc = drv.cuFuncSetAttribute(ctypes.c_void_p(self._function_ptr), 8, ctypes.c_int(shared_mem))
        if rc != 0:  # 8 = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            raise RuntimeError(f"{self.name}: cuFuncSetAttribute failed: {_driver_error(drv, rc)}")
        self._smem_opt_in = shared_mem

    def _launch_cupy(self, grid, block, args, shared_mem: int) -> None:
        import cupy
        import torch

        packed = tuple(_kernel_arg(a, self.device_index, self.name) for a in args)
        with cupy.cuda.Device(self.device_index):
            if shared_mem > self._smem_opt_in:
                limit = max_dynamic_smem(self.device_index)
                if shared_mem > limit:
                    raise ValueError(f"{self.name} needs {shared_mem:,} bytes of shared memory; "
                                     f"the device allows {limit:,} per block")
                self.raw.max_dynamic_shared_size_bytes = shared_mem
                self._smem_opt_in = shared_mem
            stream = torch.cuda.current_stream(self.device_index)
            with cupy.cuda.ExternalStream(stream.cuda_stream, self.device_index):
                self.raw(grid, block, packed, shared_mem=shared_mem)
        self._launched_by_cupy = True


_DRIVER: list = []  # [ctypes.CDLL | None] once looked up


def _driver():
    """libcuda's cuLaunchKernel through ctypes, or None (FA_KERNEL_LAUNCH=cupy, or no libcuda)."""
    if not _DRIVER:
        lib = None
        if os.environ.get("FA_KERNEL_LAUNCH", "driver") != "cupy":
            try:
                lib = ctypes.CDLL("libcuda.so.1")
                c_uint = ctypes.c_uint
                lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint,
                                               c_uint, c_uint, ctypes.c_void_p,
                                               ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
                lib.cuLaunchKernel.restype = ctypes.c_int
            except (OSError, AttributeError):
                lib = None
        _DRIVER.append(lib)
    return _DRIVER[0]


def _driver_error(drv, rc: int) -> str:
    msg = ctypes.c_char_p()
    try:
        drv.cuGetErrorString(ctypes.c_int(rc), ctypes.byref(msg))
    except AttributeError:
        pass
    return f"CUDA error {rc}" + (f" ({msg.value.decode()})" if msg.value else "")


def _dim3(dims) -> tuple[int, int, int]:
    dims = tuple(int(x) for x in dims)
    return dims + (1,) * (3 - len(dims))


def _current_raw_stream(device_index: int) -> int:
    """torch's current stream on the device, as the CUstream handle (torch's fast accessor first)."""
    import torch

    try:
        return torch._C._cuda_getCurrentRawStream(device_index)
    except AttributeError:
        return torch.cuda.current_stream(device_index).cuda_stream


class _LaunchPlan:
    """cuLaunchKernel's argument array for one signature of argument types: ctypes holders made once,
    refilled per launch (making ctypes objects and the pointer array costs tens of µs per call)."""

    def __init__(self, args, device_index: int, kernel: str):
        self.device_index, self.kernel = device_index, kernel
        self.holders = [type(a)() if isinstance(a, ctypes.Array) else _ctypes_arg(a, device_index, kernel)
                        for a in args]  # validates and converts
        self.params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(h) for h in self.holders])
        import torch

        self.kinds = []
        for a in args:
            self.kinds.append("tensor" if isinstance(a, torch.Tensor) else
                              "raw" if isinstance(a, ctypes.Array) else
                              "int" if type(a) in (int, bool) else "float" if type(a) is float else "numpy")

    def fill(self, args):
        for holder, kind, a in zip(self.holders, self.kinds, args):
            if kind == "tensor":
                if not a.is_cuda or a.get_device() != self.device_index:
                    raise ValueError(f"{self.kernel}: tensor argument on {a.device}, "
                                     f"kernel on cuda:{self.device_index}")
                holder.value = a.data_ptr()
            elif kind == "int":
                if not -2**31 <= a < 2**31:
                    raise OverflowError(f"{self.kernel}: int argument {a} does not fit int32; pass np.int64")
                holder.value = int(a)
            elif kind == "float":
                holder.value = a
            elif kind == "raw":
                ctypes.memmove(holder, a, ctypes.sizeof(holder))
            else:
                holder.value = a.item()
        return self.params


_NP_TO_CTYPES: dict = {}  # numpy scalar type -> ctypes type (filled on first use: numpy imports lazily)


def _ctypes_arg(a, device_index: int, kernel: str):
    """_kernel_arg's conversion (and its errors), as a ctypes value for cuLaunchKernel."""
    value = _kernel_arg(a, device_index, kernel)
    if not _NP_TO_CTYPES:
        import numpy as np

        _NP_TO_CTYPES.update({np.int32: ctypes.c_int32, np.int64: ctypes.c_int64,
                              np.uint32: ctypes.c_uint32, np.uint64: ctypes.c_uint64,
                              np.float32: ctypes.c_float, np.float64: ctypes.c_double})
    ctype = _NP_TO_CTYPES.get(type(value))
    if ctype is None:
        raise TypeError(f"{kernel}: cannot pass a numpy {type(value).__name__} to a kernel")
    return ctype(value.item())


def _kernel_arg(a, device_index: int, kernel: str):
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor):
        if not a.is_cuda or a.device.index != device_index:
            raise ValueError(f"{kernel}: tensor argument on {a.device}, kernel on cuda:{device_index}")
        return np.uint64(a.data_ptr())  # a raw device pointer: the kernel reads torch's memory
    if isinstance(a, np.generic):
        return a
    if isinstance(a, bool):
        return np.int32(a)
    if isinstance(a, int):
        if not -2**31 <= a < 2**31:
            raise OverflowError(f"{kernel}: int argument {a} does not fit int32; pass np.int64")
        return np.int32(a)
    if isinstance(a, float):
        return np.float32(a)
    raise TypeError(f"{kernel}: cannot pass {type(a).__name__} to a kernel")


def get_function(source, kernel_name, *, defines=None, arch=None, extra_options=(),
                 device=None) -> Kernel:
    """The kernel loaded on `device` (an index; default torch's current device): pass the inputs'
    device, so that a launch needs no device switch by the caller (Kernel.launch makes it current)."""
    import cupy
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("launching a CUDA kernel needs a GPU (torch.cuda.is_available() is False)")
    device = torch.cuda.current_device() if device is None else int(device)
    # Fast path: the call's arguments plus the sources' mtimes. Hashing the source and headers
    # (_cache_key) costs 0.2-0.5 ms, which a CUDA-event-timed launch would count as kernel time.
    fast = (str(source), kernel_name, tuple(sorted((defines or {}).items())), arch,
            tuple(extra_options), device, _source_stamp(source))
    hit = _launch_memo.get(fast)
    if hit is not None:
        return hit
    key = _compile(source, defines, arch, tuple(extra_options))[0]
    with _lock:
        kernel = _loaded.get((key, kernel_name, device))
    if kernel is None:
        with cupy.cuda.Device(device):
            module = cupy.RawModule(path=str(cache_dir() / f"{key}.cubin"))
            kernel = Kernel(module.get_function(kernel_name), kernel_name, device)
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

def check_cuda_inputs(q, k, v, *, supported_dtypes, max_head_dim=None, head_dims=None) -> None:
    """Reject what a kernel cannot take, naming the problem: analysis.checks (the references' and
    closed forms' rules and messages) plus what only a kernel needs (CUDA, head dims, contiguity)."""
    from analysis.checks import check_tensors

    *_, d = check_tensors(q, k, v, dtypes=supported_dtypes, cuda=True)
    if max_head_dim is not None and d > max_head_dim:
        raise ValueError(f"head dim d={d} is over this kernel's maximum {max_head_dim}")
    if head_dims is not None and d not in head_dims:
        raise ValueError(f"head dim d={d} unsupported; this kernel takes d in {sorted(head_dims)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (strides {t.stride()} for shape "
                             f"{tuple(t.shape)}); call .contiguous() first")
