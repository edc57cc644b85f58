"""The Helm chart (``charts/autoclusters``, components/chart.py) under the real ``helm``
(``tools/build-tools.sh helm``), no cluster needed: ``helm template`` with the default values
renders the objects of ``manifests/`` (the system and its default policy; the example pools
are manifests/'s own), every value key renders what the stack configuration's key of the same
name renders (``components.render --config``: the kustomize and Pulumi surfaces), all keys at
once too, and the schema refuses bad values with a message that names the key."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from components.chart import ValueKey, _token, nest, value_keys
from components.render import MANIFESTS, render
from tests.integration.helpers import parsed_objects

pytestmark = pytest.mark.integration
CHART = Path(__file__).resolve().parents[2] / "charts" / "autoclusters"


def template(helm: Path, values: dict[str, Any] | None = None, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(helm), "template", "autoclusters", str(CHART), *args]
    if values is not None:
        cmd += ["--values", "-"]
    return subprocess.run(cmd, input=json.dumps(values) if values is not None else None, capture_output=True,
                          text=True, timeout=60, check=False)


def rendered(helm: Path, values: dict[str, Any] | None = None) -> list[str]:
    done = template(helm, values)
    assert done.returncode == 0, done.stderr
    return parsed_objects([done.stdout])


def python_render(config: dict[str, Any]) -> list[str]:
    """What ``components.render --config`` writes for these stack settings, without pools."""
    return parsed_objects([text for path, text in render({"pools": [], **config}).items()
                     if not path.endswith("kustomization.yaml")])


def sample(key: ValueKey) -> Any:
    """A value of the key's shape that is not its sentinel."""
    value = key.sentinel(_token(key.path, "sample"))
    return 7 if isinstance(value, int | float) else value


def test_default_values_render_the_manifests(helm: Path) -> None:
    files = [p for p in MANIFESTS.rglob("*.yaml") if p.name != "kustomization.yaml"
             and (p.parent == MANIFESTS or p.name.startswith("00-"))]  # the example pools are manifests/'s own
    assert any(p.parent.name == "pools" for p in files)
    assert rendered(helm) == parsed_objects([p.read_text() for p in files])


@pytest.mark.parametrize("key", value_keys(), ids=lambda k: k.dotted)
def test_every_value_renders_as_the_stack_setting(helm: Path, key: ValueKey) -> None:
    values = nest(key.path, sample(key))
    helm_objects = rendered(helm, values)
    assert helm_objects == python_render(values)
    assert helm_objects != rendered(helm), f"{key.dotted} changed nothing"


def test_all_values_at_once(helm: Path) -> None:
    config: dict[str, Any] = {}
    for key in value_keys():
        here = config
        for part in key.path[:-1]:
            here = here.setdefault(part, {})
        here[key.path[-1]] = sample(key)
    assert rendered(helm, config) == python_render(config)


@pytest.mark.parametrize(("args", "named"), [
    (["--set", "controller.workers=abc"], "workers"),
    (["--set", "controller.nope=1"], "nope"),
    (["--set", "pods.scheduler.tolerations=x"], "scheduler"),
    (["--set-json", 'pods.detector.env=[{"name": "A"}]'], "value"),
    (["--set", "nvml.hostRoot=relative"], "hostRoot"),
    (["--set", "detector.dcgmExporterUrl=ftp://x"], "dcgmExporterUrl"),
    (["--set", "imagePullSecrets[0]=Not_A_Name"], "imagePullSecrets"),
])
def test_schema_refuses_bad_values(helm: Path, args: list[str], named: str) -> None:
    done = template(helm, None, *args)
    assert done.returncode != 0
    assert named in done.stderr, done.stderr
