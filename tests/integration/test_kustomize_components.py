"""The kustomize components (``manifests/components/``, components/kustomize_components.py) under
the real ``kubectl kustomize`` (``tools/build-tools.sh core``), no cluster needed: an overlay of
the base ``manifests/`` with a component renders what ``components.render --config`` renders for
the component's settings (the same keys as the stack's and the chart's: issue 29 item 3), so do
components that compose, those that rewrite the same field refuse each other, and an overlay's own
patches apply after its components."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.kustomize_components import (
    JOURNAL_WITHOUT_NVML,
    KERNEL_LOG_JOURNAL,
    NVML_DISABLED,
    PROMETHEUS_OPERATOR,
    TOGGLES,
    Toggle,
    component,
)
from components.render import KUSTOMIZATION, KUSTOMIZE_COMPONENTS, MANIFESTS, OVERLAYS_DIR, render, write_tree
from tests.integration.helpers import kubectl_binary, parsed_objects

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kubectl() -> str:
    from tests.conftest import tool_missing

    try:
        return kubectl_binary()
    except RuntimeError as e:
        tool_missing(str(e))


def kustomize(kubectl: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120,
                          check=False)


def overlay(tmp_path: Path, toggles: tuple[Toggle | Path, ...], **rest: Any) -> Path:
    """A kustomization of the base with these components (shipped, or a folder; relative paths:
    kustomize refuses an absolute one, "new root ... cannot be absolute")."""
    def rel(path: Path) -> str:
        return os.path.relpath(path, tmp_path)

    (tmp_path / KUSTOMIZATION).write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [rel(MANIFESTS)],
        "components": [rel(t if isinstance(t, Path) else KUSTOMIZE_COMPONENTS / t.name) for t in toggles],
        **rest}))
    return tmp_path


def kustomized(kubectl: str, folder: Path) -> list[str]:
    done = kustomize(kubectl, folder)
    assert done.returncode == 0, done.stderr
    return parsed_objects([done.stdout])


def python_render(settings: Mapping[str, Any]) -> list[str]:
    """What ``components.render --config`` writes for these settings: the base's files (no pools)."""
    return parsed_objects([text for path, text in render({"pools": [], **settings}).items()
                           if "/" not in path and path != KUSTOMIZATION])


@pytest.mark.parametrize("toggle", TOGGLES, ids=lambda t: t.name)
def test_each_component_renders_its_settings(kubectl: str, tmp_path: Path, toggle: Toggle) -> None:
    objects = kustomized(kubectl, overlay(tmp_path, (toggle,)))
    assert objects == python_render(toggle.settings)
    assert objects != python_render({}), f"{toggle.name} changed nothing"


def test_the_structural_settings_together(kubectl: str, tmp_path: Path) -> None:
    """All three settings: the journal-without-NVML component (the two alone refuse each other)
    and the Prometheus Operator's."""
    everything = {**JOURNAL_WITHOUT_NVML.settings, **PROMETHEUS_OPERATOR.settings}
    assert everything.keys() == {k for t in TOGGLES for k in t.settings}
    assert kustomized(kubectl, overlay(tmp_path, (JOURNAL_WITHOUT_NVML, PROMETHEUS_OPERATOR))) == \
        python_render(everything)


def test_components_that_rewrite_one_field_refuse_each_other(kubectl: str, tmp_path: Path) -> None:
    done = kustomize(kubectl, overlay(tmp_path, (KERNEL_LOG_JOURNAL, NVML_DISABLED)))
    assert done.returncode != 0
    assert "testing value /spec/template/spec/containers/0/args failed" in done.stderr, done.stderr


def test_an_overlays_own_patch_applies_after_its_components(kubectl: str, tmp_path: Path) -> None:
    """docs/deploy.md: a patch of the overlay itself changes what the component wrote."""
    patch = [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--window=120"}]
    objects = [json.loads(o) for o in kustomized(kubectl, overlay(tmp_path, (KERNEL_LOG_JOURNAL,), patches=[{
        "target": {"kind": "DaemonSet", "name": "autoclusters-detector"}, "patch": json.dumps(patch)}]))]
    [detector] = [o for o in objects if o["kind"] == "DaemonSet"]
    args = detector["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-1] == "--window=120" and "journal" in args


def test_a_component_that_removes_objects(kubectl: str, tmp_path: Path) -> None:
    """controllerShards (no shipped component: a number, not a toggle) replaces the controller
    Deployment by the shards': kustomize deletes the unsharded objects by the delete patches."""
    settings = {"controllerShards": 2}
    write_tree(component(settings), tmp_path / "shards")
    assert kustomized(kubectl, overlay(tmp_path, (tmp_path / "shards",))) == python_render(settings)


def test_the_example_overlay_renders_its_component(kubectl: str) -> None:
    assert kustomized(kubectl, OVERLAYS_DIR / PROMETHEUS_OPERATOR.name) == python_render(PROMETHEUS_OPERATOR.settings)
