"""Every bad NEURENIX_* value gets a ConfigurationError or a documented ConfigurationWarning (issue 28).

In-process checks of ``neurenix_core.config`` (it takes a mapping), subprocess checks of
``import neurenix_core`` and ``neurenix doctor`` with the bad environment, and a hypothesis
fuzz of every variable: only NeurenixError subclasses (or ConfigurationWarning) escape.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neurenix_core.config import (
    MAX_TIMEOUT,
    MIN_TIMEOUT,
    VARIABLES,
    Config,
    cpu_runtime,
    enforce,
    inspect_config,
    plugin_problems,
    read_config,
)
from neurenix_core.device import as_device
from neurenix_core.errors import ConfigurationError, ConfigurationWarning

TIMEOUTS = ("NEURENIX_PROBE_TIMEOUT", "NEURENIX_NATIVE_PROBE_TIMEOUT", "NEURENIX_BACKEND_TIMEOUT")
SCRIPT = shutil.which("neurenix", path=str(Path(sys.executable).parent)) or "neurenix"


def _levels(env: dict[str, str]) -> dict[str, str]:
    return {p.variable: p.level for p in inspect_config(env).problems}


# ---------------------------------------------------------------------------- timeouts


@pytest.mark.parametrize("key", TIMEOUTS)
@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "1e400", "0", "-1", "abc", "2s"])
def test_unusable_timeout_is_an_error_naming_variable_value_and_bounds(key: str, raw: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        read_config({key: raw})
    assert key in str(info.value) and repr(raw) in str(info.value) and "0.05 to 3600" in str(info.value)


@pytest.mark.parametrize("key", TIMEOUTS)
@pytest.mark.parametrize(("raw", "clamped"), [("1e-300", MIN_TIMEOUT), ("1e-4", MIN_TIMEOUT), ("99999999999", MAX_TIMEOUT)])
def test_finite_timeout_out_of_range_is_clamped_with_a_warning(key: str, raw: str, clamped: float) -> None:
    report = inspect_config({key: raw})
    assert [(p.variable, p.level) for p in report.problems] == [(key, "warning")]
    assert "clamped" in report.problems[0].message
    attr = {"NEURENIX_PROBE_TIMEOUT": "probe_timeout", "NEURENIX_NATIVE_PROBE_TIMEOUT": "native_probe_timeout",
            "NEURENIX_BACKEND_TIMEOUT": "backend_timeout"}[key]
    assert getattr(report.config, attr) == clamped


def test_timeouts_in_range_are_taken_as_given() -> None:
    config = read_config({"NEURENIX_PROBE_TIMEOUT": " 0.5 ", "NEURENIX_BACKEND_TIMEOUT": "3600"})
    assert config.probe_timeout == 0.5 and config.backend_timeout == 3600 and config.native_probe_timeout == 10


# ---------------------------------------------------------------------------- the other variables


@pytest.mark.parametrize(("env", "variable"), [
    ({"NEURENIX_BACKENDS": "npu-openvino,-npu-openvino"}, "NEURENIX_BACKENDS"),
    ({"NEURENIX_BACKENDS": "-cpu"}, "NEURENIX_BACKENDS"),
    ({"NEURENIX_DEVICE": "npu:99999999999999999999"}, "NEURENIX_DEVICE"),
    ({"NEURENIX_DEVICE": "npu:²"}, "NEURENIX_DEVICE"),
    ({"NEURENIX_DEVICE": "npu:x"}, "NEURENIX_DEVICE"),
    ({"NEURENIX_DEVICE": "cuda-tc:0"}, "NEURENIX_DEVICE"),
    ({"NEURENIX_FALLBACK": "wran"}, "NEURENIX_FALLBACK"),
    ({"NEURENIX_STRICT": "maybe"}, "NEURENIX_STRICT"),
    ({"NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "２"}, "NEURENIX_DISABLE_PLUGIN_AUTOLOAD"),
    ({"NEURENIX_CPU_RUNTIME": "open vino"}, "NEURENIX_CPU_RUNTIME"),
    ({"NEURENIX_CPU_RUNTIME": "x" * 65}, "NEURENIX_CPU_RUNTIME"),
])
def test_error_level_values(env: dict[str, str], variable: str) -> None:
    assert _levels(env) == {variable: "error"}
    with pytest.raises(ConfigurationError, match=variable):
        read_config(env)


def test_allow_list_with_autoload_disabled_warns_and_autoload_wins() -> None:
    report = inspect_config({"NEURENIX_BACKENDS": "tpu", "NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert [(p.variable, p.level) for p in report.problems] == [("NEURENIX_BACKENDS", "warning")]
    assert report.config.is_denied("tpu", builtin=False).startswith("not loaded because plugin autoload is disabled")
    # A deny list, or allowing only the built-in backend, agrees with autoload disabled.
    assert inspect_config({"NEURENIX_BACKENDS": "cpu,-tpu", "NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "yes"}).problems == []


def test_relative_state_dir_warns_and_uses_the_default_folder(tmp_path: Path) -> None:
    report = inspect_config({"NEURENIX_STATE_DIR": "rel/path", "XDG_STATE_HOME": str(tmp_path)})
    assert [(p.variable, p.level) for p in report.problems] == [("NEURENIX_STATE_DIR", "warning")]
    assert report.config.state_dir == str(tmp_path / "neurenix")
    assert read_config({"NEURENIX_STATE_DIR": "~/st"}).state_dir == os.path.expanduser("~/st")


def test_device_forms_that_are_fine() -> None:
    assert read_config({"NEURENIX_DEVICE": " NPU "}).device == "npu:0"
    assert read_config({"NEURENIX_DEVICE": "edgetpu:3"}).device == "edgetpu:3"


def test_unknown_plugin_names_and_emulation_tokens_warn_with_the_known_names() -> None:
    config = read_config({"NEURENIX_BACKENDS": "cuda_tc,-edgetpuu", "NEURENIX_EMULATE": "npuu"})
    problems = plugin_problems(config, ["cpu", "cuda-tc", "edgetpu"], ["npu"])
    assert [(p.variable, p.value, p.level) for p in problems] == [
        ("NEURENIX_BACKENDS", "cuda_tc", "warning"), ("NEURENIX_BACKENDS", "edgetpuu", "warning"), ("NEURENIX_EMULATE", "npuu", "warning"),
    ]
    assert "did you mean 'cuda-tc'" in problems[0].message and "installed plugins: cpu, cuda-tc, edgetpu" in problems[0].message
    assert "it denies nothing" in problems[1].message and "known tokens: npu" in problems[2].message


def test_strict_mode_turns_warnings_into_errors_and_warnings_are_typed() -> None:
    config = read_config({"NEURENIX_BACKENDS": "garbage"})
    problems = plugin_problems(config, ["cpu"], [])
    with pytest.raises(ConfigurationError, match="NEURENIX_STRICT=1"):
        enforce(problems, strict=True)
    with pytest.warns(ConfigurationWarning, match="'garbage'"):
        enforce(problems, strict=False)


def test_denial_reasons_read_as_sentences() -> None:
    config = Config(device=None, allow=(), deny=frozenset(), autoload=False, emulate=frozenset(), strict=False,
                    probe_timeout=2, native_probe_timeout=10, fallback="warn")
    sentence = f"plugin npu-openvino is {config.is_denied('npu-openvino', builtin=False)}"
    assert "is plugin autoload" not in sentence and "unset NEURENIX_DISABLE_PLUGIN_AUTOLOAD" in sentence


def test_cpu_runtime_is_validated_where_it_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from neurenix_core.graph.compile.host_select import requested_runtime

    assert cpu_runtime({"NEURENIX_CPU_RUNTIME": " openvino "}) == "openvino" and cpu_runtime({}) is None
    monkeypatch.setenv("NEURENIX_CPU_RUNTIME", "numpy")
    assert requested_runtime({}) == "numpy"
    assert requested_runtime({"runtime": "auto"}) is None  # runtime= wins over the variable
    monkeypatch.setenv("NEURENIX_CPU_RUNTIME", "auto")
    assert requested_runtime({}) is None
    monkeypatch.setenv("NEURENIX_CPU_RUNTIME", "../evil")
    with pytest.raises(ConfigurationError, match="NEURENIX_CPU_RUNTIME='../evil'"):
        requested_runtime({})


def test_settings_say_where_each_value_came_from() -> None:
    report = inspect_config({"NEURENIX_FALLBACK": "error", "NEURENIX_PROBE_TIMEOUT": "nan"})
    by = {s.variable: s for s in report.settings}
    assert tuple(by) == VARIABLES
    assert (by["NEURENIX_FALLBACK"].source, by["NEURENIX_FALLBACK"].effective) == ("environment", "error")
    assert (by["NEURENIX_PROBE_TIMEOUT"].source, by["NEURENIX_PROBE_TIMEOUT"].effective) == ("default (value rejected)", "2s")
    assert by["NEURENIX_DEVICE"].source == "default"


# ---------------------------------------------------------------------------- import and doctor in fresh processes

_IMPORT = """
import json, warnings
warnings.simplefilter("always")
out = {"error": None, "device": None}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        import neurenix_core as nx
        out["device"] = str(nx.asarray([1.0]).device)
    except Exception as exc:
        out["error"] = [c.__name__ for c in type(exc).__mro__][:3]
        out["message"] = str(exc)
out["warnings"] = [[type(w.message).__name__, str(w.message)] for w in caught if "neurenix" in type(w.message).__module__]
print(json.dumps(out))
"""


@pytest.mark.parametrize(("env", "needle"), [
    ({"NEURENIX_PROBE_TIMEOUT": "nan"}, "NEURENIX_PROBE_TIMEOUT='nan'"),
    ({"NEURENIX_PROBE_TIMEOUT": "inf"}, "NEURENIX_PROBE_TIMEOUT='inf'"),
    ({"NEURENIX_NATIVE_PROBE_TIMEOUT": "nan"}, "NEURENIX_NATIVE_PROBE_TIMEOUT='nan'"),
    ({"NEURENIX_BACKEND_TIMEOUT": "inf"}, "NEURENIX_BACKEND_TIMEOUT='inf'"),
    ({"NEURENIX_BACKENDS": "npu-openvino,-npu-openvino"}, "both allows and denies npu-openvino"),
    ({"NEURENIX_DEVICE": "npu:99999999999999999999"}, "above 65535"),
    ({"NEURENIX_STRICT": "1", "NEURENIX_BACKENDS": "garbage,@@"}, "'garbage', which is not an installed plugin"),
])
def test_import_raises_configuration_error(run_neurenix, env: dict[str, str], needle: str) -> None:
    out = run_neurenix(_IMPORT, env=env)
    assert out["error"] == ["ConfigurationError", "NeurenixError", "Exception"], out
    assert needle in out["message"]


@pytest.mark.parametrize(("env", "needle"), [
    ({"NEURENIX_PROBE_TIMEOUT": "1e-300"}, "clamped to 0.05"),
    ({"NEURENIX_PROBE_TIMEOUT": "99999999999"}, "clamped to 3600"),
    ({"NEURENIX_BACKEND_TIMEOUT": "1e-300", "NEURENIX_PROBE_TIMEOUT": "1e-4"}, "clamped to 0.05"),
    ({"NEURENIX_BACKENDS": "npu-openvinoo"}, "did you mean 'npu-openvino'"),
    ({"NEURENIX_BACKENDS": "tpu", "NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"}, "loads only the built-in CPU backend"),
    ({"NEURENIX_STATE_DIR": "rel/path"}, "not an absolute path"),
    ({"NEURENIX_EMULATE": "npuu"}, "which no installed plugin emulates"),
])
def test_import_warns_and_the_cpu_backend_still_starts(run_neurenix, env: dict[str, str], needle: str) -> None:
    out = run_neurenix(_IMPORT, env=env)
    assert out["error"] is None and out["device"] == "cpu:0", out
    assert any(kind == "ConfigurationWarning" and needle in text for kind, text in out["warnings"]), out["warnings"]


def test_denied_device_message_reads_as_a_sentence(run_neurenix) -> None:
    code = ("import json, neurenix_core as nx\n"
            "try:\n    nx.asarray([1.0], device='npu:0')\nexcept nx.NeurenixError as exc:\n    print(json.dumps(str(exc)))")
    message = run_neurenix(code, env={"NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1", "NEURENIX_EMULATE": "npu"})
    assert "plugin npu is not loaded because plugin autoload is disabled" in message


def _doctor(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    full.update(env, COLUMNS="200")
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=full, timeout=120, check=False)


def test_doctor_reports_configuration_errors_instead_of_a_traceback() -> None:
    proc = _doctor("doctor", NEURENIX_PROBE_TIMEOUT="nan", NEURENIX_BACKENDS="npu-openvinoo")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert "configuration error" in proc.stdout and "NEURENIX_PROBE_TIMEOUT='nan'" in proc.stdout
    assert "configuration warning" in proc.stdout and "NEURENIX_BACKEND" in proc.stdout
    data = json.loads(_doctor("doctor", "--json", NEURENIX_PROBE_TIMEOUT="1e-300").stdout)
    setting = next(s for s in data["configuration"] if s["variable"] == "NEURENIX_PROBE_TIMEOUT")
    assert setting == {"variable": "NEURENIX_PROBE_TIMEOUT", "value": "1e-300", "effective": "0.05s", "source": "environment"}
    assert [p["level"] for p in data["configuration_problems"]] == ["warning"]
    other = _doctor("devices", NEURENIX_FALLBACK="wran")
    assert other.returncode == 2 and "Traceback" not in other.stderr and "NEURENIX_FALLBACK='wran'" in other.stderr


# ---------------------------------------------------------------------------- fuzzing every variable

_SPECIAL = ["", " ", "nan", "NaN", "inf", "-inf", "1e400", "1e-300", "-1", "0", "-0.0", "99999999999", "1" * 400,
            "１", "²", "٣", "ǅ", "npu:²", "cpu:0", "-cpu", "a,-a", "~", "rel/x", "\t1\n", "🙂", ",,,", "-", ":", "cpu:-1"]
_VALUES = st.one_of(
    st.sampled_from(_SPECIAL),
    st.text(max_size=40),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
)


def _env_safe(value: str) -> bool:
    """What a real environment can hold: no NUL, encodable to the filesystem encoding."""
    try:
        os.fsencode(value)
    except UnicodeError:
        return False
    return "\0" not in value


@settings(max_examples=40, deadline=None, derandomize=True)
@given(key=st.sampled_from(VARIABLES), value=_VALUES)
def test_fuzz_in_process_only_typed_errors_escape(key: str, value: str) -> None:
    report = inspect_config({key: value})  # never raises
    config = report.config
    for seconds in (config.probe_timeout, config.native_probe_timeout, config.backend_timeout):
        assert math.isfinite(seconds) and MIN_TIMEOUT <= seconds <= MAX_TIMEOUT
    if config.device is not None:
        as_device(config.device)
    assert "cpu" not in config.deny and not (set(config.allow) & config.deny)
    assert all(p.variable in VARIABLES and p.level in ("error", "warning") for p in report.problems)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigurationWarning)
        try:
            enforce(report.problems + plugin_problems(config, ["cpu", "tpu"], ["tpu"]), strict=False)
        except (ConfigurationError, ConfigurationWarning):
            pass


_FUZZ_IMPORT = """
import json, warnings
warnings.simplefilter("ignore")
try:
    import neurenix_core as nx
    nx.asarray([1.0]); nx.default_device()
    print(json.dumps("ok"))
except Exception as exc:
    print(json.dumps([c.__name__ for c in type(exc).__mro__]))
"""


@settings(max_examples=22, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(VARIABLES), value=_VALUES.filter(_env_safe))
def test_fuzz_import_only_typed_errors_escape_and_nothing_hangs(run_neurenix, tmp_path: Path, key: str, value: str) -> None:
    # The state folder must stay inside the test's temporary folder: HOME too, for '~'.
    home = str(tmp_path)
    if key == "NEURENIX_STATE_DIR" and value.strip().startswith("/"):
        value = home + value
    out = run_neurenix(_FUZZ_IMPORT, env={key: value, "HOME": home, "XDG_STATE_HOME": home}, timeout=60)
    assert out == "ok" or "NeurenixError" in out, (key, value, out)
