"""Shape of the generated admission objects; their behaviour is tested against a real API
server in tests/integration/test_admission.py."""

from __future__ import annotations

import base64

from autoclusters.deploy.admission import (
    ABSENT,
    NODE_RESOURCES,
    admission_objects,
    admission_policy,
    admission_policy_binding,
    ca_bundle_patch,
    label_value_cel,
    webhook_configuration,
    webhook_rbac,
)
from autoclusters.names import Names


def test_policy_is_generated_from_the_domain_and_exempts_the_controller() -> None:
    pol = admission_policy(Names(domain="crusoe.ai"), ["system:serviceaccount:x:ctrl"])
    text = str(pol)
    assert "crusoe.ai/maintenance-required" in text and "autoclusters.io" not in text
    conds = {c["name"]: c["expression"] for c in pol["spec"]["matchConditions"]}
    assert conds["not-the-controller"] == "!(request.userInfo.username in ['system:serviceaccount:x:ctrl'])"
    assert pol["spec"]["failurePolicy"] == "Fail"
    rules = pol["spec"]["matchConstraints"]["resourceRules"]
    assert rules[0]["resources"] == ["nodes", "nodes/status"] and rules[0]["operations"] == ["CREATE", "UPDATE"]


def test_both_layers_match_every_node_write_path_and_only_label_changes() -> None:
    """The status subresource takes label changes too (issue 25): both layers match it, and both
    pass on only the writes that change one of the two labels, so kubelet status traffic stays
    off the webhook and costs the floor four map look-ups."""
    names = Names()
    pol = admission_policy(names)
    (hook, _) = webhook_configuration(names, ca_bundle=b"PEM")["webhooks"]
    (pol_rule,) = pol["spec"]["matchConstraints"]["resourceRules"]
    (hook_rule,) = hook["rules"]
    assert set(NODE_RESOURCES) == {"nodes", "nodes/status"}
    for rule in (pol_rule, hook_rule):
        assert rule["resources"] == list(NODE_RESOURCES) and rule["apiGroups"] == [""]
        assert rule["operations"] == ["CREATE", "UPDATE"]
    for conds in (pol["spec"]["matchConditions"], hook["matchConditions"]):
        assert [c["name"] for c in conds] == ["not-the-controller", "touches-maintenance-labels"]
    assert pol["spec"]["matchConditions"] == hook["matchConditions"]


def test_every_validation_names_its_rego_rule() -> None:
    vals = admission_policy(Names())["spec"]["validations"]
    texts = [v.get("message") or v.get("messageExpression") for v in vals]
    for rule in ("maintenance-required-controller-only", "maintenance-approved-value",
                 "maintenance-approved-requires-fault"):
        assert any(f"[{rule}]" in t for t in texts)
    assert any("no longer needs a repair" in t for t in texts)


def test_label_cel_guards_null_old_object_and_quotes_keys() -> None:
    cel = label_value_cel("oldObject", "a.io/it's")
    assert cel.startswith("(oldObject != null && has(oldObject.metadata.labels)")
    assert "'a.io/it\\'s'" in cel and f"'{ABSENT}'" in cel


def test_binding_can_be_scoped_to_some_nodes() -> None:
    b = admission_policy_binding(name="t", node_selector={"matchLabels": {"x": "y"}})
    assert b["spec"]["validationActions"] == ["Deny"]
    assert b["spec"]["matchResources"] == {"objectSelector": {"matchLabels": {"x": "y"}}}
    assert "matchResources" not in admission_policy_binding()["spec"]


def test_webhook_configuration_for_the_host_and_in_cluster() -> None:
    local = webhook_configuration(Names(), ca_bundle=b"PEM", url="https://127.0.0.1:9443/validate",
                                  include_pools=False, node_selector={"matchLabels": {"t": "1"}})
    (hook,) = local["webhooks"]
    assert hook["clientConfig"] == {"caBundle": base64.b64encode(b"PEM").decode(),
                                    "url": "https://127.0.0.1:9443/validate"}
    assert hook["sideEffects"] == "None" and hook["failurePolicy"] == "Fail" and hook["timeoutSeconds"] <= 5
    assert [c["name"] for c in hook["matchConditions"]] == ["not-the-controller", "touches-maintenance-labels"]
    assert hook["objectSelector"] == {"matchLabels": {"t": "1"}}
    assert hook["name"] == "maintenance-labels.remediation.autoclusters.io"
    cluster = webhook_configuration(Names(), ca_bundle=b"PEM", namespace="ns")
    assert cluster["webhooks"][0]["clientConfig"]["service"]["namespace"] == "ns"
    assert cluster["webhooks"][1]["rules"][0]["resources"] == ["gpunodepools"]


def test_ca_bundle_patch_covers_every_webhook() -> None:
    cfg = webhook_configuration(Names(), ca_bundle=b"old")
    patch = ca_bundle_patch(cfg, b"new")
    assert [p["path"] for p in patch] == ["/webhooks/0/clientConfig/caBundle", "/webhooks/1/clientConfig/caBundle"]
    assert {p["value"] for p in patch} == {base64.b64encode(b"new").decode()}


def test_the_webhook_has_no_api_rights_and_no_token() -> None:
    """Its deployed mode reads no object and keeps no certificate (the controller does)."""
    from autoclusters.deploy import stack
    from autoclusters.deploy.workloads import webhook_deployment

    assert webhook_rbac("ns") == [{"apiVersion": "v1", "kind": "ServiceAccount", "automountServiceAccountToken": False,
                                   "metadata": {"name": "autoclusters-webhook", "namespace": "ns",
                                                "labels": {"app.kubernetes.io/part-of": "autoclusters"}}}]
    rbac = stack.rbac_objects(Names(), "ns")
    bound = [o for o in rbac if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
             and any(s["name"] == "autoclusters-webhook" for s in o["subjects"])]
    assert bound == []
    pod = webhook_deployment(Names(), "ns", "img", "opa", tls_secret="t", policy_configmap="p")["spec"]["template"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert "--cert-dir" not in pod["spec"]["containers"][0]["args"]  # the mode that writes a caBundle


def test_admission_objects_are_complete() -> None:
    kinds = [o["kind"] for o in admission_objects(Names(), ca_bundle=b"x")]
    assert kinds[:3] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                         "ValidatingWebhookConfiguration"]


def test_node_identities_are_named_in_the_floor_for_the_namespace() -> None:
    from autoclusters.deploy.admission import NODE_GROUPS, default_node_agents

    pol = admission_policy(Names(), node_agents=default_node_agents("gpu-ops"))
    variables = {v["name"]: v["expression"] for v in pol["spec"]["variables"]}
    assert NODE_GROUPS == ("system:nodes",)
    assert "'system:nodes'" in variables["nodeIdentity"]
    assert "'system:serviceaccount:gpu-ops:autoclusters-detector'" in variables["nodeIdentity"]
    last = pol["spec"]["validations"][-1]
    assert last["messageExpression"].startswith("'[maintenance-approved-not-by-nodes]")
    assert "variables.nodeIdentity" in last["expression"]


def test_the_rego_defaults_are_the_policy_config_defaults() -> None:
    """lib/config.rego writes the defaults the policies fall back on; they must be the ones
    deploy.admission.policy_config builds, or an installation without the data document would
    judge with other names."""
    from autoclusters.deploy.admission import policy_config
    from autoclusters.rego import opa

    try:
        rego = opa.evaluate("data.autoclusters.lib.config.defaults", {}, {})
    except opa.OpaError as e:
        from tests.conftest import tool_missing

        tool_missing(str(e))
    assert rego == policy_config(Names())
