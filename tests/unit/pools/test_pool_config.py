"""Pool and stack configuration: defaults written out, and every bad value named."""

from typing import Any

import pytest

from autoclusters import pool_fields
from autoclusters.api import ClassAction, ConsentMode
from autoclusters.deploy.nvml_reach import NvmlReach
from autoclusters.deploy.stack_config import stack_config_from_dict
from autoclusters.names import Names
from autoclusters.pools.pool_config import (
    NodeBackend,
    PoolConfig,
    PoolConfigError,
    gpu_node_pool_object,
    pool_from_config,
)


def test_consent_mode_defaults_to_auto_and_every_default_is_written():
    pool = pool_from_config({"name": "a100"})
    assert pool.consent_mode is ConsentMode.AUTO
    obj = gpu_node_pool_object(pool, Names())
    assert obj["apiVersion"] == "remediation.autoclusters.io/v1beta1"
    assert obj["kind"] == "GpuNodePool"
    assert obj["metadata"]["name"] == "a100"
    spec = obj["spec"]
    assert spec["consentMode"] == "auto"
    assert spec["faultClasses"] == {"gpu": "default", "nvswitch": "default", "dcgm": "default",
                                    "interconnect": "default"}
    for group in ("circuitBreaker", "drain", "escalation", "attemptBudget"):  # each object, whole
        assert spec[group] == {s.key: s.default for s in pool_fields.settings_of(group)}, group
    assert spec["maxConcurrentRepairs"] == pool_fields.MAX_CONCURRENT_REPAIRS.default
    assert "provider" not in spec  # none configured: the controller holds repairs, never picks one
    assert pool.provider.missing() == ("reset", "replace")
    assert "nodeSelector" not in spec


def test_pool_fields_reach_the_spec():
    pool = pool_from_config({
        "name": "h100", "consentMode": "propose", "faultClasses": {"interconnect": "reset", "dcgm": "off"},
        "maxConcurrentRepairs": 4, "circuitBreaker": {"openAbovePercent": 50, "closeBelowPercent": 10, "minNodes": 3},
        "drain": {"resetDeadlineSeconds": 30}, "attemptBudget": {"maxRepairs": 5},
        "nodeSelector": {"matchLabels": {"gpu": "h100"}},
        "provider": {"type": "command", "command": {"command": ["/bin/fix"]}, "reset": {"type": "hostReboot"}},
    })
    spec = gpu_node_pool_object(pool, Names("crusoe.ai", "Crusoe"))["spec"]
    assert spec["consentMode"] == "propose"
    assert spec["faultClasses"]["interconnect"] == "reset"
    assert spec["faultClasses"]["dcgm"] == "off"
    assert spec["faultClasses"]["gpu"] == "default"
    assert spec["maxConcurrentRepairs"] == 4
    assert spec["circuitBreaker"] == {"openAbovePercent": 50, "closeBelowPercent": 10, "minNodes": 3}
    assert spec["drain"] == {**{s.key: s.default for s in pool_fields.settings_of("drain")}, "resetDeadlineSeconds": 30}
    assert spec["attemptBudget"]["maxRepairs"] == 5
    assert spec["nodeSelector"] == {"matchLabels": {"gpu": "h100"}}
    assert spec["provider"] == {"type": "command", "command": {"command": ["/bin/fix"], "timeoutSeconds": 900},
                                "reset": {"type": "hostReboot", "hostReboot": {"timeoutSeconds": 600}}}
    assert pool.provider.describe() == "reset=hostReboot replace=command"
    assert gpu_node_pool_object(pool, Names("crusoe.ai", "Crusoe"))["apiVersion"] == "remediation.crusoe.ai/v1beta1"


@pytest.mark.parametrize(("pool", "message"), [
    ({"name": "a100", "consentMode": "yes"}, "consentMode must be one of auto|propose|off, got 'yes'"),
    ({"name": "A100"}, "must be a DNS label"),
    ({"name": "a100", "faultClasses": {"gpu": "reboot"}}, "faultClasses.gpu must be one of default|reset|replace|off"),
    ({"name": "a100", "faultClasses": {"memory": "reset"}}, "unknown key(s) memory"),
    ({"name": "a100", "repairCodes": {"gpu:13": "reboot"}}, "repairCodes.gpu:13 must be one of reset|replace"),
    ({"name": "a100", "repairCodes": {"memory:13": "reset"}}, "repairCodes key 'memory:13' must be <class>:<code>"),
    ({"name": "a100", "repairCodes": {"13": "reset"}}, "repairCodes key '13' must be <class>:<code>"),
    ({"name": "a100", "repairCodes": ["gpu:13"]}, "repairCodes must be a mapping"),
    ({"name": "a100", "maxConcurrentRepairs": 0}, "maxConcurrentRepairs must be an integer >= 1, got 0"),
    ({"name": "a100", "maxConcurrentRepairs": True}, "maxConcurrentRepairs must be an integer >= 1"),
    ({"name": "a100", "circuitBreaker": {"openAbovePercent": 10, "closeBelowPercent": 20}},
     "closeBelowPercent (20) must not exceed openAbovePercent (10)"),
    ({"name": "a100", "circuitBreaker": {"openAbovePercent": 130}}, "openAbovePercent must be an integer in 1..100"),
    ({"name": "a100", "drain": {"resetDeadline": 30}}, "drain: unknown key(s) resetDeadline"),
    ({"name": "a100", "consentmode": "auto"}, "unknown key(s) consentmode"),
    ({"name": "a100", "provider": {"type": "aws"}},
     "pool 'a100': provider.type must be one of simulated|command|clusterapi|hostReboot|karpenter|redfish|ec2, "
     "got 'aws'"),
    ({"name": "a100", "provider": {"type": "command"}}, "provider.command.command is required"),
    ({"name": "a100", "provider": {"type": "command", "command": {"command": []}}},
     "provider.command.command must be a non-empty list"),
    ({"name": "a100", "provider": {"type": "simulated", "simulated": {"resetSecs": 1}}},
     "provider.simulated: unknown key(s) resetSecs"),
    ({"name": "a100", "provider": {"type": "simulated", "simulated": {"resetSeconds": -1}}},
     "provider.simulated.resetSeconds must be an integer >= 0"),
    ({"name": "a100", "provider": {"type": "simulated", "command": {"command": ["x"]}}},
     "provider.command does not apply to type simulated"),
    ({"name": "a100", "provider": {"replace": {"type": "hostReboot"}}},
     "provider.replace.type hostReboot cannot replace a node (it supports: reset)"),
    ({"name": "a100", "provider": {"reset": {}}}, "provider.reset.type must be one of"),
    ({"name": "a100", "provider": {"resetSeconds": 3}}, "provider: unknown key(s) resetSeconds"),
    ({"name": "a100", "nodes": {"backend": "simulated"}}, "nodes.count must be an integer >= 1"),
    ({"name": "a100", "nodes": {"backend": "cloud"}}, "nodes.backend must be one of simulated|existing"),
    ({"name": "a100", "nodes": {"count": 2}}, "nodes.count applies to the simulated backend only"),
    ({"name": "a100", "nodes": {"selector": {"bad key!": "x"}}}, "is not a label key"),
    ({"consentMode": "auto"}, "'name' is required"),
])
def test_bad_pool_values_are_rejected_with_the_field_named(pool, message):
    with pytest.raises(PoolConfigError) as err:
        pool_from_config(pool)
    assert message in str(err.value)


def test_pool_config_validates_when_built_directly() -> None:
    # the plain strings an untyped caller (a Pulumi YAML program, a dict from a file) passes
    untyped: dict[str, Any] = {"name": "a100", "consent_mode": "sometimes"}
    as_written: dict[str, Any] = {"name": "a100", "consent_mode": "off", "fault_classes": {"gpu": "replace"}}
    with pytest.raises(PoolConfigError, match="consentMode"):
        PoolConfig(**untyped)
    pool = PoolConfig(**as_written)
    assert pool.consent_mode is ConsentMode.OFF
    assert pool.fault_classes == {"gpu": ClassAction.REPLACE}


def test_stack_config_parses_pools_and_string_booleans():
    cfg = stack_config_from_dict({"local": "true", "domain": "crusoe.ai", "conditionPrefix": "Crusoe",
                                  "pools": [{"name": "a100", "nodes": {"backend": "simulated", "count": 2}}]})
    assert cfg.local is True
    assert cfg.names.pool_label == "crusoe.ai/nodepool.name"
    assert cfg.pools[0].nodes.backend is NodeBackend.SIMULATED
    assert cfg.pools[0].nodes.count == 2


def test_the_nvml_setting_defaults_and_parses() -> None:
    assert stack_config_from_dict({}).nvml == NvmlReach(True, ("loader", "/run/nvidia/driver", "/"), "/", "")
    cfg = stack_config_from_dict({"nvml": {"enabled": "true", "search": ["loader"], "hostRoot": "",
                                           "runtimeClassName": "nvidia"}})
    assert cfg.nvml == NvmlReach(True, ("loader",), "", "nvidia")
    assert stack_config_from_dict({"nvml": {"enabled": "false"}}).nvml.detector_args() == ["--no-nvml"]


@pytest.mark.parametrize(("config", "message"), [
    ({"domain": "Not A Domain"}, "invalid domain"),
    ({"conditionPrefix": "lower"}, "invalid condition prefix"),
    ({"namespace": "Bad_NS"}, "namespace 'Bad_NS' must be a DNS label"),
    ({"image": "has space:1"}, "image 'has space:1' must be a container image reference"),
    ({"local": "maybe"}, "local must be true or false"),
    ({"webhookUrl": "http://127.0.0.1:9443/validate"}, "must be an https:// URL"),
    ({"pools": {"name": "a100"}}, "pools must be a list"),
    ({"pools": [{"name": "a100"}, {"name": "a100"}]}, "pool 'a100' is listed twice"),
    ({"pools": [{"name": "a100", "nodes": {"backend": "simulated", "count": 1}}]}, "simulated nodes need local: true"),
    ({"pool": []}, "unknown key(s) pool"),
    ({"eventSource": "node pool service"}, "eventSource: event source 'node pool service' must be a Kubernetes"),
    ({"kernelLogSource": "file"}, "kernelLogSource 'file' must be one of kmsg, journal"),
    ({"kernelLogSource": "dmesg"}, "kernelLogSource 'dmesg' must be one of kmsg, journal"),
    ({"nvml": {"serach": []}}, "unknown key(s) serach"),
    ({"nvml": {"search": "loader"}}, "nvml.search must be a list"),
    ({"nvml": {"search": ["usr/lib"]}}, "nvml.search must be a non-empty list of 'loader' and absolute host"),
    ({"nvml": {"search": []}}, "nvml.search must be a non-empty list"),
    ({"nvml": {"hostRoot": "host"}}, "nvml.hostRoot must be an absolute host directory"),
    ({"nvml": {"hostRoot": ""}}, "nvml.hostRoot '' mounts nothing of the host: nvml.search may then only hold"),
    ({"nvml": {"enabled": "yes"}}, "nvml.enabled must be true or false"),
    ({"nvml": {"runtimeClassName": "a b"}}, "nvml.runtimeClassName must be a RuntimeClass name"),
])
def test_bad_stack_values_are_rejected(config, message):
    with pytest.raises(PoolConfigError) as err:
        stack_config_from_dict(config)
    assert message in str(err.value)


def test_provider_per_action_and_per_pool():
    only_reset = pool_from_config({"name": "a", "provider": {"type": "hostReboot"}}).provider
    reset = only_reset.for_action("reset")
    assert reset is not None and reset.type == "hostReboot"
    assert only_reset.for_action("replace") is None and only_reset.missing() == ("replace",)
    both = pool_from_config({"name": "a", "provider": {"type": "simulated", "simulated": {"resetSeconds": 2}}})
    replace = both.provider.for_action("replace")
    assert replace is not None and replace.settings == {"resetSeconds": 2}
    split = pool_from_config({"name": "a", "provider": {
        "reset": {"type": "hostReboot"}, "replace": {"type": "clusterapi"}}}).provider
    assert split.describe() == "reset=hostReboot replace=clusterapi"
    assert split.to_dict() == {"reset": {"type": "hostReboot", "hostReboot": {"timeoutSeconds": 600}},
                               "replace": {"type": "clusterapi", "clusterapi": {
                                   "version": "v1beta2", "managementCluster": "self", "kubeconfigKey": "value"}}}
    # the written spec parses back to the same choice
    assert pool_from_config({"name": "a", "provider": split.to_dict()}).provider == split


def test_detector_condition_codes_reach_the_daemonset_and_bad_ones_are_refused() -> None:
    from autoclusters.deploy.stack import detector_daemonset

    cfg = stack_config_from_dict({"detectorConditionCodes": ["gpu:31", "gpu:13", "gpu:13"]})
    assert cfg.detector_condition_codes == ("gpu:13", "gpu:31")
    args = detector_daemonset(cfg.names, cfg.namespace, cfg.image, condition_codes=cfg.detector_condition_codes)[
        "spec"]["template"]["spec"]["containers"][0]["args"]
    at = args.index("--condition-codes")
    assert args[at:at + 2] == ["--condition-codes", "gpu:13,gpu:31"]
    plain = detector_daemonset(cfg.names, cfg.namespace, cfg.image)["spec"]["template"]["spec"]["containers"][0]
    assert "--condition-codes" not in plain["args"]
    for bad in (["13"], "gpu:13", ["disk:1"]):
        with pytest.raises(PoolConfigError, match="detectorConditionCodes"):
            stack_config_from_dict({"detectorConditionCodes": bad})
