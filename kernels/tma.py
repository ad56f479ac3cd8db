"""TMA tensor maps (CUtensorMap) for kernels that load tiles with cp.async.bulk.tensor (sm_90).

    tm = tensor_map_3d(t, box_rows)      # t: contiguous (B, H, N, d) fp16/bf16 CUDA tensor

A tensor map describes a global tensor to the TMA unit: element type, up to 5 dimensions with strides,
the box one instruction copies, the shared-memory swizzle, and what out-of-bounds elements read as.
Here (B, H, N, d) is described as the 3-D tensor (d, N, B*H) (innermost first), box (64, box_rows, 1),
128-byte swizzle, zeros out of bounds: one instruction brings one 64-column panel of `box_rows` rows of
one head, rows past N arrive as zeros (the tails), and the swizzle is the one wgmma descriptors expect.
Encoding is a host call into libcuda (cuTensorMapEncodeTiled); maps are memoised per
(address, shape, dtype, box), which is all a map depends on.
"""
from __future__ import annotations

import ctypes

TensorMap = ctypes.c_uint64 * 16  # CUtensorMap: 128 opaque bytes, passed to the kernel by value

_DTYPE_CODE = {"torch.float16": 6, "torch.bfloat16": 9}  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16 / _BFLOAT16
_SWIZZLE_128B = 3
_L2_PROMOTION_128B = 2
_OOB_FILL_ZEROS = 0
_MEMO: dict = {}
_MEMO_MAX = 256
_ENCODE: list = []


def _encoder():
    if not _ENCODE:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuTensorMapEncodeTiled
        u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                       ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        fn.restype = ctypes.c_int
        _ENCODE.append(fn)
    return _ENCODE[0]


def tensor_map_3d(t, box_rows: int, box_cols: int = 64) -> TensorMap:
    """The map of a contiguous (B, H, N, d) tensor as (d, N, B*H), box (box_cols, box_rows, 1)."""
    b, h, n, d = t.shape
    key = (t.data_ptr(), b * h, n, d, str(t.dtype), box_rows, box_cols)
    tm = _MEMO.get(key)
    if tm is not None:
        return tm
    if str(t.dtype) not in _DTYPE_CODE:
        raise TypeError(f"tensor maps here are for float16/bfloat16, got {t.dtype}")
    if not t.is_contiguous() or t.data_ptr() % 16:
        raise ValueError("a tensor map needs a contiguous tensor at a 16-byte aligned address")
    if not (1 <= box_rows <= 256 and box_cols * t.element_size() == 128):
        raise ValueError(f"box {box_cols}x{box_rows}: rows must be 1..256 and a row 128 bytes (the swizzle span)")
    es = t.element_size()
    dims = (ctypes.c_uint64 * 3)(d, n, b * h)
    strides = (ctypes.c_uint64 * 2)(d * es, n * d * es)  # bytes, of dims 1 and 2
    box = (ctypes.c_uint32 * 3)(box_cols, box_rows, 1)
    elem = (ctypes.c_uint32 * 3)(1, 1, 1)
    tm = TensorMap()
    rc = _encoder()(ctypes.addressof(tm), _DTYPE_CODE[str(t.dtype)], 3, ctypes.c_void_p(t.data_ptr()), dims, strides,
                    box, elem, 0, _SWIZZLE_128B, _L2_PROMOTION_128B, _OOB_FILL_ZEROS)
    if rc != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed with CUDA error {rc} for shape {tuple(t.shape)}, "
                           f"box {box_cols}x{box_rows}")
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[key] = tm
    return tm
