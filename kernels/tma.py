"""TMA tensor maps (CUtensorMap) for kernels that load tiles with cp.async.bulk.tensor (sm_90).

    tm = tensor_map(t, box_rows)         # t: a (B, H, N, d) view, any strides with a unit last one (4-D map)
    tm = tensor_map_3d(t, box_rows)      # t: contiguous (B, H, N, d) fp16/bf16 CUDA tensor (the first form)

A tensor map describes a global tensor to the TMA unit: element type, up to 5 dimensions with strides,
the box one instruction copies, the shared-memory swizzle, and what out-of-bounds elements read as.
Here (B, H, N, d) is described as the 3-D tensor (d, N, B*H) (innermost first), box (64, box_rows, 1),
128-byte swizzle, zeros out of bounds: one instruction brings one 64-column panel of `box_rows` rows of
one head, rows past N arrive as zeros (the tails), and the swizzle is the one wgmma descriptors expect.
Encoding is a host call into the driver (cuda.bindings.driver.cuTensorMapEncodeTiled); maps are
memoised per (address, shape, dtype, box), which is all a map depends on.

The map is returned as a numpy array of its 128 bytes (16 uint64): kernels.loader passes a numpy array
argument by value, as the kernel's __grid_constant__ const CUtensorMap parameter expects.
"""
from __future__ import annotations

TENSOR_MAP_WORDS = 16  # CUtensorMap: 128 opaque bytes, alignas(64)
_MEMO: dict = {}
_MEMO_MAX = 256


def _data_type(dtype):
    from cuda.bindings import driver

    names = {"torch.float16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "torch.bfloat16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"}
    return getattr(driver.CUtensorMapDataType, names[str(dtype)])


def tensor_map_3d(t, box_rows: int, box_cols: int = 64):
    """The map of a contiguous (B, H, N, d) tensor as (d, N, B*H), box (box_cols, box_rows, 1)."""
    b, h, n, d = t.shape
    key = (t.data_ptr(), b * h, n, d, str(t.dtype), box_rows, box_cols)
    tm = _MEMO.get(key)
    if tm is not None:
        return tm
    if str(t.dtype) not in ("torch.float16", "torch.bfloat16"):
        raise TypeError(f"tensor maps here are for float16/bfloat16, got {t.dtype}")
    if not t.is_contiguous() or t.data_ptr() % 16:
        raise ValueError("a tensor map needs a contiguous tensor at a 16-byte aligned address")
    if not (1 <= box_rows <= 256 and box_cols * t.element_size() == 128):
        raise ValueError(f"box {box_cols}x{box_rows}: rows must be 1..256 and a row 128 bytes (the swizzle span)")
    import numpy as np
    from cuda.bindings import driver

    es = t.element_size()
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    err, encoded = driver.cuTensorMapEncodeTiled(
        _data_type(t.dtype), 3, t.data_ptr(),
        [u64(d), u64(n), u64(b * h)],            # dims, innermost first
        [u64(d * es), u64(n * d * es)],          # byte strides of dims 1 and 2
        [u32(box_cols), u32(box_rows), u32(1)],  # the box one copy brings
        [u32(1), u32(1), u32(1)],                # element strides
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,  # what wgmma's smem descriptors expect
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)  # NONE: out-of-bounds reads 0
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed with {err.name} for shape {tuple(t.shape)}, "
                           f"box {box_cols}x{box_rows}")
    tm = np.array(encoded.opaque, dtype=np.uint64)
    assert tm.size == TENSOR_MAP_WORDS
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[key] = tm
    return tm


# -- 4-D maps over strided views: (B, H, N, d) with any strides and a unit last one ------------------------
class LayoutError(ValueError):
    """An input the TMA unit cannot describe (unaligned stride or address); the message names it."""


def tensor_map_args(shape, strides, element_size: int, data_ptr: int, box_rows: int, box_cols: int = 64,
                    name: str = "tensor") -> tuple[list, list, list]:
    """(dims, byte strides of dims 1..3, box) of the 4-D map (d, N, H, B) of a (B, H, N, d) view.

    Pure arithmetic (no driver), so the rules are testable without a GPU. cuTensorMapEncodeTiled needs
    the address and every stride past the first 16-byte aligned; a size-1 dim's stride is never used
    by a copy, so it is replaced by a legal one (torch gives such dims arbitrary strides)."""
    b, h, n, d = (int(x) for x in shape)
    sb, sh, sn, sd = (int(x) for x in strides)
    if d > 1 and sd != 1:
        raise LayoutError(f"{name}: the last dimension (d) must have stride 1, got strides {tuple(strides)}; "
                          "call .contiguous() for a copy")
    if data_ptr % 16:
        raise LayoutError(f"{name}: TMA needs a 16-byte aligned address, got {data_ptr:#x} "
                          f"({data_ptr % 16} bytes off); call .contiguous() for a copy")
    es = int(element_size)
    out = []
    legal = d * es  # a stride that any unused (size-1) dim may take
    for dim_name, size, stride in (("N", n, sn), ("H", h, sh), ("B", b, sb)):
        nbytes = stride * es
        if size == 1:
            nbytes = max(legal, 16)
        elif stride <= 0:
            raise LayoutError(f"{name}: the {dim_name} dimension has stride {stride} (a broadcast); TMA needs "
                              "positive strides -- for grouped-query attention pass k and v with H_kv heads")
        elif nbytes % 16:
            raise LayoutError(f"{name}: the {dim_name} stride is {stride} elements = {nbytes} bytes, not a "
                              "multiple of 16 as TMA requires; call .contiguous() for a copy")
        elif nbytes >= 1 << 40:
            raise LayoutError(f"{name}: the {dim_name} stride of {nbytes} bytes is over TMA's 2**40")
        out.append(nbytes)
    if not (1 <= box_rows <= 256 and box_cols * es == 128):
        raise ValueError(f"box {box_cols}x{box_rows}: rows must be 1..256 and a row 128 bytes (the swizzle span)")
    return [d, n, h, b], out, [box_cols, box_rows, 1, 1]


_MEMO4: dict = {}


def tensor_map(t, box_rows: int, box_cols: int = 64, name: str = "tensor"):
    """The 4-D map (d, N, H, B) of a (B, H, N, d) view with unit last stride, box (box_cols, box_rows, 1, 1).

    Memoised by everything the map depends on (address, shape, strides, dtype, box): a model calling
    with the same buffers pays one dict lookup, not a driver call."""
    key = (t.data_ptr(), t.shape, t.stride(), t.dtype, box_rows, box_cols)
    tm = _MEMO4.get(key)
    if tm is not None:
        return tm
    if str(t.dtype) not in ("torch.float16", "torch.bfloat16"):
        raise TypeError(f"tensor maps here are for float16/bfloat16, got {t.dtype}")
    dims, strides, box = tensor_map_args(t.shape, t.stride(), t.element_size(), t.data_ptr(), box_rows,
                                         box_cols, name)
    import numpy as np
    from cuda.bindings import driver

    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    err, encoded = driver.cuTensorMapEncodeTiled(
        _data_type(t.dtype), 4, t.data_ptr(),
        [u64(x) for x in dims], [u64(x) for x in strides], [u32(x) for x in box], [u32(1)] * 4,
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,  # what wgmma's smem descriptors expect
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)  # NONE: out-of-bounds reads 0
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed with {err.name} for {name} of shape "
                           f"{tuple(t.shape)}, strides {t.stride()}, box {box_cols}x{box_rows}")
    tm = np.array(encoded.opaque, dtype=np.uint64)
    assert tm.size == TENSOR_MAP_WORDS
    if len(_MEMO4) >= _MEMO_MAX:
        _MEMO4.clear()
    _MEMO4[key] = tm
    return tm
