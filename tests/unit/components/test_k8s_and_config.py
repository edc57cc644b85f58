"""The dict → Pulumi resource translation and the raw stack configuration reader."""

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
                                     "bogus": 1}, None))


def test_raw_config_parses_json_values_and_keeps_strings_and_access_keys_apart():
    settings, access = stack.raw_config({
        "autoclusters:pools": '[{"name": "a"}]', "autoclusters:local": "true", "autoclusters:domain": "x.io",
        "autoclusters:image": "reg/img:1", "autoclusters:kubeconfig": "/k", "kubernetes:context": "c",
    })
    assert settings == {"pools": [{"name": "a"}], "local": True, "domain": "x.io", "image": "reg/img:1"}
    assert access == {"kubeconfig": "/k"}
