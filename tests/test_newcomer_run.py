"""What a newcomer sees (issue #29): tensors that print their dtype and device, warnings on their
own line, third-party noise (torch.export, LiteRT's C++ logger) kept off the screen and in
``logging``, and the quickstart's output read as plain words."""

from __future__ import annotations

import inspect
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import neurenix_core as nx
from neurenix_core.tensor.fallback import FallbackWarning

ROOT = Path(__file__).resolve().parents[1]


def _device(name: str) -> nx.Device:
    found = [d for d in nx.devices() if str(d) == name]
    if not found:
        pytest.skip(f"{name} is not available here (set NEURENIX_EMULATE to run its plugin's stack on the CPU)")
    return found[0]


# ---------------------------------------------------------------- Tensor text


def test_print_shows_values_dtype_and_device() -> None:
    t = nx.asarray([[1.0, 2.0], [3.0, 4.0]])
    assert str(t) == repr(t)
    assert str(t).startswith("Tensor([[1., 2.],") and str(t).endswith("dtype=float32, device='cpu:0')")
    assert str(nx.asarray(3, dtype=nx.int32)) == "Tensor(3, dtype=int32, device='cpu:0')"
    # A big tensor is summarised as NumPy does, not printed in full.
    assert "..." in str(nx.arange(5000)) and len(str(nx.arange(5000))) < 200


def test_print_names_the_accelerator_the_tensor_lives_on() -> None:
    dev = _device("npu:0")
    assert str(nx.ones((2,), device=dev)) == "Tensor([1., 1.], dtype=float32, device='npu:0')"


# ---------------------------------------------------------------- warnings on the user's line


def _fallback_warnings(call: object) -> list[warnings.WarningMessage]:
    nx.reset_fallback_stats()  # 'warn' warns once per (op, backend) and process
    with nx.fallback_policy("warn"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert callable(call)
        call()
    return [w for w in caught if issubclass(w.category, FallbackWarning)]


@pytest.mark.parametrize("how", ["namespace function", "operator", "facade"])
def test_fallback_warning_names_the_callers_line(how: str) -> None:
    import neurenix

    x = nx.ones((4,), device=_device("npu:0"))
    calls = {
        "namespace function": lambda: nx.sort(x),
        "operator": lambda: x % x,
        "facade": lambda: neurenix.sort(x),
    }
    call = calls[how]
    caught = _fallback_warnings(call)
    assert caught, f"{how}: no FallbackWarning on npu:0 (the op became native? pick another)"
    # The lambda above is the user's frame: its file and line, not neurenix_core/tensor/*.py.
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, call.__code__.co_firstlineno)] * len(caught)


def test_user_stacklevel_skips_every_neurenix_frame() -> None:
    from neurenix_core.user_frame import user_stacklevel

    # Two frames of a module whose name starts with "neurenix" (as the core's, the facade's and
    # the plugins' do): the warning skips both and lands on this test's line.
    ours: dict[str, Any] = {"__name__": "neurenix_fake.module", "warnings": warnings, "user_stacklevel": user_stacklevel}
    source = "def warn():\n    warnings.warn('x', UserWarning, stacklevel=user_stacklevel())\ndef inner():\n    warn()\n"
    exec(compile(source, "neurenix_fake/module.py", "exec"), ours)  # noqa: S102 - the test's own source, for its module name
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours["inner"]()
        line = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]


def test_a_warning_while_importing_lands_on_the_users_import_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """importlib's frames between neurenix's module and the user's import are skipped, as warnings does."""
    import importlib
    import uuid

    tag = uuid.uuid4().hex[:8]
    # The user imports a neurenix module that imports another, which warns (as `import
    # neurenix_core` reaches config.py): importlib frames lie between all three.
    (tmp_path / f"neurenix_fake_{tag}.py").write_text(
        "import warnings\nfrom neurenix_core.user_frame import user_stacklevel\n"
        "warnings.warn('at import', UserWarning, stacklevel=user_stacklevel())\n"
    )
    (tmp_path / f"neurenix_outer_{tag}.py").write_text(f"import neurenix_fake_{tag}\n")
    (tmp_path / f"user_{tag}.py").write_text(f"x = 1\nimport neurenix_outer_{tag}  # line 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            importlib.import_module(f"user_{tag}")
    finally:
        for name in (f"user_{tag}", f"neurenix_outer_{tag}", f"neurenix_fake_{tag}"):
            sys.modules.pop(name, None)
    assert [(Path(w.filename).name, w.lineno) for w in caught] == [(f"user_{tag}.py", 2)]


def test_a_configuration_warning_names_the_users_import(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("import os\nimport neurenix_core  # line 2\n")
    env = dict(os.environ, NEURENIX_EMULATE="no-such-token")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert f"{script}:2: ConfigurationWarning: NEURENIX_EMULATE lists 'no-such-token'" in proc.stderr, proc.stderr


# ---------------------------------------------------------------- third-party noise


def test_torch_export_noise_is_routed_to_logging(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    torch = pytest.importorskip("torch")
    from neurenix_core.graph.importers.torch_quiet import LOGGER

    class FixedBatch(torch.nn.Module):  # type: ignore[name-defined]  # reshape fixes axis 0, and the example's size 1 is torch's 0/1 specialisation
        def forward(self, x: object) -> object:
            return x.reshape(1, 16) * 2  # type: ignore[attr-defined]

    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.DEBUG, logger=LOGGER):
        warnings.simplefilter("always")
        model = nx.nn.from_torch(FixedBatch(), (torch.ones(1, 16),))
    assert model(nx.ones((1, 16))).shape == (1, 16)
    err = capfd.readouterr().err
    assert "0/1 specialized" not in err and "LeafSpec" not in err, err
    assert not [w for w in caught if issubclass(w.category, FutureWarning)], [str(w.message) for w in caught]
    # neurenix's own warning says which axis is fixed and why; torch's line is kept at DEBUG.
    assert [w for w in caught if issubclass(w.category, nx.NeurenixWarning) and "axis 0" in str(w.message)]
    assert any("0/1 specialized" in r.getMessage() for r in caplog.records if r.name == LOGGER)


def test_torch_onnx_exporter_lines_are_routed_and_others_pass(caplog: pytest.LogCaptureFixture) -> None:
    from neurenix_core.graph.importers.torch_quiet import LOGGER, quiet_export

    torch_logger = logging.getLogger("torch.onnx._internal.exporter._registration")
    with caplog.at_level(logging.DEBUG):
        with quiet_export():
            torch_logger.warning("torchvision is not installed. Skipping torchvision::nms")
            torch_logger.warning("something else torch says")
        torch_logger.warning("torchvision is not installed. Skipping torchvision::nms")  # outside: untouched
    got = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert got == [
        (LOGGER, logging.DEBUG, "torch: torchvision is not installed. Skipping torchvision::nms"),
        (torch_logger.name, logging.WARNING, "something else torch says"),
        (torch_logger.name, logging.WARNING, "torchvision is not installed. Skipping torchvision::nms"),
    ]


def test_native_stderr_lines_become_log_records(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    native_log = pytest.importorskip("neurenix_edgetpu.native_log")
    with caplog.at_level(logging.DEBUG, logger=native_log.LOGGER):
        with native_log.native_stderr_to_logging():
            os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\nERROR: a native failure\nunprefixed\n")
        os.write(2, b"after the block\n")
    assert capfd.readouterr().err == "after the block\n"  # fd 2 is restored, nothing leaked before it
    got = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == native_log.LOGGER]
    assert got == [
        (logging.INFO, "LiteRT: Created TensorFlow Lite XNNPACK delegate for CPU."),
        (logging.ERROR, "LiteRT: a native failure"),
        (logging.WARNING, "LiteRT: unprefixed"),
    ]


def test_litert_delegate_banner_stays_off_stderr() -> None:
    pytest.importorskip("ai_edge_litert")
    # The banner is printed once per process, at the first interpreter: a fresh process sees it.
    code = (
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stdout, level=logging.INFO, format='%(name)s %(levelname)s %(message)s')\n"
        "import neurenix_core as nx\n"
        "m = nx.compile(nx.nn.Sequential(nx.nn.Linear(8, 8)), device='edgetpu:0')\n"
        "print(m(nx.ones((2, 8), device='edgetpu:0')).shape)\n"
    )
    env = dict(os.environ, NEURENIX_EMULATE="edgetpu")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "XNNPACK delegate" not in proc.stderr, proc.stderr
    assert "neurenix_edgetpu.litert INFO LiteRT: Created TensorFlow Lite XNNPACK delegate for CPU." in proc.stdout
    assert "(2, 8)" in proc.stdout
