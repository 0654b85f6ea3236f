"""The device-generic conformance suite: every test takes the ``nx_device`` fixture.

One module per capability (the name after ``test_`` is the capability in the JSON report).
Run it with the plugin ``neurenix_core.testing.plugin``; see docs/conformance.md.
"""
