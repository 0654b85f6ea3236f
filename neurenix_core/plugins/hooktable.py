"""Registering a plugin's hooks without pluggy when pluggy would accept them exactly as they are.

pluggy validates a plugin's hook functions at registration (``PluginValidationError`` for an
argument the spec lacks, wrapper misuse ...) and then only hands each function back with its
argument names: the core calls one plugin's hook at a time (``Registry.call``), never pluggy's
broadcast. Importing pluggy and building its manager cost ~3.5 ms of ``import neurenix_core``,
for plugins (all of this repository's) whose hooks are plain functions that match the specs.

:func:`plain_hooks` recognises such a plugin and reads the same function and argument names
pluggy would. It answers only where pluggy's registration could neither fail, nor warn, nor
depend on anything else registered: plain module-level functions with the default marker options
(``specname`` allowed), each naming a specified hook once, whose positional arguments the spec
has. Anything else (wrappers, ``tryfirst``, decorated or bound functions, unknown hook names, an
argument the spec lacks) answers None and goes through pluggy itself, built on first need by
:func:`plugin_manager`, so every error and warning stays pluggy's own.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    import pluggy

__all__ = ["Impl", "PlainImpl", "plain_hooks", "plugin_manager", "spec_names"]

#: The options ``@hookimpl`` writes when given none (``specname`` is checked on its own).
_DEFAULT_FLAGS: Final = ("wrapper", "hookwrapper", "optionalhook", "tryfirst", "trylast")
_OPTION_KEYS: Final = frozenset((*_DEFAULT_FLAGS, "specname"))


class Impl(Protocol):
    """What the registry reads of a hook implementation (``pluggy.HookImpl`` has both)."""

    @property
    def function(self) -> Callable[..., Any]: ...

    @property
    def argnames(self) -> tuple[str, ...]: ...


class PlainImpl:
    """A hook function registered without pluggy: the function and the arguments it takes."""

    __slots__ = ("argnames", "function")

    def __init__(self, function: Callable[..., Any], argnames: tuple[str, ...]) -> None:
        self.function = function
        self.argnames = argnames


#: (every specified hook's name, the argument names of those pluggy checks no further: not
#: historic, no warnings), read once from hookspecs.py's functions.
_specs: tuple[frozenset[str], dict[str, frozenset[str]]] | None = None


def _read_specs() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    global _specs
    if _specs is None:
        from neurenix_core.plugins import hookspecs

        marker = f"{hookspecs.PROJECT}_spec"
        names: set[str] = set()
        arguments: dict[str, frozenset[str]] = {}
        for name, obj in vars(hookspecs).items():
            opts = getattr(obj, marker, None)
            if not isinstance(obj, types.FunctionType) or not isinstance(opts, dict):
                continue
            names.add(name)
            if not opts.get("historic") and opts.get("warn_on_impl") is None and opts.get("warn_on_impl_args") is None:
                arguments[name] = frozenset(obj.__code__.co_varnames[: obj.__code__.co_argcount])
        _specs = (frozenset(names), arguments)
    return _specs


def spec_names() -> frozenset[str]:
    """The hooks the contract specifies (hookspecs.py): pluggy's manager has a caller for each."""
    return _read_specs()[0]


def plain_hooks(namespace: types.SimpleNamespace, project: str) -> dict[str, PlainImpl] | None:
    """Hook name -> implementation of a plugin's ``@hookimpl`` functions (``registry._hook_namespace``),
    or None when registering them needs pluggy (see the module docstring)."""
    specs = _read_specs()[1]
    found: dict[str, PlainImpl] = {}
    for attr, value in vars(namespace).items():
        if attr.startswith("__"):  # the manager skips dunder names (plugin_manager below)
            continue
        hook = _plain_hook(attr, value, project, specs)
        if hook is None or hook[0] in found:
            return None
        found[hook[0]] = hook[1]
    return found


def _plain_hook(attr: str, value: object, project: str, specs: dict[str, frozenset[str]]) -> tuple[str, PlainImpl] | None:
    """(hook name, implementation) of one attribute, as pluggy 1.x's ``register`` and ``varnames``
    read a module-level function; None for anything they would treat otherwise or refuse."""
    if type(value) is not types.FunctionType or hasattr(value, "__wrapped__"):  # inspect.unwrap would follow it
        return None
    opts = getattr(value, project + "_impl", None)
    if type(opts) is not dict or opts.keys() != _OPTION_KEYS or any(opts[flag] is not False for flag in _DEFAULT_FLAGS):
        return None
    specname = opts["specname"]
    if specname is not None and type(specname) is not str:
        return None
    name = specname or attr
    if name not in specs or "." in value.__qualname__.rsplit("<locals>.", 1)[-1]:  # a method: pluggy may drop "self"
        return None
    code = value.__code__
    args = code.co_varnames[: code.co_argcount]
    if value.__defaults__:  # arguments with defaults are not passed (pluggy's kwargnames)
        args = args[: -len(value.__defaults__)]
    if not specs[name].issuperset(args):  # pluggy refuses it: let pluggy say so
        return None
    return name, PlainImpl(value, args)


def plugin_manager(project: str) -> pluggy.PluginManager:
    """pluggy's manager for the contract's hooks, skipping dunder names when looking for hooks.

    ``register`` inspects every name in ``dir(plugin)``, and two dozen of them are ``object``'s
    dunders; pytest overrides the same documented method for the same reason.
    """
    import pluggy

    from neurenix_core.plugins import hookspecs

    class _PluginManager(pluggy.PluginManager):
        def parse_hookimpl_opts(self, plugin: object, name: str) -> Any:
            if name.startswith("__"):
                return None
            return super().parse_hookimpl_opts(plugin, name)

    manager = _PluginManager(project)
    manager.add_hookspecs(hookspecs)
    return manager
