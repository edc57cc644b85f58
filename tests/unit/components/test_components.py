"""Every component under Pulumi's mock engine: what it creates, with which arguments, and
which arguments it refuses before creating anything."""

from typing import Any

import pytest

from autoclusters.deploy.stack_config import stack_config_from_dict
from autoclusters.names import Names
from autoclusters.pools.pool_config import PoolConfigError, pool_from_config
from components import (
    AdmissionPolicy,
    AdmissionPolicyArgs,
    AutoClusters,
    AutoClustersArgs,
    Controller,
    ControllerArgs,
    Crds,
    CrdsArgs,
    Detector,
    DetectorArgs,
    GpuNodePool,
    GpuNodePoolArgs,
    Rbac,
    RbacArgs,
)
from components._args import ComponentArgsError
from components._recording import DYNAMIC, RecordingMocks, record
from components.webhook_certificate import issue

IMAGE = "registry.example/autoclusters:1"


def _objects(mocks, kind):
    return [o for o in mocks.kubernetes_objects() if o["kind"] == kind]


def _one(mocks, kind):
    found = _objects(mocks, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def test_detector_creates_its_daemonset_in_the_namespace():
    mocks = record(lambda: Detector("det", DetectorArgs(image=IMAGE, namespace="ns1")))
    assert [r.typ for r in mocks.registered] == ["autoclusters:index:Detector", "kubernetes:apps/v1:DaemonSet"]
    ds = _one(mocks, "DaemonSet")
    assert ds["metadata"] == {"name": "autoclusters-detector", "namespace": "ns1",
                              "labels": {"app.kubernetes.io/name": "autoclusters-detector",
                                         "app.kubernetes.io/part-of": "autoclusters"}}
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"image": ""}, "Detector: image '' must be a container image reference"),
    ({"image": IMAGE, "namespace": "Kube System"}, "Detector: namespace 'Kube System' must be a DNS label"),
])
def test_detector_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ComponentArgsError) as err:
        DetectorArgs(**kwargs)
    assert message in str(err.value)


def test_controller_creates_two_replicas_and_a_pdb():
    mocks = record(lambda: Controller("ctl", ControllerArgs(image=IMAGE)))
    dep = _one(mocks, "Deployment")
    pdb = _one(mocks, "PodDisruptionBudget")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"][:2] == ["controller", "run"]
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {
        "app.kubernetes.io/name": "autoclusters-controller"}}}


def test_a_sharded_controller_creates_a_deployment_and_a_pdb_per_shard():
    mocks = record(lambda: Controller("ctl", ControllerArgs(image=IMAGE, shards=2)))
    deps, pdbs = _objects(mocks, "Deployment"), _objects(mocks, "PodDisruptionBudget")
    assert sorted(d["metadata"]["name"] for d in deps) == ["autoclusters-controller-shard-0",
                                                           "autoclusters-controller-shard-1"]
    assert len(pdbs) == 2
    for dep in deps:
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--shards") + 1] == "2"
    with pytest.raises(ComponentArgsError, match="shards must be an integer >= 1"):
        ControllerArgs(image=IMAGE, shards=0)


@pytest.mark.parametrize(("replicas", "message"), [(1, "replicas must be >= 2"), (0, "replicas must be an integer")])
def test_controller_refuses_a_replica_count_that_blocks_drains(replicas, message):
    with pytest.raises(ComponentArgsError, match=message):
        ControllerArgs(image=IMAGE, replicas=replicas)


def test_crds_creates_both_definitions_for_the_configured_group():
    mocks = record(lambda: Crds("crds", CrdsArgs(names=Names("crusoe.ai", "Crusoe"))))
    crds = _objects(mocks, "CustomResourceDefinition")
    assert sorted(c["metadata"]["name"] for c in crds) == ["gpunodepools.remediation.crusoe.ai",
                                                          "remediations.remediation.crusoe.ai"]
    assert {c["spec"]["scope"] for c in crds} == {"Cluster"}


def test_rbac_creates_the_three_service_accounts_and_binds_each_role_to_its_own_account():
    mocks = record(lambda: Rbac("rbac", RbacArgs(namespace="ns1")))
    sas = {o["metadata"]["name"] for o in _objects(mocks, "ServiceAccount")}
    assert sas == {"autoclusters-controller", "autoclusters-detector", "autoclusters-webhook"}
    assert all(o["metadata"]["namespace"] == "ns1" for o in _objects(mocks, "ServiceAccount"))
    bindings = _objects(mocks, "ClusterRoleBinding") + _objects(mocks, "RoleBinding")
    for b in bindings:
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": b["subjects"][0]["name"], "namespace": "ns1"}]
        assert b["subjects"][0]["name"] in sas
    roles = _objects(mocks, "ClusterRole")
    controller_role = next(o for o in roles if o["metadata"]["name"].startswith("autoclusters-controller"))
    assert any("pods/eviction" in r["resources"] for r in controller_role["rules"])
    # the webhook has no rights at all; the controller keeps its certificate and this installation's caBundle
    assert not [b for b in bindings if b["subjects"][0]["name"] == "autoclusters-webhook"]
    assert {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"],
            "verbs": ["get", "patch"], "resourceNames": ["autoclusters-webhook-ns1"]} in controller_role["rules"]
    # A second installation's cluster-scoped objects carry its namespace, so stacks never share them.
    cluster_scoped = [o for o in mocks.kubernetes_objects() if "namespace" not in o["metadata"]]
    assert cluster_scoped and all(o["metadata"]["name"].endswith("-ns1") for o in cluster_scoped)
    _assert_bindings_follow_what_they_name(mocks)


def _assert_bindings_follow_what_they_name(mocks: RecordingMocks) -> None:
    """Each binding is registered after the service accounts and the role it names (its
    depends_on). Only that order is promised: registrations run on Pulumi's RPC thread pool,
    so resources that do not depend on each other register in any order."""
    objs = [r.manifest() for r in mocks.registered if r.is_kubernetes]
    at = {(o["kind"], o["metadata"]["name"]): i for i, o in enumerate(objs)}
    bindings = [o for o in objs if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert bindings
    for b in bindings:
        named = [(b["roleRef"]["kind"], b["roleRef"]["name"])]
        named += [("ServiceAccount", s["name"]) for s in b["subjects"] if s["kind"] == "ServiceAccount"]
        for ref in named:
            assert at[ref] < at[(b["kind"], b["metadata"]["name"])], f"{b['metadata']['name']} before {ref}"


def test_rbac_order_holds_when_one_registration_is_slow():
    """The flake this replaces: on a loaded machine one service account's registration thread
    finished after other accounts' bindings, breaking an "all accounts before all bindings"
    check. Here the webhook's account is held until another binding has registered."""
    import threading

    class SlowWebhookAccount(RecordingMocks):
        binding_seen = threading.Event()

        def new_resource(self, args):
            if args.typ.endswith(":ServiceAccount") and "webhook" in args.name:
                assert self.binding_seen.wait(60), "no binding registered while the account was held"
            result = super().new_resource(args)
            # Set only once the ClusterRoleBinding is recorded: set when its registration merely
            # began (or by a RoleBinding), the released account could be recorded first.
            if args.typ.endswith(":ClusterRoleBinding"):
                self.binding_seen.set()
            return result

    mocks = record(lambda: Rbac("rbac", RbacArgs(namespace="ns1")), SlowWebhookAccount())
    kinds = [r.manifest()["kind"] for r in mocks.registered if r.is_kubernetes]
    assert kinds.index("ClusterRoleBinding") < len(kinds) - 1 - kinds[::-1].index("ServiceAccount")  # reordered
    _assert_bindings_follow_what_they_name(mocks)


def _admission(**kwargs):
    args = AdmissionPolicyArgs(image=IMAGE, opa_image="opa:1", namespace="ns1", **kwargs)
    return record(lambda: AdmissionPolicy("adm", args), RecordingMocks(issue))


def test_admission_policy_in_cluster_uses_the_service_and_a_certificate_for_its_dns_name():
    mocks = _admission()
    cert = mocks.of_type(DYNAMIC)[0].inputs
    assert cert["dns_names"] == ["autoclusters-webhook.ns1.svc", "autoclusters-webhook.ns1.svc.cluster.local"]
    assert cert["ip_addresses"] == []
    vwc = _one(mocks, "ValidatingWebhookConfiguration")
    client = vwc["webhooks"][0]["clientConfig"]
    assert client["service"] == {"namespace": "ns1", "name": "autoclusters-webhook", "path": "/validate", "port": 443}
    assert "url" not in client
    assert client["caBundle"]  # the CA that signed the serving certificate
    secret = _one(mocks, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["stringData"]["tls.crt"].startswith("-----BEGIN CERTIFICATE-----")
    assert _one(mocks, "Deployment")["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == \
        secret["metadata"]["name"]
    assert _one(mocks, "ConfigMap")["data"]
    assert _one(mocks, "Service")["metadata"]["name"] == "autoclusters-webhook"
    assert _one(mocks, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    vap = _one(mocks, "ValidatingAdmissionPolicy")
    assert _one(mocks, "ValidatingAdmissionPolicyBinding")["spec"]["policyName"] == vap["metadata"]["name"]
    assert vap["metadata"]["name"] == "autoclusters-maintenance-labels-ns1"
    assert vwc["metadata"]["name"] == "autoclusters-webhook-ns1"
    assert "system:serviceaccount:ns1:autoclusters-controller" in vap["spec"]["matchConditions"][0]["expression"]


def test_admission_policy_local_mode_points_the_api_server_at_the_host_url():
    mocks = _admission(webhook_url="https://127.0.0.1:9443/validate")
    assert mocks.of_type(DYNAMIC)[0].inputs["ip_addresses"] == ["127.0.0.1"]
    client = _one(mocks, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"]
    assert client["url"] == "https://127.0.0.1:9443/validate"
    assert "service" not in client


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"webhook_url": "http://127.0.0.1/validate"}, "must be an https:// URL"),
    ({"policies_dir": "/nonexistent"}, "is not a directory"),
])
def test_admission_policy_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ComponentArgsError, match=message):
        AdmissionPolicyArgs(image=IMAGE, opa_image="opa:1", **kwargs)


def test_simulated_pool_creates_its_nodes_and_the_pool_object():
    pool = pool_from_config({"name": "a100", "consentMode": "propose",
                             "nodes": {"backend": "simulated", "count": 2, "gpusPerNode": 4}})
    mocks = record(lambda: GpuNodePool("p", GpuNodePoolArgs(pool=pool, kubeconfig="/tmp/kc")))
    nodes = [r.inputs for r in mocks.of_type(DYNAMIC)]
    assert sorted(n["name"] for n in nodes) == ["a100-0", "a100-1"]  # registered in any order
    assert {n["pool"] for n in nodes} == {"a100"}
    assert {n["gpus"] for n in nodes} == {4}
    assert {n["kubeconfig"] for n in nodes} == {"/tmp/kc"}
    obj = _one(mocks, "GpuNodePool")
    assert obj["apiVersion"] == "remediation.autoclusters.io/v1beta1"
    assert obj["metadata"]["name"] == "a100"
    assert obj["spec"]["consentMode"] == "propose"


def test_simulated_nodes_may_register_in_either_order():
    """Test 22's flake (the dev stack's nodes compared as an ordered list): registrations run
    on Pulumi's RPC thread pool; here node 0 is held until node 1 has registered."""
    import threading

    class HoldFirstNode(RecordingMocks):
        second = threading.Event()

        def new_resource(self, args):
            if args.typ == DYNAMIC and args.inputs.get("name") == "a100-1":
                self.second.set()
            if args.typ == DYNAMIC and args.inputs.get("name") == "a100-0":
                assert self.second.wait(60), "node 1 never registered while node 0 was held"
            return super().new_resource(args)

    pool = pool_from_config({"name": "a100", "nodes": {"backend": "simulated", "count": 2}})
    mocks = record(lambda: GpuNodePool("p", GpuNodePoolArgs(pool=pool, kubeconfig="/tmp/kc")), HoldFirstNode())
    names = [r.inputs["name"] for r in mocks.of_type(DYNAMIC)]
    assert names == ["a100-1", "a100-0"]  # the order the old assertions took for granted is not kept
    assert sorted(names) == ["a100-0", "a100-1"]


def test_existing_pool_labels_named_and_selected_nodes():
    pool = pool_from_config({"name": "h100", "nodes": {"selector": {"gpu": "h100"}}})
    asked = []

    def lister(selector):
        asked.append(dict(selector))
        return ["n2", "n3"]

    mocks = record(lambda: GpuNodePool("p", GpuNodePoolArgs(pool=pool, existing_nodes=["n1", "n2"],
                                                            node_lister=lister)))
    assert asked == [{"gpu": "h100"}]
    patches = [r.manifest() for r in mocks.of_type("kubernetes:core/v1:NodePatch")]
    assert sorted(p["metadata"]["name"] for p in patches) == ["n1", "n2", "n3"]
    assert {p["metadata"]["labels"]["autoclusters.io/nodepool.name"] for p in patches} == {"h100"}
    assert _one(mocks, "GpuNodePool")["spec"]["consentMode"] == "auto"
    assert not mocks.of_type(DYNAMIC)


def test_gpu_node_pool_refuses_inconsistent_backends():
    simulated = pool_from_config({"name": "a", "nodes": {"backend": "simulated", "count": 1}})
    with pytest.raises(ComponentArgsError, match="existing_nodes apply to the existing backend"):
        GpuNodePoolArgs(pool=simulated, existing_nodes=["n1"])
    selected = pool_from_config({"name": "a", "nodes": {"selector": {"gpu": "x"}}})
    with pytest.raises(ComponentArgsError, match="needs a node_lister"):
        GpuNodePoolArgs(pool=selected)
    with pytest.raises(ComponentArgsError, match="pool must be a PoolConfig"):
        untyped_pool: Any = {"name": "a"}  # what an untyped Pulumi program could pass
        GpuNodePoolArgs(pool=untyped_pool)


def test_autoclusters_wires_every_component_with_children_parented():
    cfg = stack_config_from_dict({"local": True, "namespace": "ns1", "image": IMAGE,
                                  "webhookUrl": "https://127.0.0.1:9443/validate",
                                  "pools": [{"name": "a100", "consentMode": "propose",
                                             "nodes": {"backend": "simulated", "count": 2}},
                                            {"name": "h100"}]})
    mocks = record(lambda: AutoClusters("ac", AutoClustersArgs(config=cfg)), RecordingMocks(issue))
    types = [r.typ for r in mocks.registered]
    for component in ("AutoClusters", "Crds", "Rbac", "Detector", "Controller", "AdmissionPolicy", "GpuNodePool"):
        assert f"autoclusters:index:{component}" in types
    assert types.count("autoclusters:index:GpuNodePool") == 2
    assert _one(mocks, "Namespace")["metadata"]["name"] == "ns1"
    pools = {o["metadata"]["name"]: o["spec"]["consentMode"] for o in _objects(mocks, "GpuNodePool")}
    assert pools == {"a100": "propose", "h100": "auto"}
    namespaced = [o for o in mocks.kubernetes_objects() if "namespace" in o["metadata"]]
    assert namespaced and {o["metadata"]["namespace"] for o in namespaced} == {"ns1"}
    assert len(mocks.of_type(DYNAMIC)) == 4  # two simulated nodes, the webhook certificate, the node cleanup


def test_autoclusters_refuses_a_raw_dict():
    untyped_config: Any = {"pools": []}  # what an untyped Pulumi program could pass
    with pytest.raises(ComponentArgsError, match="config must be a StackConfig"):
        AutoClustersArgs(config=untyped_config)


def test_stack_program_reads_config_and_exports_the_pools():
    from components import stack

    mocks = record(stack.program, RecordingMocks(issue), config={
        "autoclusters:local": "true",
        "autoclusters:kubeconfig": "/tmp/kc",
        "autoclusters:pools": [{"name": "a100", "consentMode": "off", "nodes": {"backend": "simulated", "count": 1}}],
    })
    assert _one(mocks, "GpuNodePool")["spec"]["consentMode"] == "off"
    (node,) = [r.inputs for r in mocks.of_type(DYNAMIC) if "pool" in r.inputs]  # not the webhook certificate
    assert node["kubeconfig"] == "/tmp/kc"


def test_stack_program_fails_with_a_clear_message_on_a_bad_consent_mode():
    from components import stack

    with pytest.raises(PoolConfigError) as err:
        record(stack.program, config={"autoclusters:pools": [{"name": "a100", "consentMode": "sometimes"}]})
    assert "invalid stack configuration: pool 'a100': consentMode must be one of auto|propose|off" in str(err.value)


def test_stack_program_rejects_a_mistyped_key():
    from components import stack

    with pytest.raises(PoolConfigError, match="unknown key"):
        record(stack.program, config={"autoclusters:consentmode": "auto"})


def test_detector_rollout_is_not_awaited_when_asked():
    mocks = record(lambda: Detector("det", DetectorArgs(image=IMAGE, await_rollout=False)))
    assert _one(mocks, "DaemonSet")["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    mocks = record(lambda: Detector("det", DetectorArgs(image=IMAGE)))
    assert "annotations" not in _one(mocks, "DaemonSet")["metadata"]


def test_the_detector_component_passes_its_condition_codes():
    mocks = record(lambda: Detector("det", DetectorArgs(image=IMAGE, condition_codes=("gpu:13",))))
    args = _one(mocks, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--condition-codes") + 1] == "gpu:13"


def test_the_example_dev_stack_is_a_propose_pool_of_two_simulated_a100_nodes():
    import yaml

    from components import stack
    from components.render import ROOT

    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    mocks = record(stack.program, RecordingMocks(issue), config=config)
    nodes = [r.inputs for r in mocks.of_type(DYNAMIC) if "pool" in r.inputs]
    assert sorted((n["name"], n["gpus"], n["gpu_product"]) for n in nodes) == [
        ("a100-0", 8, "NVIDIA-A100-SXM4-80GB"), ("a100-1", 8, "NVIDIA-A100-SXM4-80GB")]
    assert _one(mocks, "GpuNodePool")["spec"]["consentMode"] == "propose"
    client = _one(mocks, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"]
    assert client["url"] == "https://127.0.0.1:9443/validate"


def test_stack_program_carries_the_pre_drain_settings_to_the_pool_object():
    from components import stack

    mocks = record(stack.program, RecordingMocks(issue), config={
        "autoclusters:local": "true",
        "autoclusters:kubeconfig": "/tmp/kc",
        "autoclusters:pools": [{"name": "a100", "nodes": {"backend": "simulated", "count": 1},
                                "preDrain": {"waitSeconds": 240, "acknowledgers": ["slurm"], "slinky": True}}],
    })
    assert _one(mocks, "GpuNodePool")["spec"]["preDrain"] == {"waitSeconds": 240, "acknowledgers": ["slurm"],
                                                              "slinky": True}
    with pytest.raises(PoolConfigError, match=r"pool 'a100': preDrain.acknowledgers entry 'Slurm'"):
        record(stack.program, config={"autoclusters:pools": [{"name": "a100",
                                                              "preDrain": {"acknowledgers": ["Slurm"]}}]})
