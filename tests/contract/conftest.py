"""The conformance kit's fixture and device parametrization for tests/contract/.

When pytest was started with ``-p neurenix_core.testing.plugin`` the plugin already does this;
otherwise these re-exported hooks parametrize ``nx_device`` over one device of every usable
backend (emulated ones included), so plugins installed later show up here automatically.
"""

from __future__ import annotations

import pytest

from neurenix_core.testing import plugin as _kit

nx_device = _kit.nx_device


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not metafunc.config.pluginmanager.has_plugin("neurenix_core.testing.plugin"):
        _kit.pytest_generate_tests(metafunc)
