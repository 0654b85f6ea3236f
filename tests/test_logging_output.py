"""What neurenix writes besides results (issue #43, a newcomer's first hour): one ``logging``
hierarchy rooted at "neurenix", created on first use (``import neurenix_core`` does not import
logging); terminal notices and progress bars on stderr only, on a terminal only; the ``neurenix``
command's ``--verbose`` / ``--quiet`` and its one-line warnings; warnings naming the user's line.

Notices depend on whether stderr is a terminal and on the process's logging configuration
(pytest installs a handler on the root logger), so those checks run in a child interpreter whose
stderr is a pseudo-terminal or a pipe.
"""

from __future__ import annotations

import inspect
import logging
import os
import pty
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import _log
from neurenix_core.cli import main as cli_main
from neurenix_core.errors import NeurenixWarning
from neurenix_core.tensor.fallback import FallbackWarning

ROOT = Path(__file__).resolve().parents[1]


def _child(code: str, *, tty: bool, env: dict[str, str] | None = None) -> tuple[str, str]:
    """(stdout, stderr) of ``code`` in a fresh interpreter, stderr a pseudo-terminal or a pipe."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"JAX_PLATFORMS": "cpu"} | (env or {})
    if not tty:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env,
                              timeout=300, check=True, cwd=ROOT)
        return proc.stdout, proc.stderr
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, stderr=follower,
                              text=True, env=full_env, timeout=300, check=True, cwd=ROOT)
    finally:
        os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child's end is closed and everything was read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.stdout, b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


# ---------------------------------------------------------------------- the logger


def test_import_neurenix_core_does_not_import_logging() -> None:
    out, _ = _child("import sys, neurenix_core, neurenix_core._log; print('logging' in sys.modules)", tty=False)
    assert out.strip() == "False"


def test_one_hierarchy_under_neurenix_with_one_null_handler() -> None:
    log = _log.logger("compile")
    _log.logger("quantization")
    assert log.name == "neurenix.compile" and log.parent is _log.logger()
    root = logging.getLogger("neurenix")
    assert [type(h) for h in root.handlers].count(logging.NullHandler) == 1


NOTICE = "from neurenix_core._log import notice; notice('compile', 'measuring things')"


def test_a_notice_is_shown_on_a_terminal_and_not_when_piped() -> None:
    out, err = _child(NOTICE, tty=True)
    assert (out, err) == ("", "neurenix: measuring things\n")
    assert _child(NOTICE, tty=False) == ("", "")


def test_a_slow_start_notice_is_shown_piped_too() -> None:
    assert _child("from neurenix_core._log import notice; notice('plugins', 'starting', terminal_only=False)", tty=False) == (
        "", "neurenix: starting\n")


def test_a_level_set_on_neurenix_silences_notices() -> None:
    code = "import logging; logging.getLogger('neurenix').setLevel(logging.WARNING)\n" + NOTICE
    assert _child(code, tty=True) == ("", "")


def test_configured_logging_gets_the_notice_once() -> None:
    code = "import logging; logging.basicConfig(level=logging.INFO, format='%(name)s|%(levelname)s|%(message)s')\n" + NOTICE
    _, err = _child(code, tty=True)
    assert err == "neurenix.compile|INFO|measuring things\n"  # through logging only, not printed a second time


def test_host_runtime_measuring_is_an_info_record(caplog: pytest.LogCaptureFixture) -> None:
    from neurenix_core.graph.compile import host_select

    with caplog.at_level(logging.INFO, logger="neurenix"):
        host_select._announce({"litert": object()})  # type: ignore[dict-item]  # only the names are read
    assert [(r.name, r.levelname) for r in caplog.records] == [("neurenix.compile", "INFO")]
    assert "cpu:0: measuring runtimes for this model (litert, numpy)" in caplog.records[0].getMessage()


def test_a_slow_backend_start_is_an_info_record(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from neurenix_core.plugins import factory

    monkeypatch.setattr(factory, "NOTICE_AFTER", 0.01)
    said = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.set()

    seen = Seen()
    _log.logger("plugins").addHandler(seen)
    try:
        with caplog.at_level(logging.INFO, logger="neurenix"):
            # The factory returns once the notice was logged: no clock decides the outcome.
            assert factory.run_with_deadline(lambda: said.wait(60), name="acme", package="nx_acme", timeout=120) is True
    finally:
        _log.logger("plugins").removeHandler(seen)
    assert [r.name for r in caplog.records][:1] == ["neurenix.plugins"]
    assert caplog.records[0].getMessage().startswith("starting backend acme (")


# ---------------------------------------------------------------------- progress bars


CALIBRATE = """
import numpy as np, neurenix_core as nx
from neurenix_core.graph.quantization import calibrate
model = nx.nn.Sequential(nx.nn.Linear(4, 3))
calibrate(model, [np.ones((2, 4), np.float32)] * 3)
"""


def test_calibration_writes_nothing_when_piped() -> None:
    # rich's bar on stdout used to leave one "\n" there, in the middle of the user's own output.
    assert _child(CALIBRATE, tty=False) == ("", "")


def test_calibration_progress_goes_to_the_terminal_on_stderr() -> None:
    out, err = _child(CALIBRATE, tty=True)
    assert out == "" and "calibrating" in err


def test_neurenix_quiet_level_hides_progress_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_log, "_terminal", lambda: True)
    root = _log.logger()
    before = root.level
    try:
        assert _log.progress("quantization") is not None
        root.setLevel(logging.ERROR)
        assert _log.progress("quantization") is None and not _log.shows_progress("generation")
    finally:
        root.setLevel(before)


# ---------------------------------------------------------------------- the command


def _fake_devices(args: Any) -> int:
    _log.logger("compile").debug("a debug detail")
    _log.notice("compile", "a notice")
    warnings.warn("something fell back", FallbackWarning, stacklevel=1)
    return 0


@pytest.mark.parametrize("flag", ["--verbose", "-v"])
def test_verbose_shows_every_record_and_one_line_warnings(flag: str, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_main, "cmd_devices", _fake_devices)
    assert cli_main.main([flag, "devices"]) == 0
    err = capsys.readouterr().err
    assert "neurenix.compile: a debug detail\n" in err and "neurenix.compile: a notice\n" in err
    assert "neurenix: warning: FallbackWarning: something fell back\n" in err and ".py:" not in err
    assert _log.logger().level == logging.NOTSET and len(_log.logger().handlers) == 1  # restored


@pytest.mark.parametrize("flag", ["--quiet", "-q"])
def test_quiet_shows_nothing_but_errors(flag: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_main, "cmd_devices", _fake_devices)
    shown = warnings.showwarning
    assert cli_main.main([flag, "devices"]) == 0
    assert capsys.readouterr() == ("", "")
    assert warnings.showwarning is shown and _log.logger().level == logging.NOTSET


def test_verbose_and_quiet_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main.main(["--verbose", "--quiet", "devices"])
    assert "not allowed with argument" in capsys.readouterr().err


def _old_onnx(folder: Path) -> Path:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    path = folder / "old.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]), str(path))
    return path


def test_the_command_prints_a_warning_as_one_line_and_quiet_drops_it(tmp_path: Path) -> None:
    model = _old_onnx(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"NEURENIX_STATE_DIR": str(tmp_path / "state")}

    def export(*flags: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "neurenix_core.cli.main", *flags, "export", str(model), "--device", "cpu:0",
               "--out", str(tmp_path / f"art{len(flags)}")]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)

    plain, quiet = export(), export("--quiet")
    assert plain.returncode == 0 and quiet.returncode == 0, plain.stderr + quiet.stderr
    assert plain.stderr == ("neurenix: warning: NeurenixWarning: from_onnx(tiny): the model uses ONNX opset 11; it was "
                            "converted to opset 13 with onnx.version_converter before import\n")
    assert quiet.stderr == "" and quiet.stdout.startswith("exported ")


# ---------------------------------------------------------------------- warnings name the user's line


def test_an_old_opset_warning_names_the_users_line(tmp_path: Path) -> None:
    model = _old_onnx(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nx.nn.from_onnx(str(model))
        line = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]
    hits = [w for w in caught if issubclass(w.category, NeurenixWarning)]
    assert [(w.filename, w.lineno) for w in hits] == [(__file__, line)]


def test_a_weights_conversion_warning_names_the_users_line(tmp_path: Path) -> None:
    model = nx.nn.Linear(4, 3)
    path = tmp_path / "w64.npz"
    wider: dict[str, Any] = {k: np.asarray(v, np.float64) for k, v in model.state_dict().items()}
    np.savez(path, **wider)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.load(path)
        line = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]
    hits = [w for w in caught if issubclass(w.category, NeurenixWarning)]
    assert [(w.filename, w.lineno) for w in hits] == [(__file__, line)]
    assert "converted to the model's dtype" in str(hits[0].message)


def test_pytorch_frames_between_the_user_and_neurenix_are_skipped() -> None:
    """torch.compile(backend="neurenix") calls neurenix from dynamo's eval_frame.py: a warning
    lands on the user's forward, not there (torch.from_dlpack of a Tensor likewise)."""
    from neurenix_core.user_frame import user_stacklevel

    ours: dict[str, Any] = {"__name__": "neurenix_fake.piece", "warnings": warnings, "user_stacklevel": user_stacklevel}
    source = "def warn():\n    warnings.warn('x', UserWarning, stacklevel=user_stacklevel())\n"
    exec(compile(source, "neurenix_fake/piece.py", "exec"), ours)  # noqa: S102 - the test's own source, for its module name
    glue: dict[str, Any] = {"__name__": "torch._dynamo.fake_eval_frame", "warn": ours["warn"]}
    exec(compile("def call():\n    warn()\n", "torch/_dynamo/fake_eval_frame.py", "exec"), glue)  # noqa: S102
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        glue["call"]()
        line = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]


def test_automatic_selection_moving_on_names_the_users_line(plugin_site: Any, run_neurenix: Any) -> None:
    from distributions import healthy_source

    site = plugin_site("acme", healthy_source(backend="raise RuntimeError('firmware handshake failed')"))
    out = run_neurenix(
        """
        import json, sys, warnings, neurenix_core as nx
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            line = sys._getframe().f_lineno + 1
            t = nx.zeros(2)
        print(json.dumps({"line": line, "at": [[w.filename, w.lineno] for w in caught if "selection moved" in str(w.message)]}))
        """,
        site=site,
    )
    assert out["at"] == [["<string>", out["line"]]]


# ---------------------------------------------------------------------- third-party lines


@pytest.mark.slow  # transformers' import and a Llama step export: ~15 s
def test_generate_adds_no_line_to_what_building_the_model_printed(tmp_path: Path) -> None:
    """torchao's "Failed to load ..._C_mxfp8..." and torch's pytree "W... _pytree.py:630" lines
    come from the user's own import of a transformers model class (transformers.quantizers
    imports torchao); neurenix's import, export, compile and generation add nothing after it."""
    pytest.importorskip("transformers")
    code = """
        import sys
        sys.path.insert(0, "tests/support")
        import hf_zoo
        model, _ = hf_zoo.build("llama")
        print("--- neurenix from here", file=sys.stderr, flush=True)
        import numpy as np, neurenix_core as nx
        out = nx.generate(model, np.array([[3, 4, 5]]), max_new_tokens=3, device="cpu:0")
        print(out.shape)
    """
    out, err = _child(code, tty=False, env={"NEURENIX_STATE_DIR": str(tmp_path)})
    assert out == "(1, 6)\n"
    assert err.split("--- neurenix from here\n", 1)[1] == ""
