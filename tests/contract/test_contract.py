"""The device-generic conformance suite (neurenix_core.testing.suite) over every discovered backend.

The same test functions vendors run with ``pytest -p neurenix_core.testing.plugin --pyargs
neurenix_core.testing.suite``; here they are collected from this folder and parametrized by
tests/contract/conftest.py over one device of each usable backend.
"""

from __future__ import annotations

from neurenix_core.testing.suite.test_autograd import *
from neurenix_core.testing.suite.test_creation import *
from neurenix_core.testing.suite.test_dtypes import *
from neurenix_core.testing.suite.test_elementwise import *
from neurenix_core.testing.suite.test_errors import *
from neurenix_core.testing.suite.test_fallback import *
from neurenix_core.testing.suite.test_fft import *
from neurenix_core.testing.suite.test_indexing import *
from neurenix_core.testing.suite.test_linalg import *
from neurenix_core.testing.suite.test_manipulation import *
from neurenix_core.testing.suite.test_memory import *
from neurenix_core.testing.suite.test_properties import *
from neurenix_core.testing.suite.test_searching import *
from neurenix_core.testing.suite.test_statistics import *
from neurenix_core.testing.suite.test_transfer import *
