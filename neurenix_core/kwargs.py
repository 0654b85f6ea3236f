"""Strict keyword arguments for the public entry points: a misspelt name is a TypeError that
names it and the closest valid name.

Python 3.11 already refuses an unknown keyword, but without a suggestion, and an entry point that
takes ``**options`` (``nx.compile``) would not refuse it at all. :func:`strict_kwargs` wraps an
entry point so that ``nx.nn.from_torch(m, x, statc=True)`` says
``nx.nn.from_torch() got an unexpected keyword argument 'statc'; did you mean 'static'?``.

The wrapper keeps the function's identity (``functools.wraps``: ``inspect.signature``, ``help()``,
pickling by reference and the type a checker sees are the wrapped function's) and costs one set
comparison per call with keywords; it is for entry points, never for per-op paths.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar

__all__ = ["closest", "strict_kwargs", "unexpected_keyword"]

F = TypeVar("F", bound=Callable[..., Any])


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest to ``name`` (difflib's ratio, case-insensitive), or None when none is
    near enough to be a plausible misspelling."""
    import difflib  # only on the error path: ~2 ms of imports nobody else needs

    pool = sorted(set(candidates))
    by_lower = {c.lower(): c for c in pool}
    found = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    if found:
        return by_lower[found[0]]
    # A prefix is a plausible misspelling too (``calib`` for ``calibration``).
    prefixed = [c for c in pool if len(name) >= 3 and c.lower().startswith(name.lower())]
    return prefixed[0] if len(prefixed) == 1 else None


def unexpected_keyword(function: str, name: str, valid: Collection[str], where: str = "") -> TypeError:
    """Python's own message for an unknown keyword, plus the closest valid name (or the list of
    valid ones when none is close) and ``where``, which says what was checked."""
    near = closest(name, valid)
    hint = f"did you mean {near!r}?" if near is not None else f"it takes {', '.join(sorted(valid)) or 'no keyword arguments'}"
    return TypeError(f"{function}() got an unexpected keyword argument {name!r}; {hint}{where}")


def _keyword_names(fn: Callable[..., Any]) -> tuple[frozenset[str], frozenset[str]]:
    """(names a caller may pass by keyword, positional-only names), read from the code object:
    ``inspect.signature`` costs ~30 µs per function, and these decorators run at import."""
    code = fn.__code__  # a plain function (checked by the caller)
    params = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return frozenset(params[code.co_posonlyargcount:]), frozenset(params[: code.co_posonlyargcount])


#: Never suggested: a method's receiver is not an argument a caller names.
_RECEIVERS = frozenset({"self", "cls"})


def strict_kwargs(public: str) -> Callable[[F], F]:
    """Decorate a public entry point (a plain function or method without ``**kwargs``):
    an unknown keyword raises :func:`unexpected_keyword`'s TypeError naming ``public``
    (``"nx.compile_step"``) before the function runs."""

    def decorate(fn: F) -> F:
        if not hasattr(fn, "__code__") or fn.__code__.co_flags & 0x08:  # CO_VARKEYWORDS
            raise TypeError(f"strict_kwargs({public!r}) needs a plain function without **kwargs, got {fn!r}")
        names, positional_only = _keyword_names(fn)
        suggest = names - _RECEIVERS

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            if kwargs and not names.issuperset(kwargs):
                unknown = [k for k in kwargs if k not in names and k not in positional_only]
                if unknown:  # a positional-only name given by keyword: Python's own error says so
                    raise unexpected_keyword(public, unknown[0], suggest)
            return fn(*args, **kwargs)

        checked.__strict_kwargs__ = public  # type: ignore[attr-defined]  # what tests/test_strict_arguments.py walks
        return checked  # type: ignore[return-value]  # same signature: functools.wraps

    return decorate
