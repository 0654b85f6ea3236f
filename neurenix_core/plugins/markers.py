"""``hookimpl`` and ``hookspec``: pluggy's two decorators, without importing pluggy.

Every plugin module decorates its hooks at ``import neurenix_core``, so a marker that came from
pluggy would load pluggy (~2.5 ms, a tenth of the import) in every process, although a plugin whose
hooks are plain functions registers without it (registry.py, hooktable.py). These classes set
exactly the attribute pluggy's ``HookimplMarker`` / ``HookspecMarker`` (1.x) set, a dict named
``<project>_impl`` / ``<project>_spec`` with the same keys, so pluggy reads what they mark as its
own, and a plugin decorating with ``pluggy.HookimplMarker("neurenix")`` works as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar, final, overload

__all__ = ["HookimplMarker", "HookspecMarker"]

_F = TypeVar("_F", bound=Callable[..., Any])


@final
class HookspecMarker:
    """Marks a hook specification (``pluggy.HookspecMarker``'s behaviour and attribute)."""

    __slots__ = ("project_name",)

    def __init__(self, project_name: str) -> None:
        self.project_name: Final = project_name

    @overload
    def __call__(
        self,
        function: _F,
        firstresult: bool = ...,
        historic: bool = ...,
        warn_on_impl: Warning | None = ...,
        warn_on_impl_args: Mapping[str, Warning] | None = ...,
    ) -> _F: ...

    @overload
    def __call__(
        self,
        function: None = ...,
        firstresult: bool = ...,
        historic: bool = ...,
        warn_on_impl: Warning | None = ...,
        warn_on_impl_args: Mapping[str, Warning] | None = ...,
    ) -> Callable[[_F], _F]: ...

    def __call__(
        self,
        function: _F | None = None,
        firstresult: bool = False,
        historic: bool = False,
        warn_on_impl: Warning | None = None,
        warn_on_impl_args: Mapping[str, Warning] | None = None,
    ) -> _F | Callable[[_F], _F]:
        def mark(func: _F) -> _F:
            if historic and firstresult:
                raise ValueError("cannot have a historic firstresult hook")
            opts = {"firstresult": firstresult, "historic": historic, "warn_on_impl": warn_on_impl, "warn_on_impl_args": warn_on_impl_args}
            setattr(func, self.project_name + "_spec", opts)
            return func

        return mark if function is None else mark(function)


@final
class HookimplMarker:
    """Marks a plugin's hook function: ``@hookimpl`` or ``@hookimpl(specname=...)``.

    The same signature and the same ``<project>_impl`` dict as ``pluggy.HookimplMarker``.
    """

    __slots__ = ("project_name",)

    def __init__(self, project_name: str) -> None:
        self.project_name: Final = project_name

    @overload
    def __call__(
        self,
        function: _F,
        hookwrapper: bool = ...,
        optionalhook: bool = ...,
        tryfirst: bool = ...,
        trylast: bool = ...,
        specname: str | None = ...,
        wrapper: bool = ...,
    ) -> _F: ...

    @overload
    def __call__(
        self,
        function: None = ...,
        hookwrapper: bool = ...,
        optionalhook: bool = ...,
        tryfirst: bool = ...,
        trylast: bool = ...,
        specname: str | None = ...,
        wrapper: bool = ...,
    ) -> Callable[[_F], _F]: ...

    def __call__(
        self,
        function: _F | None = None,
        hookwrapper: bool = False,
        optionalhook: bool = False,
        tryfirst: bool = False,
        trylast: bool = False,
        specname: str | None = None,
        wrapper: bool = False,
    ) -> _F | Callable[[_F], _F]:
        def mark(func: _F) -> _F:
            opts = {
                "wrapper": wrapper,
                "hookwrapper": hookwrapper,
                "optionalhook": optionalhook,
                "tryfirst": tryfirst,
                "trylast": trylast,
                "specname": specname,
            }
            setattr(func, self.project_name + "_impl", opts)
            return func

        return mark if function is None else mark(function)
