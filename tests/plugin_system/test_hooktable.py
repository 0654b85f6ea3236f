"""Plugins registered without pluggy get exactly what pluggy's registration would give them.

``hooktable.plain_hooks`` answers for a plugin only where pluggy would accept it as it is; every
other plugin goes through pluggy (built on first need). Each case below is registered both ways:
where the plain path answers, its functions and argument names must equal pluggy's; where pluggy
refuses or treats the hooks specially, the plain path must step aside (None).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import pluggy
import pytest
from distributions import healthy_source

from neurenix_core.plugins import hookspecs
from neurenix_core.plugins.hooktable import plain_hooks, plugin_manager, spec_names
from neurenix_core.plugins.markers import HookimplMarker, HookspecMarker

hookimpl = hookspecs.hookimpl


def _plain() -> dict[str, Any]:
    @hookimpl
    def neurenix_manifest() -> dict[str, Any]:
        return {}

    @hookimpl
    def neurenix_probe(context: Any) -> None:
        return None

    @hookimpl
    def neurenix_backend(manifest: Any, probe: Any) -> None:
        return None

    return {"neurenix_manifest": neurenix_manifest, "neurenix_probe": neurenix_probe, "neurenix_backend": neurenix_backend}


def _with(**extra: Any) -> dict[str, Any]:
    return {**_plain(), **extra}


def _defaults() -> dict[str, Any]:
    @hookimpl
    def neurenix_probe(context: Any, verbose: bool = False) -> None:  # a default: not passed
        return None

    return _with(neurenix_probe=neurenix_probe)


def _fewer_arguments() -> dict[str, Any]:
    @hookimpl
    def neurenix_backend(probe: Any) -> None:
        return None

    return _with(neurenix_backend=neurenix_backend)


def _specname() -> dict[str, Any]:
    @hookimpl(specname="neurenix_probe")
    def detect(context: Any) -> None:
        return None

    hooks = _plain()
    del hooks["neurenix_probe"]
    return {**hooks, "detect": detect}


def _unknown_argument() -> dict[str, Any]:
    @hookimpl
    def neurenix_probe(context: Any, unexpected_arg: Any) -> None:
        return None

    return _with(neurenix_probe=neurenix_probe)


def _option(**options: Any) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        @hookimpl(**options)
        def neurenix_probe(context: Any) -> Any:
            yield

        return _with(neurenix_probe=neurenix_probe)

    return build


def _unknown_hook() -> dict[str, Any]:
    @hookimpl
    def neurenix_teleport(where: Any) -> None:
        return None

    return _with(neurenix_teleport=neurenix_teleport)


def _wrapped() -> dict[str, Any]:
    def inner(context: Any, extra: Any) -> None:
        return None

    @hookimpl
    @functools.wraps(inner)
    def neurenix_probe(*args: Any) -> None:
        return None

    return _with(neurenix_probe=neurenix_probe)


def _method_like() -> dict[str, Any]:
    class Hooks:
        @hookimpl
        def neurenix_probe(self, context: Any) -> None:
            return None

    return _with(neurenix_probe=Hooks.neurenix_probe)


def _twice() -> dict[str, Any]:
    @hookimpl(specname="neurenix_probe")
    def other_probe(context: Any) -> None:
        return None

    return _with(other_probe=other_probe)


def _pluggy_marker() -> dict[str, Any]:
    marker = pluggy.HookimplMarker(hookspecs.PROJECT)

    @marker
    def neurenix_probe(context: Any) -> None:
        return None

    return _with(neurenix_probe=neurenix_probe)


def _partial_probe() -> dict[str, Any]:
    def probe(context: Any, flag: bool) -> None:
        return None

    hook = functools.partial(probe, flag=True)
    hook.neurenix_impl = _marked(hookimpl, "neurenix_impl")  # type: ignore[attr-defined]
    return _with(neurenix_probe=hook)


CASES: dict[str, tuple[Callable[[], dict[str, Any]], bool]] = {
    # name: (hooks, whether the plain path takes them)
    "plain": (_plain, True),
    "defaults": (_defaults, True),
    "fewer arguments": (_fewer_arguments, True),
    "specname": (_specname, True),
    "pluggy's own marker": (_pluggy_marker, True),
    "unknown argument": (_unknown_argument, False),
    "wrapper": (_option(wrapper=True), False),
    "hookwrapper": (_option(hookwrapper=True), False),
    "tryfirst": (_option(tryfirst=True), False),
    "unknown hook": (_unknown_hook, False),
    "functools.wraps": (_wrapped, False),
    "method": (_method_like, False),
    "two impls of one hook": (_twice, False),
    "partial": (_partial_probe, False),
}


def _namespace(hooks: dict[str, Any]) -> types.SimpleNamespace:
    return types.SimpleNamespace(__name__="acme_plugin", **hooks)


def _pluggy_view(hooks: dict[str, Any]) -> dict[str, tuple[Any, tuple[str, ...]]] | str:
    """What pluggy registers (hook -> function, argument names), or its error."""
    manager = plugin_manager(hookspecs.PROJECT)
    try:
        manager.register(_namespace(hooks), name="acme")
    except Exception as exc:  # noqa: BLE001 - the refusal is the answer compared
        return f"{type(exc).__name__}: {exc}"
    view = {}
    for name in spec_names():
        for impl in getattr(manager.hook, name).get_hookimpls():
            view[name] = (impl.function, impl.argnames)
    return view


@pytest.mark.parametrize("case", sorted(CASES))
def test_plain_registration_equals_pluggys(case: str) -> None:
    build, taken = CASES[case]
    hooks = build()
    plain = plain_hooks(_namespace(hooks), hookspecs.PROJECT)
    assert (plain is not None) == taken
    if plain is not None:
        assert {name: (impl.function, impl.argnames) for name, impl in plain.items()} == _pluggy_view(hooks)


def test_refused_plugins_still_get_pluggys_message() -> None:
    view = _pluggy_view(_unknown_argument())
    assert isinstance(view, str) and "unexpected_arg" in view and "PluginValidationError" in view


def _marked(marker: Callable[[Callable[[], None]], Any], attribute: str) -> Any:
    """What ``marker`` writes on a fresh function."""

    def f() -> None:
        return None

    return vars(marker(f))[attribute]


def test_the_markers_write_what_pluggys_write() -> None:
    ours, theirs = HookimplMarker("neurenix"), pluggy.HookimplMarker("neurenix")
    assert _marked(ours, "neurenix_impl") == _marked(theirs, "neurenix_impl")
    for options in ({}, {"specname": "x", "tryfirst": True}, {"wrapper": True, "optionalhook": True}, {"hookwrapper": True, "trylast": True}):
        assert _marked(ours(**options), "neurenix_impl") == _marked(theirs(**options), "neurenix_impl")
    spec_ours, spec_theirs = HookspecMarker("neurenix"), pluggy.HookspecMarker("neurenix")
    assert _marked(spec_ours, "neurenix_spec") == _marked(spec_theirs, "neurenix_spec")
    assert _marked(spec_ours(firstresult=True), "neurenix_spec") == _marked(spec_theirs(firstresult=True), "neurenix_spec")
    with pytest.raises(ValueError, match="historic firstresult"):
        _marked(spec_ours(historic=True, firstresult=True), "neurenix_spec")


def test_a_plugin_needing_pluggy_is_served_by_pluggy(plugin_site: Any, run_neurenix: Any, tmp_path: Any) -> None:
    """A third-party plugin with a ``tryfirst`` hook is registered through pluggy, loaded on demand,
    and works beside the plain ones; without such a plugin pluggy is never imported."""
    source = healthy_source().replace("@hookimpl\ndef neurenix_probe", "@hookimpl(tryfirst=True)\ndef neurenix_probe")
    assert "tryfirst" in source
    site = plugin_site("acme", source)
    code = (
        "import sys, json, neurenix_core as nx\n"
        "rows = {b.name: b.status.value for b in nx.backends()}\n"
        "print(json.dumps([rows.get('acme'), 'pluggy' in sys.modules]))"
    )
    state = {"NEURENIX_STATE_DIR": str(tmp_path / "state")}
    assert run_neurenix(code, site=site, env=state) == ["selected", True]
    assert run_neurenix(code, env=state) == [None, False]


def test_a_plugin_may_import_the_lazily_loaded_names_at_its_import(plugin_site: Any, run_neurenix: Any, tmp_path: Any) -> None:
    """Discovery runs inside ``import neurenix_core``: a plugin module importing ``Tensor`` or an
    array API function from it at import still gets them (they load on first use, issue 43)."""
    source = healthy_source().replace(
        "from __future__ import annotations\n", "from __future__ import annotations\nfrom neurenix_core import Tensor, asarray, nn\n"
    )
    site = plugin_site("acme", source)
    code = (
        "import sys, json, neurenix_core as nx\n"
        "rows = {b.name: (b.status.value, b.failure and b.failure.cause) for b in nx.backends()}\n"
        "import nx_plugin_acme as plugin\n"
        "print(json.dumps([rows['acme'], plugin.Tensor is nx.Tensor, plugin.asarray is nx.asarray]))"
    )
    assert run_neurenix(code, site=site, env={"NEURENIX_STATE_DIR": str(tmp_path / "state")}) == [["selected", None], True, True]
