"""The device-generic conformance suite (neurenix_core.testing.suite) over every discovered backend.

The same test functions vendors run with ``pytest -p neurenix_core.testing.plugin --pyargs
neurenix_core.testing.suite``; here they are collected from this folder and parametrized by
tests/contract/conftest.py over one device of each usable backend.
"""

from __future__ import annotations

from neurenix_core.testing.suite.test_autograd import *  # noqa: F403
from neurenix_core.testing.suite.test_creation import *  # noqa: F403
from neurenix_core.testing.suite.test_dtypes import *  # noqa: F403
from neurenix_core.testing.suite.test_elementwise import *  # noqa: F403
from neurenix_core.testing.suite.test_errors import *  # noqa: F403
from neurenix_core.testing.suite.test_fallback import *  # noqa: F403
from neurenix_core.testing.suite.test_fft import *  # noqa: F403
from neurenix_core.testing.suite.test_indexing import *  # noqa: F403
from neurenix_core.testing.suite.test_linalg import *  # noqa: F403
from neurenix_core.testing.suite.test_manipulation import *  # noqa: F403
from neurenix_core.testing.suite.test_memory import *  # noqa: F403
from neurenix_core.testing.suite.test_properties import *  # noqa: F403
from neurenix_core.testing.suite.test_searching import *  # noqa: F403
from neurenix_core.testing.suite.test_statistics import *  # noqa: F403
from neurenix_core.testing.suite.test_transfer import *  # noqa: F403
