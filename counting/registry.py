"""The one way to add to a registry of named entries (variants.VARIANTS, closed_forms.CLOSED_FORMS)."""
from __future__ import annotations


def add(registry: dict, entry, kind: type, *, replace: bool = False):
    """registry[entry.name] = entry, refusing another type or (without replace) a name taken."""
    if not isinstance(entry, kind):
        raise TypeError(f"register takes a {kind.__module__}.{kind.__name__}, got {type(entry).__name__}")
    if entry.name in registry and not replace:
        raise ValueError(f"{entry.name!r} is already registered (replace=True to swap it)")
    registry[entry.name] = entry
    return entry


def remove(registry: dict, name: str):
    if name not in registry:
        raise KeyError(f"nothing registered as {name!r}; registered: {', '.join(registry)}")
    return registry.pop(name)
