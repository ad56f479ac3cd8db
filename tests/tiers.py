"""The slow tier (conftest.py): a build matrix whose every build CI compiles, of which a plain `pytest` compiles one
per kind."""
from __future__ import annotations

import pytest


def one_per(params, key, ids=None):
    """pytest params for a build matrix: the first of each key(param) in the default tier, the rest marked slow."""
    seen, out = set(), []
    for i, param in enumerate(params):
        k = key(param)
        marks = () if k not in seen else (pytest.mark.slow,)
        seen.add(k)
        out.append(pytest.param(param, marks=marks, id=None if ids is None else ids[i]))
    return out
