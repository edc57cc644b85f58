"""What Pulumi deploys and what ``manifests/`` holds are one list: the objects ``AutoClusters``
registers under Pulumi's mock engine are exactly ``deploy.stack.stack_objects(config)``, the
list the renderer writes."""

import json
from typing import Any

import pytest

from autoclusters.deploy.stack import stack_objects
from autoclusters.deploy.stack_config import stack_config_from_dict
from components import AutoClusters, AutoClustersArgs
from components._recording import RecordingMocks, record
from components.render import EXAMPLE_POOLS, manifest

# Fixed PEMs, so the test also sees them reach the Secret and the caBundle.
PEMS = {"ca_pem": "-----CA-----\n", "cert_pem": "-----CERT-----\n", "key_pem": "-----KEY-----\n"}
CONFIGS: dict[str, dict[str, Any]] = {
    "rendered": {"pools": EXAMPLE_POOLS},
    "brand": {"pools": EXAMPLE_POOLS, "domain": "crusoe.ai", "conditionPrefix": "Crusoe",
              "eventSource": "nodepool-service"},
    "local-second-namespace": {
        "local": True, "namespace": "ns1", "image": "registry.example/autoclusters:1",
        "webhookUrl": "https://127.0.0.1:9443/validate", "defaultPool": {"consentMode": "off"},
        "pools": [{"name": "a100", "consentMode": "propose", "nodes": {"backend": "simulated", "count": 2}},
                  {"name": "h100", "nodes": {"backend": "existing", "selector": {"zone": "z1"}}}]},
    "slurm-pool": {"pools": [*EXAMPLE_POOLS, {"name": "b200", "slurm": {"enabled": True}}]},
    "prometheus-operator": {"pools": EXAMPLE_POOLS,
                            "monitoring": {"prometheusOperator": "true", "labels": {"release": "kps"}}},
    "gpu-operator-dcgm": {"pools": EXAMPLE_POOLS,
                          "detector": {"dcgmHost": "nvidia-dcgm.gpu-operator.svc:5555",
                                       "dcgmExporterUrl": "http://$(HOST_IP):9400/metrics"}},
    # every other setting away from its default, so that a setting the components drop fails
    # here (hostRebootCommand once did: pulumi up deployed the default command)
    "operator-settings": {"pools": EXAMPLE_POOLS, "hostRebootCommand": "apiclient reboot",
                          "opaImage": "registry.example/opa:1", "controllerShards": 2,
                          "detectorConditionCodes": ["gpu:13"], "kernelLogSource": "journal",
                          "nvml": {"enabled": False},
                          "allowLists": {"commands": {"replace": ["/opt/replace-node"]},
                                         "images": {"reboot": "registry.example/reboot:1"},
                                         "urls": {"notice": "https://ops.example/drain"}},
                          "controllerProviders": ["clusterapi", "hostReboot", "karpenter"]},
    # every pod setting of deploy/pod_settings.py on every part (the components apply them too)
    "pod-settings": {"pools": EXAMPLE_POOLS, "imagePullSecrets": ["regcred"], "controller": {"workers": 8},
                     "pods": {
        part: {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
               "nodeSelector": {"pool": "infra"}, "resources": {"limits": {"memory": "1Gi"}},
               "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                   {"weight": 1, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone"}}]}},
               "priorityClassName": "system-cluster-critical", "env": [{"name": "HTTPS_PROXY", "value": "http://p:3128"}],
               "podAnnotations": {"team": "infra"},
               "serviceAccountAnnotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/ac"}}
        for part in ("controller", "webhook", "detector")}},
}


def test_every_stack_setting_is_away_from_its_default_in_some_config() -> None:
    import dataclasses

    from autoclusters.deploy.stack_config import StackConfig

    default = StackConfig()
    configs = [stack_config_from_dict(c) for c in CONFIGS.values()]
    same = [f.name for f in dataclasses.fields(StackConfig)
            if all(getattr(c, f.name) == getattr(default, f.name) for c in configs)]
    assert same == [], f"no config below sets {same}: a component that drops them would pass unseen"


def _key(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True)


@pytest.mark.parametrize("settings", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_components_register_exactly_the_stack_objects(settings):
    config = stack_config_from_dict(settings)
    mocks = record(lambda: AutoClusters("ac", AutoClustersArgs(config=config, node_lister=lambda sel: ["n1"])),
                   RecordingMocks(lambda dns, ips: dict(PEMS)))
    # A pool's nodes (labels patched onto existing nodes, kwok nodes) belong to the cluster,
    # not to the stack's object list.
    registered = [o for o in mocks.kubernetes_objects() if o["kind"] != "NodePatch"]
    patched = [o["metadata"]["name"] for o in mocks.kubernetes_objects() if o["kind"] == "NodePatch"]
    assert patched == (["n1"] if any(p.nodes.selector for p in config.pools) else [])
    expected = [manifest(o) for o in stack_objects(config, **PEMS)]
    assert sorted(map(_key, registered)) == sorted(map(_key, expected))
    assert len(expected) == len({(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
                                 for o in expected}), "two objects share a kind and name"


def test_the_certificate_reaches_the_secret_and_the_ca_bundle():
    objs = stack_objects(stack_config_from_dict({}), **PEMS)
    (secret,) = [o for o in objs if o["kind"] == "Secret"]
    assert secret["stringData"] == {"tls.crt": PEMS["cert_pem"], "tls.key": PEMS["key_pem"], "ca.crt": PEMS["ca_pem"]}
    (config,) = [o for o in objs if o["kind"] == "ValidatingWebhookConfiguration"]
    import base64

    assert {base64.b64decode(w["clientConfig"]["caBundle"]).decode() for w in config["webhooks"]} == {PEMS["ca_pem"]}


@pytest.mark.parametrize("settings, bridge", [(CONFIGS["rendered"], False), (CONFIGS["slurm-pool"], True)],
                         ids=["no-slurm-pool", "a-slurm-pool"])
def test_the_slurm_bridge_gets_its_identity_when_a_pool_of_the_stack_enables_slurm(settings, bridge):
    objs = stack_objects(stack_config_from_dict(settings))
    accounts = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    assert ("autoclusters-slurm-bridge" in accounts) is bridge
    bindings = [o for o in objs
                if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"] == "autoclusters-slurm-bridge"]
    assert len(bindings) == int(bridge)


@pytest.mark.parametrize("settings, kinds", [(CONFIGS["rendered"], []),
                                             (CONFIGS["prometheus-operator"], ["PodMonitor", "PodMonitor",
                                                                              "PodMonitor", "PrometheusRule"])],
                         ids=["default", "prometheus-operator"])
def test_the_prometheus_operators_objects_come_only_when_asked(settings, kinds):
    objs = [o for o in stack_objects(stack_config_from_dict(settings)) if o["apiVersion"].startswith("monitoring.")]
    assert [o["kind"] for o in objs] == kinds
    assert all(o["metadata"]["labels"]["release"] == "kps" for o in objs)


@pytest.mark.parametrize("monitoring, error", [
    ({"prometheusOperator": "yes"}, "monitoring.prometheusOperator must be true or false"),
    ({"prometheusOperator": True, "labell": {}}, r"monitoring: unknown key\(s\) labell"),
    ([{"prometheusOperator": True}], "monitoring must be a mapping"),
    ({"labels": {"release": 1}}, "monitoring.labels must map label names to strings"),
    ({"labels": ["release=kps"]}, "monitoring.labels must map label names to strings"),
    ({"approvalWaitAlertSeconds": "6h"}, "monitoring.approvalWaitAlertSeconds must be an integer"),
    ({"approvalWaitAlertSeconds": 0}, "monitoring.approvalWaitAlertSeconds must be a positive number of seconds"),
    ({"approvalWaitAlertSeconds": True}, "monitoring.approvalWaitAlertSeconds must be an integer"),
], ids=["not-a-bool", "unknown-key", "not-a-mapping", "a-value-not-a-string", "labels-not-a-mapping",
        "wait-not-a-number", "wait-zero", "wait-a-bool"])
def test_a_bad_monitoring_setting_is_a_configuration_error(monitoring, error):
    from autoclusters.pools.pool_config import PoolConfigError

    with pytest.raises(PoolConfigError, match=error):
        stack_config_from_dict({"monitoring": monitoring})


@pytest.mark.parametrize("wait, expected", [(None, 21600), ("1800", 1800), (86400, 86400)],
                         ids=["default", "a-string-from-pulumi-config", "a-day"])
def test_the_approval_alerts_wait_is_the_settings(wait, expected):
    """The PrometheusRule's approval alert fires after ``monitoring.approvalWaitAlertSeconds``
    (``pulumi config set`` gives a string); the rule file's is the default."""
    monitoring = {"prometheusOperator": True, **({"approvalWaitAlertSeconds": wait} if wait is not None else {})}
    objs = stack_objects(stack_config_from_dict({"monitoring": monitoring}))
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    (alert,) = [r for r in rule["spec"]["groups"][0]["rules"] if r["alert"] == "AutoclustersRepairAwaitingApproval"]
    assert alert["expr"].endswith(f"> {expected}")


def _detector_args(config: Any) -> list[str]:
    (ds,) = [o for o in stack_objects(stack_config_from_dict(config)) if o["kind"] == "DaemonSet"]
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def test_the_detector_setting_becomes_the_detectors_flags():
    """Unset, the DaemonSet's detectors read no DCGM; set, they ask the hostengine and read the page."""
    assert not any(a.startswith("--dcgm") for a in _detector_args({}))
    args = _detector_args(CONFIGS["gpu-operator-dcgm"])
    at = args.index("--dcgm-host")
    assert args[at:at + 4] == ["--dcgm-host", "nvidia-dcgm.gpu-operator.svc:5555",
                               "--dcgm-exporter-url", "http://$(HOST_IP):9400/metrics"]
    from autoclusters.cli.main import build_parser

    parsed = build_parser().parse_args(args)  # the detector's own parser takes them
    assert (parsed.dcgm_host, parsed.dcgm_exporter_url) == ("nvidia-dcgm.gpu-operator.svc:5555",
                                                            "http://$(HOST_IP):9400/metrics")


def test_the_detectors_window_is_a_setting_its_own_parser_takes():
    """Durations are configuration: a cluster (or a test) shortens the 60 s window on the pods."""
    from autoclusters.cli.main import build_parser

    assert "--window" not in _detector_args({})  # unset: the detector's own default
    args = _detector_args({"pools": EXAMPLE_POOLS, "detector": {"windowSeconds": 5}})
    assert args[args.index("--window") + 1] == "5"
    assert build_parser().parse_args(args).window == 5.0


@pytest.mark.parametrize("detector, error", [
    ({"windowSeconds": -1}, "detector.windowSeconds must be a number of seconds >= 0"),
    ({"windowSeconds": "60s"}, "detector.windowSeconds must be a number of seconds >= 0"),
    ({"dcgmExporterUrl": "nvidia-dcgm-exporter:9400"}, "detector.dcgmExporterUrl: expected an http:// or https:// URL"),
    ({"dcgmHost": "nvidia-dcgm 5555"}, "detector.dcgmHost must be an address"),
    ({"dcgm_host": "x"}, r"detector: unknown key\(s\) dcgm_host"),
], ids=["negative-window", "window-with-a-unit", "url-without-scheme", "host-with-a-space", "unknown-key"])
def test_a_bad_detector_setting_is_a_configuration_error(detector, error):
    from autoclusters.pools.pool_config import PoolConfigError

    with pytest.raises(PoolConfigError, match=error):
        stack_config_from_dict({"detector": detector})
