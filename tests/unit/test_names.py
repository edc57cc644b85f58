import pytest

from autoclusters.names import NameError_, Names


def test_defaults_follow_the_contract() -> None:
    n = Names()
    assert n.pool_label == "autoclusters.io/nodepool.name"
    assert n.maintenance_required == "autoclusters.io/maintenance-required"
    assert n.maintenance_approved == "autoclusters.io/maintenance-approved"
    assert n.taint_key == n.maintenance_required
    assert n.gpu_condition == "AutoClustersGPUFault"
    assert n.interconnect_condition == "AutoClustersInterconnectFault"
    assert n.auto_replacement_label == "autoclusters.io/auto-replacement"


def test_reference_compatible_names() -> None:
    n = Names(domain="crusoe.ai", prefix="Crusoe")
    assert n.maintenance_required == "crusoe.ai/maintenance-required"
    assert n.maintenance_approved == "crusoe.ai/maintenance-approved"
    assert n.gpu_condition == "CrusoeGPUFault"
    assert n.pool_label == "crusoe.ai/nodepool.name"


@pytest.mark.parametrize("domain", ["", "nodots", "UPPER.io", "-bad.io", "a..b", "x" * 250 + ".io"])
def test_bad_domain_is_rejected(domain: str) -> None:
    with pytest.raises(NameError_, match="invalid domain"):
        Names(domain=domain)


@pytest.mark.parametrize("prefix", ["", "lower", "With Space", "Bad-Dash"])
def test_bad_prefix_is_rejected(prefix: str) -> None:
    with pytest.raises(NameError_, match="invalid condition prefix"):
        Names(prefix=prefix)


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOCLUSTERS_DOMAIN", "example.com")
    monkeypatch.setenv("AUTOCLUSTERS_CONDITION_PREFIX", "Example")
    n = Names.from_env()
    assert n.gpu_condition == "ExampleGPUFault"
    assert n.api_group == "remediation.example.com"


def test_operations_doc_names_the_event_source_that_matches_the_reference() -> None:
    from pathlib import Path

    from autoclusters.controller.controller_config import ControllerConfig
    from autoclusters.names import REFERENCE_EVENT_SOURCE

    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    assert f"--event-source {REFERENCE_EVENT_SOURCE}" in doc
    assert f"autoclusters:eventSource {REFERENCE_EVENT_SOURCE}" in doc
    assert f"defaults to `{ControllerConfig().event_source}`" in doc


@pytest.mark.parametrize("names", [Names(), Names("crusoe.ai", "Crusoe")], ids=["default", "reference"])
def test_only_fault_conditions_start_with_the_prefix(names: Names) -> None:
    """A script that reads every condition under the prefix as a fault must not misread the
    detector's own health condition."""
    import re

    from autoclusters.deploy.detector import node_self_write_policy

    # every condition type the detector may write, as its admission policy lists them
    text = str(node_self_write_policy(names)["spec"]["validations"])
    written = set(re.findall(r"'([A-Za-z]+(?:Fault|Degraded))'", text))
    assert names.detector_health_condition in written and len(written) == 3
    assert {c for c in written if c.startswith(names.prefix)} == set(names.fault_conditions)
    assert not names.detector_health_condition.startswith(("AutoClusters", "Crusoe"))
