"""The stack registers the node cleanup with what its delete needs (the namespace, the names, the kubeconfig)."""

from autoclusters.deploy.stack_config import stack_config_from_dict
from components._recording import DYNAMIC, RecordingMocks, record
from components.autoclusters import AutoClusters, AutoClustersArgs
from components.node_cleanup import DEFAULT_WAIT_SECONDS
from tests.unit.components.test_components import IMAGE, issue


def test_the_stack_registers_one_node_cleanup_for_its_namespace_and_names() -> None:
    cfg = stack_config_from_dict({"local": True, "namespace": "ns1", "image": IMAGE, "domain": "crusoe.ai",
                                  "conditionPrefix": "Crusoe", "webhookUrl": "https://127.0.0.1:9443/validate",
                                  "pools": [{"name": "h100"}]})
    mocks = record(lambda: AutoClusters("ac", AutoClustersArgs(config=cfg, kubeconfig="/k")), RecordingMocks(issue))
    cleanups = [r.inputs for r in mocks.of_type(DYNAMIC) if "wait_seconds" in r.inputs]
    assert [{k: c[k] for k in ("namespace", "domain", "prefix", "kubeconfig", "wait_seconds")} for c in cleanups] == [
        {"namespace": "ns1", "domain": "crusoe.ai", "prefix": "Crusoe", "kubeconfig": "/k",
         "wait_seconds": DEFAULT_WAIT_SECONDS}]
