"""examples/training/drain_ack.py: reading the downward API's annotations file and deciding
what to acknowledge, with the names the controller writes and reads (autoclusters/names.py)."""

from __future__ import annotations

import json
from types import ModuleType

import pytest

from autoclusters.names import DEFAULT_DOMAIN, Names
from tests.unit.example_module import load_example


@pytest.fixture(scope="module")
def example() -> ModuleType:
    return load_example("training/drain_ack.py", "drain_ack")


def downward_api(annotations: dict[str, str]) -> str:
    """The file as the kubelet writes it: sorted ``key="value"`` lines, the value quoted like
    Go's %q (kubernetes pkg/fieldpath/fieldpath.go), which for these values is JSON's quoting."""
    return "".join(f"{k}={json.dumps(v)}\n" for k, v in sorted(annotations.items()))


def test_the_annotations_file_reads_back_with_quotes_and_escapes(example: ModuleType) -> None:
    values = {"autoclusters.io/drain-reason": 'GPU 3 reported Xid 79 ("fallen off the bus") (remediation r-1)',
              "kubectl.kubernetes.io/last-applied-configuration": '{"kind":"Pod"}\n',
              "empty": ""}
    assert example.parse_annotations(downward_api(values)) == values


@pytest.mark.parametrize("domain", [DEFAULT_DOMAIN, "crusoe.ai"])
def test_it_acknowledges_the_warning_once_under_the_controllers_names(example: ModuleType, domain: str) -> None:
    names = Names(domain=domain)
    warned = {names.remediation: "a100-0-1f2e3d4c", names.drain_deadline: "2026-12-02T04:00:00Z"}
    assert example.to_acknowledge(warned, domain) == "a100-0-1f2e3d4c"
    assert example.to_acknowledge({**warned, names.pod_drain_ack: "a100-0-1f2e3d4c"}, domain) == ""
    # An ack left over from an earlier repair is answered again, for the new record.
    assert example.to_acknowledge({**warned, names.pod_drain_ack: "a100-0-older"}, domain) == "a100-0-1f2e3d4c"
    assert example.to_acknowledge({names.drain_deadline: "2026-12-02T04:00:00Z"}, domain) == ""
    assert example.to_acknowledge(warned, "other.example") == ""  # another installation's warning


def test_its_default_domain_is_the_installations(example: ModuleType) -> None:
    assert example.DEFAULT_DOMAIN == DEFAULT_DOMAIN
