"""The dict → Pulumi resource translation and the stack configuration reader."""

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components import stack
from components._k8s import resource_class, resource_name
from components._recording import record


@pytest.mark.parametrize(("api_version", "kind", "expected"), [
    ("v1", "Namespace", k8s.core.v1.Namespace),
    ("apps/v1", "DaemonSet", k8s.apps.v1.DaemonSet),
    ("policy/v1", "PodDisruptionBudget", k8s.policy.v1.PodDisruptionBudget),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", k8s.rbac.v1.ClusterRoleBinding),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy",
     k8s.admissionregistration.v1.ValidatingAdmissionPolicy),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition", k8s.apiextensions.v1.CustomResourceDefinition),
    ("remediation.autoclusters.io/v1alpha1", "GpuNodePool", None),
])
def test_resource_class_maps_built_in_kinds_and_leaves_custom_ones(api_version, kind, expected):
    assert resource_class(api_version, kind) is expected


def test_resource_names_carry_kind_namespace_and_name():
    assert resource_name({"kind": "Deployment", "metadata": {"name": "c", "namespace": "ns"}}) == "deployment-ns-c"
    assert resource_name({"kind": "ClusterRole", "metadata": {"name": "r"}}) == "clusterrole-r"


def test_an_object_field_without_a_resource_argument_is_an_error():
    from components._k8s import k8s_resource

    with pytest.raises(TypeError, match="field 'bogus' has no ConfigMap argument"):
        record(lambda: k8s_resource({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                                     "bogus": 1}, pulumi.ResourceOptions()))


def _with_config(values: dict[str, str]):
    """Runs read_stack_config against these stack settings (as the CLI passes them: strings)."""
    import pulumi.runtime.config as runtime_config

    token = runtime_config.CONFIG.set(values)
    try:
        return stack.read_stack_config()
    finally:
        runtime_config.CONFIG.reset(token)


def test_stack_config_is_read_typed_through_pulumi_config_and_access_keys_stay_apart():
    config, access = _with_config({
        "autoclusters:pools": '[{"name": "a", "consentMode": "propose"}]', "autoclusters:local": "true",
        "autoclusters:domain": "x.io", "autoclusters:image": "reg/img:1", "autoclusters:namespace": "ns1",
        "autoclusters:kubeconfig": "/k", "kubernetes:context": "c",
    })
    assert [(p.name, p.consent_mode.value) for p in config.pools] == [("a", "propose")]
    assert config.local is True and config.domain == "x.io" and config.image == "reg/img:1"
    assert config.namespace == "ns1"
    assert access == {"kubeconfig": "/k"}


def test_defaults_when_the_stack_sets_nothing():
    from autoclusters.deploy import DEFAULT_IMAGE

    config, access = _with_config({})
    assert config.pools == () and config.image == DEFAULT_IMAGE and config.local is False and access == {}


@pytest.mark.parametrize(("values", "message"), [
    ({"autoclusters:imge": "x"}, "unknown key(s) autoclusters:imge"),
    ({"autoclusters:local": "yes"}, "autoclusters:local"),
    ({"autoclusters:pools": "[not json"}, "autoclusters:pools"),
    ({"autoclusters:pools": '[{"name": "a", "consentMode": "sometimes"}]'}, "consentMode must be one of"),
])
def test_a_bad_setting_fails_naming_the_key(values, message):
    from autoclusters.pools.pool_config import PoolConfigError

    with pytest.raises(PoolConfigError, match="invalid stack configuration") as e:
        _with_config(values)
    assert message in str(e.value)
