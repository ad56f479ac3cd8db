"""cuLaunchKernel's kernelParams (void**) for one signature of argument types, in numpy memory.

    plan = ArgPlan(args, device_index, kernel_name)   # once per argument-type signature
    params = plan.fill(args)                          # per launch: an int, the address of the void** array

The driver copies each kernel parameter from the address in slot i of the array, sized by the kernel
image, so every argument gets one slot of a numpy byte buffer, made once; a launch writes the new
values into it with one struct.pack_into (a format made once per signature). Building those objects per call (ctypes or cuda.bindings' tuple form)
costs tens of µs, which a CUDA-event-timed call counts as kernel time.

Argument kinds: torch tensor -> its device pointer (uint64); Python bool/int -> int32; float -> float32;
numpy scalar -> its exact type; numpy array -> its raw bytes, by value (a struct such as a CUtensorMap,
which a __grid_constant__ parameter takes; 64-byte aligned like the struct).
"""
from __future__ import annotations

import struct as _struct

STRUCT_ALIGN = 64  # CUtensorMap is alignas(64); scalars need at most 8


# struct's standard-size codes ('=' makes 'l' 4 bytes, so numpy's dtype.char cannot be used)
_FORMAT = {("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q", ("u", 1): "B", ("u", 2): "H",
           ("u", 4): "I", ("u", 8): "Q", ("f", 2): "e", ("f", 4): "f", ("f", 8): "d"}


def dim3(dims) -> tuple[int, int, int]:
    if type(dims) is tuple and len(dims) == 3 and type(dims[0]) is int and type(dims[1]) is int \
            and type(dims[2]) is int:
        return dims  # the launchers' usual call: nothing to convert
    dims = tuple(int(x) for x in dims)
    return dims + (1,) * (3 - len(dims))


def _kind(a, device_index: int, kernel: str):
    """(kind, numpy dtype, size in bytes) of one argument; the errors name the kernel."""
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor):
        if not a.is_cuda or a.device.index != device_index:
            raise ValueError(f"{kernel}: tensor argument on {a.device}, kernel on cuda:{device_index}")
        return "tensor", np.dtype(np.uint64), 8
    if isinstance(a, np.ndarray):
        return "struct", np.dtype(np.uint8), a.nbytes
    if isinstance(a, np.generic):
        if a.dtype.kind not in "iuf":
            raise TypeError(f"{kernel}: cannot pass a numpy {type(a).__name__} to a kernel")
        return "numpy", a.dtype, a.dtype.itemsize
    if isinstance(a, bool) or isinstance(a, int):
        return "int", np.dtype(np.int32), 4
    if isinstance(a, float):
        return "float", np.dtype(np.float32), 4
    raise TypeError(f"{kernel}: cannot pass {type(a).__name__} to a kernel")


class ArgPlan:
    def __init__(self, args, device_index: int, kernel: str):
        import numpy as np

        self.device_index, self.kernel = device_index, kernel
        kinds = [_kind(a, device_index, kernel) for a in args]
        # one struct format for the whole buffer ('=': no implicit padding; the 'x' pads are explicit)
        fmt, offsets, end = "=", [], 0
        for kind, dtype, size in kinds:
            align = STRUCT_ALIGN if kind == "struct" else 8
            pad = -end % align
            fmt += f"{pad}x" if pad else ""
            end += pad
            offsets.append(end)
            fmt += f"{size}s" if kind == "struct" else _FORMAT[dtype.kind, size]
            end += size
        self._raw = np.zeros(end + STRUCT_ALIGN, dtype=np.uint8)  # room to align the base
        base_addr = self._raw.__array_interface__["data"][0]
        shift = -base_addr % STRUCT_ALIGN
        self.buffer = self._raw[shift:shift + end]
        self._memory = memoryview(self.buffer)
        self._pack = _struct.Struct(fmt).pack_into
        base_addr += shift
        self.kinds = tuple(k for k, _, _ in kinds)
        self.sizes = [size for _, _, size in kinds]
        self.pointers = np.array([base_addr + o for o in offsets], dtype=np.uint64)
        self.params = self.pointers.__array_interface__["data"][0] if len(args) else 0
        self.fill(args)  # the first call's values, with the per-call checks

    def fill(self, args) -> int:
        """Write this launch's values into the slots (one struct.pack_into); returns the void** address
        for cuLaunchKernel."""
        if len(args) != len(self.kinds):
            raise TypeError(f"{self.kernel}: {len(args)} arguments, the plan has {len(self.kinds)}")
        values = []
        append = values.append
        for kind, a, size in zip(self.kinds, args, self.sizes):
            if kind == "tensor":
                if a.get_device() != self.device_index:  # -1 for a CPU tensor
                    raise ValueError(f"{self.kernel}: tensor argument on {a.device}, "
                                     f"kernel on cuda:{self.device_index}")
                append(a.data_ptr())
            elif kind == "struct":
                b = a.tobytes()
                if len(b) != size:  # struct would pad or cut it silently
                    raise ValueError(f"{self.kernel}: struct argument of {len(b)} bytes, the plan's slot has {size}")
                append(b)
            else:  # int, float, numpy scalar: the format converts (and range-checks)
                append(a)
        try:
            self._pack(self._memory, 0, *values)
        except _struct.error as exc:
            bad = [a for k, a in zip(self.kinds, args) if k == "int" and not -2**31 <= a < 2**31]
            if bad:
                raise OverflowError(f"{self.kernel}: int argument {bad[0]} does not fit int32; pass np.int64") from None
            raise TypeError(f"{self.kernel}: {exc}") from None
        return self.params
