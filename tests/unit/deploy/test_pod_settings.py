"""The pod settings (deploy/pod_settings.py): each one reaches the pods of its part, on every
install surface built from stack_objects, and a bad value is refused naming its key."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from autoclusters.api import RepairAction
from autoclusters.cli import controller as controller_cli
from autoclusters.controller.controller_config import ControllerConfig
from autoclusters.deploy import pod_settings
from autoclusters.deploy.pod_settings import COMPONENTS, PULL_SECRETS_FLAG, SETTINGS
from autoclusters.deploy.providers import ProviderType
from autoclusters.deploy.stack import stack_objects
from autoclusters.deploy.stack_config import stack_config_from_dict
from autoclusters.names import Names
from autoclusters.pools.pool_config import PoolConfigError
from autoclusters.providers.hostreboot import reboot_job
from autoclusters.providers.types import Operation

REPO = Path(__file__).resolve().parents[3]
VALUES: dict[str, Any] = {
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
    "nodeSelector": {"pool": "infra"},
    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone"}}]}},
    "resources": {"requests": {"cpu": "200m"}, "limits": {"memory": "1Gi"}},
    "priorityClassName": "system-node-critical",
    "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
    "podAnnotations": {"team": "infra"},
    "serviceAccountAnnotations": {"iam.gke.io/gcp-service-account": "ac@p.iam.gserviceaccount.com"},
}


def _objects(pods: dict[str, Any], secrets: list[str] | None = None) -> list[dict[str, Any]]:
    return stack_objects(stack_config_from_dict({"pods": pods, "imagePullSecrets": secrets or []}))


def _workload(objs: list[dict[str, Any]], part: str) -> dict[str, Any]:
    label = COMPONENTS[part][0]
    return next(o for o in objs if o["kind"] in ("Deployment", "DaemonSet")
                and o["metadata"]["labels"]["app.kubernetes.io/name"] == label)


def _account(objs: list[dict[str, Any]], part: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == COMPONENTS[part][1])


def test_the_table_covers_the_values_here() -> None:
    assert {s.key for s in SETTINGS} == set(VALUES)


@pytest.mark.parametrize("part", list(COMPONENTS))
def test_each_setting_reaches_its_part_only(part: str) -> None:
    plain = _objects({})
    objs = _objects({part: VALUES})
    before, after = _workload(plain, part)["spec"]["template"], _workload(objs, part)["spec"]["template"]
    pod, container = after["spec"], after["spec"]["containers"][0]
    assert pod["tolerations"] == before["spec"].get("tolerations", []) + VALUES["tolerations"]  # added to ours
    assert pod["nodeSelector"] == {**before["spec"].get("nodeSelector", {}), "pool": "infra"}
    kept = {k: v for k, v in before["spec"].get("affinity", {}).items() if k == "nodeAffinity"}
    assert pod["affinity"] == {**VALUES["affinity"], **kept}  # replaced, but where the part must run
    assert container["resources"] == VALUES["resources"]
    assert pod["priorityClassName"] == "system-node-critical"
    assert container["env"][-1] == VALUES["env"][0]
    assert container["env"][:-1] == before["spec"]["containers"][0].get("env", [])
    assert after["metadata"]["annotations"] == {**before["metadata"].get("annotations", {}), "team": "infra"}
    assert _account(objs, part)["metadata"]["annotations"] == VALUES["serviceAccountAnnotations"]
    for other in COMPONENTS:  # the other parts are as they were
        if other != part:
            assert _workload(objs, other) == _workload(plain, other)
            assert _account(objs, other) == _account(plain, other)


def test_image_pull_secrets_reach_every_pod_and_the_reboot_jobs() -> None:
    objs = _objects({}, ["regcred", "mirror"])
    for part in COMPONENTS:
        assert _workload(objs, part)["spec"]["template"]["spec"]["imagePullSecrets"] == [
            {"name": "regcred"}, {"name": "mirror"}]
    args = _workload(objs, "controller")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index(PULL_SECRETS_FLAG) + 1] == "regcred,mirror"
    # the flag is the controller's own (its flags come from ControllerConfig's fields)
    parser = argparse.ArgumentParser()
    controller_cli.register(parser.add_subparsers())
    assert parser.parse_args(["controller", "run", PULL_SECRETS_FLAG, "regcred,mirror"]).image_pull_secrets == \
        "regcred,mirror"
    assert ControllerConfig().image_pull_secrets == ""
    op = Operation(id="op-1", action=RepairAction.RESET, started=datetime.now(UTC))
    job = reboot_job(op, "n1", "ns", "img:1", 60, Names(), image_pull_secrets=("regcred",))
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert "imagePullSecrets" not in reboot_job(op, "n1", "ns", "img:1", 60, Names())["spec"]["template"]["spec"]


@pytest.mark.parametrize(("pods", "secrets", "message"), [
    ({"scheduler": {}}, [], "pods.scheduler: unknown part"),
    ({"detector": {"tolerationz": []}}, [], "pods.detector.tolerationz: unknown setting"),
    ({"detector": {"tolerations": {"key": "x"}}}, [], "pods.detector.tolerations must be a list of objects"),
    ({"detector": {"tolerations": [{"kee": "x"}]}}, [], r"pods.detector.tolerations\[0\] has unknown keys \['kee'\]"),
    ({"webhook": {"nodeSelector": {"a": 1}}}, [], "pods.webhook.nodeSelector must be a map of strings"),
    ({"webhook": {"affinity": {"nodeAfinity": {}}}}, [], "pods.webhook.affinity has unknown keys"),
    ({"controller": {"resources": {"limits": {"memory": True}}}}, [], "pods.controller.resources.limits must map"),
    ({"controller": {"priorityClassName": "Not_A_Name"}}, [], "pods.controller.priorityClassName must be a"),
    ({"controller": {"env": [{"name": "1 bad", "value": "x"}]}}, [], r"pods.controller.env\[0\] must be"),
    ({"controller": {"podAnnotations": "team=infra"}}, [], "pods.controller.podAnnotations must be a map"),
    ({}, "regcred", "imagePullSecrets must be a list of Secret names"),
    ({}, ["Reg Cred"], "imagePullSecrets must be a list of Secret names"),
])
def test_a_bad_value_is_refused_naming_its_key(pods: dict[str, Any], secrets: Any, message: str) -> None:
    with pytest.raises(PoolConfigError, match=message):
        stack_config_from_dict({"pods": pods, "imagePullSecrets": secrets})


def test_what_autoclusters_sets_itself_is_not_overwritten() -> None:
    detector = _workload(_objects({}), "detector")["spec"]["template"]["spec"]["affinity"]
    assert detector["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]  # the GPU nodes
    with pytest.raises(pod_settings.PodSettingsError, match="nodeAffinity would replace"):
        _objects({"detector": {"affinity": {"nodeAffinity": {}}}})
    controller = _workload(_objects({"controller": {"affinity": {"nodeAffinity": {}}}}), "controller")
    assert controller["spec"]["template"]["spec"]["affinity"] == {"nodeAffinity": {}}  # only spread, replaced
    with pytest.raises(pod_settings.PodSettingsError, match=r"env \['NODE_NAME'\] is set by autoclusters"):
        _objects({"detector": {"env": [{"name": "NODE_NAME", "value": "x"}]}})
    with pytest.raises(pod_settings.PodSettingsError, match=r"podAnnotations .*prometheus\.io/scrape"):
        _objects({"controller": {"podAnnotations": {"prometheus.io/scrape": "false"}}})


def test_the_docs_table_is_the_settings_table() -> None:
    from autoclusters import doc_tables

    page = (REPO / "docs" / "deploy.md").read_text()
    assert page == doc_tables.with_table(page, pod_settings.DOCS_MARKER, pod_settings.docs_table()), \
        "regenerate: make manifests"


def test_the_controllers_pull_secrets_reach_the_host_reboot_provider() -> None:
    from autoclusters.controller.manager import Controller
    from autoclusters.providers.hostreboot import HostRebootProvider
    from autoclusters.providers.registry import KINDS
    from tests.unit.fakeapi import FakeApi

    controller = Controller(FakeApi().kube(), ControllerConfig(image_pull_secrets="regcred,mirror",
                                                               provider_image="img:1"))
    context = controller.reconciler._build_context
    build = KINDS[ProviderType.HOST_REBOOT].build
    assert build is not None
    provider = build({"timeoutSeconds": 60}, context)
    assert isinstance(provider, HostRebootProvider)
    assert provider.image_pull_secrets == ("regcred", "mirror")
