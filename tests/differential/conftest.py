"""Parametrization of the differential layer: (target x device x mode) cases, sampled per run.

The devices are the conformance kit's (``neurenix_core.testing.plugin.devices_under_test``: one
device of every usable backend, emulated ones included) and each test takes the kit's
``nx_device`` fixture (the fallback policy ``allow``, fallbacks recorded); a backend's declared
``conformance_xfail`` entries apply here as in the kit, and this layer's own known failures are
strict xfails with their reason (known_failures.py).

The run's sample is seeded (harness.settings): every case on cpu:0 (the device with the
hand-written NumPy fast paths, and the cheapest), and a seeded share of the cases on the other
devices, at least one per target. The header prints the seed; ``NEURENIX_DIFF_SEED=<seed>``
reruns the same sample with the same examples, ``NEURENIX_DIFF_SAMPLE=all`` runs every case.
"""

from __future__ import annotations

import os
import random
import zlib
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, given, seed
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from neurenix_core.testing import plugin as _kit

from .gen import new_example
from .harness import DiffCase, Mismatch, Refused, no_collection, settings
from .known_failures import known_bug

nx_device = _kit.nx_device

MODES = ("nograd", "grad", "compiled")


# --------------------------------------------------------------------------- seed and header
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "differential(family, mode): a differential test; its cases come from conftest.py")
    # Every process of a run must sample the same cases. xdist workers inherit the controller's
    # environment when this conftest was loaded there (pytest tests/differential); when only the
    # workers load it (pytest tests), they share xdist's run id, and the seed comes from it.
    if os.environ.get("NEURENIX_DIFF_SEED"):
        return
    worker = getattr(config, "workerinput", None)
    if worker is not None and worker.get("testrunuid"):
        os.environ["NEURENIX_DIFF_SEED"] = str(int(str(worker["testrunuid"]), 16) % 2**31 or 1)
    elif worker is None:
        os.environ["NEURENIX_DIFF_SEED"] = str(random.SystemRandom().randrange(1, 2**31))


def pytest_report_header(config: pytest.Config) -> list[str]:
    s = settings()
    share = "all" if s.full else f"{s.sample:.0%} of the other devices' cases"
    line = (f"differential: seed {s.seed} (NEURENIX_DIFF_SEED={s.seed} reruns this sample), cases: every cpu:0 case and {share}, "
            f"{s.examples} hypothesis example(s) per case (NEURENIX_DIFF_SAMPLE=all NEURENIX_DIFF_EXAMPLES=N widen it)")
    return [line]


# --------------------------------------------------------------------------- cases
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    mark = metafunc.definition.get_closest_marker("differential")
    if mark is None or "diff_case" not in metafunc.fixturenames:
        return
    family, mode = mark.args
    from .cases import cases_for

    duts = {d.backend: d for d in _kit.devices_under_test()}
    chosen = sample(cases_for(family, mode, list(duts.values())), settings().seed, settings().sample)
    metafunc.parametrize(("diff_case", "nx_device"), [(c, duts[c.backend]) for c in chosen], ids=[c.id for c in chosen], indirect=["nx_device"])


def sample(cases: list[DiffCase], run_seed: int, share: float) -> list[DiffCase]:
    """Every case on cpu:0's eager path and NumPy interpreter (``DiffCase.always``), each other
    case with probability ``share`` (seeded), and at least one other case per target, so every
    target meets an accelerator or a host runtime in every run."""
    if share >= 1.0:
        return cases
    rng = random.Random(run_seed)
    chosen = [c for c in cases if c.always or rng.random() < share]
    covered = {c.target for c in chosen if not c.always}
    for target in dict.fromkeys(c.target for c in cases):
        if target in covered:
            continue
        others = [c for c in cases if c.target == target and not c.always]
        if others:
            chosen.append(rng.choice(others))
    order = {c: i for i, c in enumerate(cases)}
    return sorted(chosen, key=order.__getitem__)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A backend's declared known failures (Capabilities.extra["conformance_xfail"], the kit's
    # mechanism) apply to its differential cases too, strict as in the kit.
    for item in items:
        dut = _kit._param(item)
        reason = _kit._known_failure(dut, item.name) if dut is not None and _case_of(item) is not None else None
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=f"declared by backend {dut.backend}: {reason}", strict=True))


def _case_of(item: pytest.Item) -> DiffCase | None:
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("diff_case") if callspec is not None else None
    return value if isinstance(value, DiffCase) else None


# --------------------------------------------------------------------------- running examples
@pytest.fixture
def run_examples(request: pytest.FixtureRequest) -> Callable[[Callable[[st.DataObject], None]], None]:
    """``run_examples(body)``: ``body(data)`` for the run's hypothesis examples, seeded by the run
    seed and the test id. A Mismatch fails the test (its kind goes to the report for the sweep);
    a typed refusal of every example skips it with the refusal as the reason."""

    def run(body: Callable[[st.DataObject], None]) -> None:
        s = settings()
        refused: list[str] = []
        count = [0]
        phases = (Phase.explicit, Phase.generate) if os.environ.get("NEURENIX_DIFF_SHRINK") == "0" else (Phase.explicit, Phase.generate, Phase.shrink)

        @hsettings(max_examples=s.examples, deadline=None, database=None, derandomize=False, report_multiple_bugs=False,
                   suppress_health_check=list(HealthCheck), phases=phases, print_blob=False)
        @seed(s.seed ^ zlib.crc32(request.node.nodeid.encode()))
        @given(data=st.data())
        def examples(data: st.DataObject) -> None:
            count[0] += 1
            new_example()
            try:
                body(data)
            except Refused as exc:
                refused.append(str(exc))

        props = request.node.user_properties
        try:
            with no_collection():
                examples()
        except Mismatch as exc:
            props.append(("differential", {"kind": exc.kind, "examples": count[0], "refused": len(refused)}))
            case = _case_of(request.node)
            bug = known_bug(case.id, exc.kind, str(exc)) if case is not None else None
            if bug is not None:
                pytest.xfail(f"known bug {bug.key} (tests/differential/known_failures.py): {bug.reason}")
            raise
        except BaseException as exc:
            if not isinstance(exc, (pytest.skip.Exception, KeyboardInterrupt)):
                props.append(("differential", {"kind": "harness", "examples": count[0], "refused": len(refused), "error": type(exc).__name__}))
            raise
        props.append(("differential", {"kind": None, "examples": count[0], "refused": len(refused),
                                       "refusal": refused[0] if refused else None}))
        if refused and len(refused) == count[0]:
            pytest.skip(f"refused by the library (typed error): {refused[0]}")

    return run


def pytest_runtest_setup(item: pytest.Item) -> None:
    case = _case_of(item)
    if case is not None:
        item.user_properties.append(("differential_case", {"target": case.target, "device": case.device, "mode": case.mode,
                                                           "family": case.family, "runtime": case.runtime}))

