"""The Helm chart (``charts/autoclusters``, components/chart.py) under the real ``helm``
(``tools/build-tools.sh helm``), no cluster needed: ``helm template`` with the default values
renders the objects of ``manifests/`` (the system and its default policy; the example pools
are manifests/'s own), every value key renders what the stack configuration's key of the same
name renders (``components.render --config``: the kustomize and Pulumi surfaces), all keys at
once too, every combination of the variants (``kernelLogSource``, ``nvml.enabled``,
``monitoring.prometheusOperator``) with other values set, and the schema refuses bad values
with a message that names the key."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoclusters.pools.pool_config import pool_from_config, pool_spec
from components.chart import ValueKey, _merged, _token, nest, value_keys, variants
from components.render import EXAMPLE_POOLS, MANIFESTS, render
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
    """A value of the key's shape that is not its sentinel (a variant's: its last choice)."""
    if key.choices:
        return key.choices[-1]
    value = key.sentinel(_token(key.path, "sample"))
    return 7 if isinstance(value, int | float) else value


def values_of(*pairs: tuple[tuple[str, ...], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in pairs:
        out = _merged(out, nest(path, value))
    return out


def test_default_values_render_the_manifests(helm: Path) -> None:
    files = [p for p in MANIFESTS.rglob("*.yaml") if p.name != "kustomization.yaml"
             and (p.parent == MANIFESTS or p.name.startswith("00-"))]  # the example pools are manifests/'s own
    assert any(p.parent.name == "pools" for p in files)
    assert rendered(helm) == parsed_objects([p.read_text() for p in files])


@pytest.mark.parametrize("key", value_keys(), ids=lambda k: k.dotted)
def test_every_value_renders_as_the_stack_setting(helm: Path, key: ValueKey) -> None:
    """Each key alone (with the variant values it needs: monitoring.labels the operator's objects)."""
    needed = values_of(*key.needs)
    values = _merged(needed, nest(key.path, sample(key)))
    helm_objects = rendered(helm, values)
    assert helm_objects == python_render(values)
    assert helm_objects != rendered(helm, needed), f"{key.dotted} changed nothing"


VARIANTS = variants(value_keys())
# values that the variants' objects read (the detector's, the operator's) and one they do not
ORDINARY = values_of((("image",), "registry.example.com/autoclusters/autoclusters:9"),
                     (("nvml", "hostRoot"), "/run/nvidia/driver"),  # not "/": the journal has mounts of its own
                     (("pods", "detector", "tolerations"), [{"key": "dedicated", "operator": "Exists"}]),
                     (("monitoring", "labels"), {"release": "kps"}), (("controller", "workers"), 7))


@pytest.mark.parametrize("combo", list(itertools.product(*(k.choices for k in VARIANTS))),
                         ids=lambda combo: "-".join(map(str, combo)))
def test_every_combination_of_the_variants_with_other_values(helm: Path, combo: tuple[Any, ...]) -> None:
    values = _merged(ORDINARY, values_of(*((k.path, v) for k, v in zip(VARIANTS, combo, strict=True))))
    assert rendered(helm, values) == python_render(values)


def test_unset_variants_read_as_their_defaults(helm: Path) -> None:
    """``helm upgrade --reuse-values`` from a chart without them leaves them unset (the old
    chart's values): the templates read each as its default."""
    done = template(helm, None, "--set", "kernelLogSource=null", "--set", "nvml.enabled=null",
                    "--set", "monitoring=null")
    assert done.returncode == 0, done.stderr
    assert parsed_objects([done.stdout]) == rendered(helm)


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
    (["--set-json", 'pods.detector.env=[{"value": "A"}]'], "name"),
    (["--set", "nvml.hostRoot=relative"], "hostRoot"),
    (["--set", "detector.dcgmExporterUrl=ftp://x"], "dcgmExporterUrl"),
    (["--set", "imagePullSecrets[0]=Not_A_Name"], "imagePullSecrets"),
    (["--set", "kernelLogSource=dmesg"], "kernelLogSource"),
    (["--set", "nvml.enabled=maybe"], "enabled"),
    (["--set", "monitoring.prometheusOperator=1"], "prometheusOperator"),
    (["--set", "monitoring.nope=1"], "nope"),
])
def test_schema_refuses_bad_values(helm: Path, args: list[str], named: str) -> None:
    done = template(helm, None, *args)
    assert done.returncode != 0
    assert named in done.stderr, done.stderr


# --- the pools' chart (charts/autoclusters-pools, components/pools_chart.py) --------------------

POOLS_CHART = CHART.parent / "autoclusters-pools"
# every kind of pool setting: scalars, groups, maps, a provider with its own settings, a selector
POOLS: list[dict[str, Any]] = [*EXAMPLE_POOLS, {
    "name": "b200", "consentMode": "off", "maxConcurrentRepairs": 3, "drain": {"resetDeadlineSeconds": 120},
    "escalation": {"refaultWindowSeconds": 600}, "repairCodes": {"gpu:13": "reset"},
    "faultClasses": {"gpu": "replace"}, "nodeSelector": {"matchLabels": {"gpu": "b200"}},
    "provider": {"type": "hostReboot", "hostReboot": {"timeoutSeconds": 300}},
    "preDrain": {"waitSeconds": 30, "acknowledgers": ["slurm"]}}]


def pools_template(helm: Path, values: dict[str, Any] | None) -> subprocess.CompletedProcess[str]:
    cmd = [str(helm), "template", "pools", str(POOLS_CHART), "--values", "-"]
    return subprocess.run(cmd, input=json.dumps(values or {}), capture_output=True, text=True, timeout=60,
                          check=False)


def _completed(obj: dict[str, Any]) -> dict[str, Any]:
    """A pool object with its spec read through the pool model, as the controller reads it."""
    spec = pool_spec(pool_from_config({"name": obj["metadata"]["name"], **obj["spec"]}))
    return {**obj, "spec": spec}


def test_the_pools_chart_renders_the_stack_settings_pools(helm: Path) -> None:
    done = pools_template(helm, {"pools": POOLS})
    assert done.returncode == 0, done.stderr
    ours = [o for o in yaml.safe_load_all(done.stdout) if o]
    assert [o["metadata"]["name"] for o in ours] == [p["name"] for p in POOLS]
    stack = [o for path, text in render({"pools": POOLS}).items() if path.startswith("pools/")
             and not path.endswith(("kustomization.yaml", "00-default-policy.yaml")) for o in yaml.safe_load_all(text)]
    assert parsed_objects([json.dumps(_completed(o)) for o in ours]) == parsed_objects([json.dumps(o) for o in stack])
    # the spec is the value's: what the pool model fills in, the CRD's defaults fill in at the API server
    assert ours[0]["spec"] == {k: v for k, v in POOLS[0].items() if k != "name"}


def test_the_pools_chart_without_pools_renders_nothing(helm: Path) -> None:
    done = pools_template(helm, None)
    assert done.returncode == 0, done.stderr
    assert [o for o in yaml.safe_load_all(done.stdout) if o] == []


@pytest.mark.parametrize(("pools", "named"), [
    ([{"name": "a", "consentmode": "auto"}], "consentmode"),  # misspelt: the CRD would prune it silently
    ([{"name": "a", "consentMode": "sometimes"}], "consentMode"),
    ([{"consentMode": "auto"}], "name"),
    ([{"name": "a"}, {"name": "a", "consentMode": "off"}], "a is named twice"),
])
def test_the_pools_chart_refuses_bad_pools_naming_them(helm: Path, pools: list[dict[str, Any]], named: str) -> None:
    done = pools_template(helm, {"pools": pools})
    assert done.returncode != 0
    assert named in done.stderr, done.stderr


@pytest.mark.parametrize("key", [k for k in value_keys() if isinstance(sample(k), dict | list) and not k.choices
                                 and k.schema.get("minItems", 0) == 0], ids=lambda k: k.dotted)
def test_an_empty_map_or_list_renders_as_the_stack_setting(helm: Path, key: ValueKey) -> None:
    """``{}`` is Helm's unset value (a values file's empty default): the stack takes an empty map
    or list as the key left out too, so both render the same."""
    values = nest(key.path, {} if isinstance(sample(key), dict) else [])
    assert rendered(helm, values) == python_render(values) == rendered(helm)


@pytest.mark.parametrize("seconds", [2.5, 30.0, 30])
def test_a_number_renders_as_the_stack_writes_it(helm: Path, seconds: float) -> None:
    """A YAML number is a float to Helm (30.0 and 30 alike); the stack's flag is the same text."""
    values = {"detector": {"windowSeconds": seconds}}
    assert rendered(helm, values) == python_render(values)


def test_condition_codes_are_sorted_and_without_repeats_as_the_stack_writes_them(helm: Path) -> None:
    values = {"detectorConditionCodes": ["nvswitch:12", "gpu:13", "gpu:13", "gpu:9"]}
    assert rendered(helm, values) == python_render(values)
    assert "gpu:13,gpu:9,nvswitch:12" in template(helm, values).stdout
