"""How often the local cluster's simulated nodes tell the API server they are alive.

A kubelet renews its node's Lease (``kube-node-lease``) every quarter of the lease's
duration (40 s by default, so every 10 s) and posts its full node status only when something
changed or when ``nodeStatusReportFrequency`` (5 min by default once leases are on) has passed.
The node lifecycle controller (in kube-controller-manager) reads the Lease: a node whose Lease
is renewed stays Ready however rarely its status is posted.

The local cluster's kwok does the same with these settings: its lease controller renews every
node's Lease at a quarter of ``lease_seconds``, and the heartbeat stage of
``sim/kwok-stages.yaml`` rewrites the node's conditions every ``status_seconds`` (plus up to
a tenth of it at random, so nodes that became Ready together do not post together).
kube-controller-manager's ``--node-monitor-grace-period`` follows the lease the way the
Kubernetes defaults do (40 s lease, 50 s grace), so a node goes NotReady only when its Lease
really lapsed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoclusters.sim.hosts import KWOK_STAGES

# The kubelet's defaults (KubeletConfiguration): nodeLeaseDurationSeconds, nodeStatusReportFrequency.
KUBELET_LEASE_SECONDS = 40
KUBELET_STATUS_REPORT_SECONDS = 300
# kube-controller-manager's node-monitor-grace-period default (50 s) over the kubelet's lease (40 s).
GRACE_OVER_LEASE_SECONDS = 10
# Workers kwok renews leases with (its default is 4): one renewal is one API round trip, and
# 5,000 nodes every 10 s is 500 renewals a second, which 4 workers keep up with only while a
# round trip stays under 8 ms.
LEASE_WORKERS = 32
# Workers kwok plays node stages with (its default is 4): the heartbeat stage and the simulated
# host's reboot (down, then up with the new bootID) are one node status patch each. A real
# cluster's kubelets post their own nodes' statuses side by side; four workers instead queue a
# burst of reboots ending together behind each other (50 reboots x 2 patches at ~70 ms each on
# a busy API server is ~2 s of queue), which the benchmark then counts as the platform's time.
NODE_STAGE_WORKERS = 32

# kwok applies its option defaults only when it is given no KwokConfiguration at all: these
# are its defaults (v0.8.0), spelled out.
KWOK_DEFAULTS: dict[str, Any] = {
    "enableDebuggingHandlers": True, "enableContentionProfiling": False, "enableProfilingHandler": True,
    "podPlayStageParallelism": 4, "nodePlayStageParallelism": 4, "nodeLeaseParallelism": 4,
    "podsOnNodeSyncParallelism": 1, "enablePodsOnNodeSyncListPager": True, "enablePodsOnNodeSyncStreamWatch": False,
}

HEARTBEAT_STAGE = "autoclusters-node-heartbeat"


@dataclass(frozen=True)
class Heartbeats:
    lease_seconds: int = KUBELET_LEASE_SECONDS
    status_seconds: int = KUBELET_STATUS_REPORT_SECONDS

    def __post_init__(self) -> None:
        if self.lease_seconds < 4:
            raise ValueError(f"node lease duration must be at least 4 s (renewed every quarter), "
                             f"not {self.lease_seconds}")
        if self.status_seconds < 1:
            raise ValueError(f"node status interval must be at least 1 s, not {self.status_seconds}")

    @property
    def renew_seconds(self) -> float:
        """How often kwok renews each node's Lease (a quarter of its duration, as a kubelet)."""
        return self.lease_seconds / 4

    @property
    def grace_seconds(self) -> int:
        """kube-controller-manager's node-monitor-grace-period for this lease."""
        return self.lease_seconds + GRACE_OVER_LEASE_SECONDS

    def controller_manager_flags(self) -> list[str]:
        return [f"--node-monitor-grace-period={self.grace_seconds}s"]

    def kwok_flags(self) -> list[str]:
        return [f"--node-lease-duration-seconds={self.lease_seconds}"]

    def kwok_documents(self) -> list[dict[str, Any]]:
        """kwok's configuration: its lease and node stage workers, and the node stages with this
        status interval."""
        import yaml

        stages = [d for d in yaml.safe_load_all(KWOK_STAGES.read_text()) if d]
        heartbeat = [d for d in stages if d["metadata"]["name"] == HEARTBEAT_STAGE]
        if len(heartbeat) != 1:
            raise ValueError(f"{KWOK_STAGES} must hold exactly one stage named {HEARTBEAT_STAGE}")
        every_ms = self.status_seconds * 1000
        heartbeat[0]["spec"]["delay"] = {"durationMilliseconds": every_ms,
                                         "jitterDurationMilliseconds": every_ms + every_ms // 10}
        config = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
                  "options": {**KWOK_DEFAULTS, "nodeLeaseDurationSeconds": self.lease_seconds,
                              "nodeLeaseParallelism": LEASE_WORKERS,
                              "nodePlayStageParallelism": NODE_STAGE_WORKERS}}
        return [config, *stages]

    def write_kwok_config(self, path: Path) -> Path:
        import yaml

        path.write_text(yaml.safe_dump_all(self.kwok_documents(), sort_keys=False))
        return path
