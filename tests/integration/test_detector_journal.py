"""The node agent with the journald kernel log source, on the real API server: a driver line the
kernel logged into a real journal file (this boot's id, the kernel's transport) becomes the node's
fault condition; the same text logged from user space (``logger -t kernel``) does not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from autoclusters.api import KernelLogSource
from autoclusters.clock import SystemClock
from autoclusters.detector.agent_config import AgentConfig
from autoclusters.detector.journal import current_boot_id
from autoclusters.detector.node import NodePaths, build_agent
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.faults.catalog import load_catalog
from tests.integration.helpers import agent_writes_true_condition
from tests.journal_files import MACHINE, entry, write_journal

MIG_XID = "NVRM: Xid (PCI:0000:01:00 GPU-I:05): {code}, pid=7194, name=python3, GPU has fallen off the bus."


@pytest.fixture()
def node(cluster: ClusterHandle, unique: str) -> Iterator[str]:
    (name,) = cluster.create_gpu_nodes(f"detjournal-{unique}", 1, prefix=f"detjournal-{unique}")
    yield name
    cluster.kube.delete(f"/api/v1/nodes/{name}")


def test_a_kernel_entry_in_the_journal_becomes_the_nodes_condition(cluster: ClusterHandle, node: str,
                                                                   tmp_path: Path) -> None:
    names = cluster.names
    boot = current_boot_id()  # the agent reads the journal of the boot it runs in
    journal = tmp_path / "host/var/log/journal" / MACHINE
    # A user-space line dressed as the kernel's comes first: were it counted, the Xid 74 on the
    # same GPU, seen a poll earlier, would be the fault the condition names (the same repair
    # action as 79; the older fault first).
    write_journal(journal / "system.journal", [entry(1, MIG_XID.format(code=74), transport="syslog", boot=boot)])
    paths = NodePaths(kernel_log_source=KernelLogSource.JOURNAL, journal_root=str(tmp_path / "host"),
                      infiniband=str(tmp_path / "no-ib"), nvidia_proc=str(tmp_path / "no-proc"),
                      dcgm_command=("no-such-dcgmi",), use_nvml=False, gpu_map={"0000:01:00": 2})
    config = AgentConfig(window_s=1.0, poll_s=0.2, snapshot_poll_s=0.2)
    agent, writer, _ = build_agent(node, cluster.kube, SystemClock(), load_catalog(), names, config, paths)
    agent.poll()
    # journald rotates (the active file becomes an archive) and logs the kernel's line in the new one
    (journal / "system.journal").rename(journal / f"system@{MACHINE}-0000000000000001-0006440000000000.journal")
    write_journal(journal / "system.journal", [entry(2, MIG_XID.format(code=79), boot=boot)])

    cond = agent_writes_true_condition(cluster, agent, writer, node, names.gpu_condition)
    assert cond["message"] == "GPU 2 reported Xid 79 (GPU has fallen off the bus)."
    assert writer.failures == 0
