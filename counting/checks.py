"""The one input check shared by the references (variants._common.check_inputs), the closed forms
(counting.closed_forms.counts) and the CUDA launchers (kernels.loader.check_cuda_inputs): the same
rules and the same messages everywhere.

Torch is imported only inside `check_tensors` (the closed forms and the CLI stay torch-free).
Integers may be Python or NumPy integers (never bools); real numbers Python or NumPy reals.
Every tensor the problem implies (q, k, v, o and naive's S, P) must be indexable with int64: at most
MAX_ELEMENTS = 2**63 - 1 elements, past which a clear error replaces a silent overflow.
"""
from __future__ import annotations

import math
import numbers

MAX_ELEMENTS = 2 ** 63 - 1


def positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def flag(name: str, value) -> bool:
    """A bool (or NumPy bool); anything else, even truthy, is refused rather than guessed."""
    if isinstance(value, bool) or (type(value).__module__ == "numpy" and
                                   type(value).__name__ in ("bool", "bool_")):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {value!r}")


def scale_value(scale, d: int) -> float:
    """The softmax scale: None -> 1/sqrt(d); else a finite real (Python or NumPy number)."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise ValueError(f"scale must be a finite real number or None, got {scale!r}")
    try:
        value = float(scale)
    except OverflowError:  # an integer (or Fraction) past float64's range: a ValueError, one short line
        text = repr(scale) if len(repr(scale)) <= 40 else f"{repr(scale)[:12]}… ({len(repr(scale))} characters)"
        raise ValueError(f"scale must be a finite real number or None, got {text}: beyond float64's range") \
            from None
    if not math.isfinite(value):
        raise ValueError(f"scale must be a finite real number or None, got {scale!r}")
    return value


def sram_capacity(name: str, value) -> int | None:
    """An SRAM capacity in bytes: None (unlimited) or a positive whole number (1024.0 is accepted)."""
    if value is None:
        return None
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        if isinstance(value, numbers.Integral):
            if value > 0:
                return int(value)
        elif math.isfinite(value) and float(value).is_integer() and value > 0:
            return int(value)
    raise ValueError(f"{name} must be a positive integer or None, got {value!r}")


def knob_config(kernel: str, config, knobs, required=(), example=None) -> dict:
    """A launcher's config=: a dict of its compile-time knobs, each name in `knobs` and each value an integer (Python
    or NumPy, never a bool: a define of 64.0 or True builds another kernel than the one named, or none), with every
    knob of `required`. Returns a copy with int values; TypeError / ValueError naming the first problem otherwise."""
    if not isinstance(config, dict):
        raise TypeError(f"{kernel}: config must be a dict of knobs{f' (e.g. {example})' if example else ''} or None, "
                        f"got {type(config).__name__}")
    unknown = sorted(set(config) - set(knobs), key=str)
    if unknown:
        raise ValueError(f"{kernel}: unknown config keys {unknown}; known: {sorted(knobs)}")
    for key, value in config.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{kernel}: config {key}={value!r} must be an integer")
    missing = [key for key in required if key not in config]
    if missing:
        raise ValueError(f"{kernel}: a config needs {missing}{f' (e.g. {example})' if example else ''}")
    return {key: int(value) for key, value in config.items()}


def elements(name: str, count: int) -> int:
    if count > MAX_ELEMENTS:
        raise ValueError(f"{name} would have {count:.3e} elements, over the 2**63 - 1 that int64 "
                         "indexing allows")
    return count


def check_problem(batch, heads, n_q, n_k, d, *, causal, block_q, block_k, scale=None,
                  scores_in_hbm: bool = False) -> dict:
    """Validated sizes: {'batch', 'heads', 'n_q', 'n_k', 'd', 'causal', 'scale', 'block_q', 'block_k'}.

    scores_in_hbm: the variant materialises S and P (B, H, Nq, Nk) (naive): they must be indexable too.
    """
    out = {name: positive_int(name, value) for name, value in (
        ("batch", batch), ("heads", heads), ("n_q", n_q), ("n_k", n_k), ("d", d))}
    out["causal"] = flag("causal", causal)
    out["block_q"] = positive_int("block_q", block_q)
    out["block_k"] = positive_int("block_k", block_k)
    out["scale"] = scale_value(scale, out["d"])
    bh = out["batch"] * out["heads"]
    elements("q", bh * out["n_q"] * out["d"])
    elements("k", bh * out["n_k"] * out["d"])
    if scores_in_hbm:
        elements("S", bh * out["n_q"] * out["n_k"])
    return out


def check_shapes(q_shape, k_shape, v_shape, *, gqa: bool = False) -> tuple[int, int, int, int, int]:
    """(B, H, Nq, Nk, d) of q (B, H, Nq, d), k and v (B, H, Nk, d), or the first mismatch named.

    gqa: k and v may have H_kv heads, H_kv dividing H (grouped-query attention, the kernels that take it)."""
    for name, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if len(shape) != 4:
            raise ValueError(f"{name} must have rank 4 (B, H, N, d), got shape {tuple(shape)}")
    (b, h, n_q, d), (bk, hk, n_k, dk), (bv, hv, n_v, dv) = q_shape, k_shape, v_shape
    if not (b == bk == bv):
        raise ValueError(f"batch mismatch: q has {b}, k has {bk}, v has {bv}")
    if gqa and hk == hv and hk >= 1 and h % hk == 0:
        pass
    elif gqa and hk != hv:
        raise ValueError(f"k and v must have the same number of heads, got {hk} and {hv}")
    elif gqa and hk >= 1:
        raise ValueError(f"grouped-query attention needs H_kv dividing H: q has H = {h} heads, k and v "
                         f"have H_kv = {hk}")
    elif not (h == hk == hv):
        raise ValueError(f"heads mismatch: q has {h}, k has {hk}, v has {hv}")
    if not (d == dk == dv):
        raise ValueError(f"head dim d mismatch: q has {d}, k has {dk}, v has {dv}")
    if n_k != n_v:
        raise ValueError(f"k and v must have the same sequence length, got {n_k} and {n_v}")
    if min(b, h, n_q, n_k, d) < 1:
        raise ValueError(f"every dimension must be >= 1, got q {tuple(q_shape)}, k {tuple(k_shape)}")
    return int(b), int(h), int(n_q), int(n_k), int(d)


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_tensors(q, k, v, *, dtypes, cuda: bool = False, gqa: bool = False) -> tuple[int, int, int, int, int]:
    """Type, rank, dtype (one of `dtypes`, shared), device (one; CUDA when `cuda`) and shapes of
    q, k, v (gqa: k, v may have H_kv heads dividing H, as check_shapes); returns (B, H, Nq, Nk, d)."""
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if cuda and not t.is_cuda:
            raise ValueError(f"{name} is on {t.device}; CUDA kernels need CUDA tensors "
                             "(use variants.VARIANTS for CPU references)")
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4 (B, H, N, d), got shape {tuple(t.shape)}")
        if t.dtype not in dtypes:
            raise TypeError(f"{name} has dtype {_dtype_name(t.dtype)}; supported: "
                            f"{', '.join(_dtype_name(x) for x in dtypes)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {_dtype_name(q.dtype)}, "
                        f"{_dtype_name(k.dtype)}, {_dtype_name(v.dtype)}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    return check_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape), gqa=gqa)


def config_key(config: dict) -> tuple:
    """A key of a config= dict that tells 1 from True and 64 from 64.0 (which hash alike), so a cache of checked
    configs never hands a checked build to a config the check would refuse. Insertion order: another order of the
    same knobs only misses the cache. Hashable when the values are."""
    return tuple([(k, type(v), v) for k, v in config.items()])


def checked_once(cache: dict, prefix: tuple, config, check):
    """check(config), run once per distinct (prefix, config) and kept in `cache` (config None is a key of its own):
    the launchers' config checks and plans sit on a path timed per call. A config that is not a dict of hashable
    values is checked every time, so its error is raised, never a cached build's result."""
    if config is None:
        key = prefix + (None,)
    elif isinstance(config, dict):
        key = prefix + (config_key(config),)
    else:
        return check(config)
    try:
        hit = cache.get(key)
    except TypeError:  # an unhashable value: not a knob; check() names it
        return check(config)
    if hit is None:
        hit = cache[key] = check(config)
    return hit


# -- grid limits every launcher of this repo shares, and the GPU model checks too --------------------
EXTERNAL_NAMES = ("sdpa_flash", "sdpa_cudnn")  # torch's SDPA kernels: their own limits
# every launcher of this repo refuses B*H over this (B*H is a grid dimension, at most 65535 there)
MAX_GRID_ROWS = 65535


def check_grid_rows(kernel: str, batch: int, heads: int) -> None:
    """Raise ValueError for a B*H an in-repo kernel refuses: its launcher calls this before launching, and the GPU
    model calls it too, so there is no time predicted for a launch that cannot happen."""
    if kernel not in EXTERNAL_NAMES and batch * heads > MAX_GRID_ROWS:
        raise ValueError(f"B*H = {batch * heads} is over the {MAX_GRID_ROWS} grid rows the {kernel} launcher uses")
