"""The Slurm bridge's identity (``deploy.slurm_bridge``): its rules follow the names of the
installation, a second installation's cluster-scoped objects carry its namespace, and the
CLI prints the same objects. That the rules are enough is the integration suite's part: the
bridge runs under them there (tests/integration/test_slurm_bridge.py)."""

from __future__ import annotations

import json

import pytest

from autoclusters import api
from autoclusters.cli.main import main
from autoclusters.deploy.slurm_bridge import slurm_bridge_rbac
from autoclusters.names import Names


def test_the_rules_name_the_installations_api_group_and_nothing_beyond_the_bridges_calls() -> None:
    names = Names(domain="crusoe.ai", prefix="Crusoe")
    sa, role, binding, policy, policy_binding = slurm_bridge_rbac(names)
    assert sa["metadata"] == {"name": "autoclusters-slurm-bridge", "namespace": "autoclusters-system",
                              "labels": {"app.kubernetes.io/part-of": "autoclusters"}}
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in role["rules"]}
    assert rules == {(("",), ("nodes",)): {"list", "watch", "patch"},
                     (("",), ("events",)): {"create", "patch"},
                     ((names.api_group,), (api.POOLS.plural,)): {"list", "watch"},
                     # the records its drain warnings are checked against
                     ((names.api_group,), (api.REMEDIATIONS.plural,)): {"list", "watch"}}
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == "autoclusters-slurm-bridge"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "autoclusters-slurm-bridge",
                                    "namespace": "autoclusters-system"}]
    assert policy["spec"]["matchConditions"][0]["expression"] == \
        "request.userInfo.username == 'system:serviceaccount:autoclusters-system:autoclusters-slurm-bridge'"
    assert policy_binding["spec"]["policyName"] == policy["metadata"]["name"]


def test_a_second_installation_names_its_cluster_scoped_objects_after_its_namespace() -> None:
    _, role, binding, policy, policy_binding = slurm_bridge_rbac(Names(), "ns1")
    assert role["metadata"]["name"] == binding["metadata"]["name"] == binding["roleRef"]["name"] \
        == "autoclusters-slurm-bridge-ns1"
    assert binding["subjects"][0]["namespace"] == "ns1"
    assert policy["metadata"]["name"] == policy_binding["spec"]["policyName"] == \
        "autoclusters-slurm-bridge-node-patches-ns1"


def test_the_cli_prints_the_same_objects(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOCLUSTERS_DOMAIN", raising=False)
    monkeypatch.delenv("AUTOCLUSTERS_CONDITION_PREFIX", raising=False)
    assert main(["slurm-bridge", "rbac", "--namespace", "ns1"]) == 0
    assert json.loads(capsys.readouterr().out) == slurm_bridge_rbac(Names(), "ns1")
