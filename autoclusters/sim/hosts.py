"""The hosts of the local simulator: a reboot that completes in a pod reboots its kwok node.

On the local cluster kwok plays the kubelet (its pod stages take a pod from Pending to
Running to Succeeded, or to Failed for ``FAILING_IMAGE``) and, with autoclusters' node stages
(``sim/kwok-stages.yaml``), the host's boot: a node annotated ``REBOOT`` goes
NotReady and comes back Ready with a new ``bootID`` (3 s later, or at the time
``REBOOT_UNTIL`` names: the simulated provider's reset asks for a reboot of its own length
that way, ``reboot_request``). A stage sees only its own object, so
this loop connects the two, the way a real host connects them by running the command: a
pod on a kwok node whose command ends in ``reboot`` and that Succeeded marks its node. Each
pod reboots its node once (``REBOOTED_BY`` keeps the pod's uid).

Only the host's reboot is simulated: the Job, its pod's placement on a cordoned, tainted
node and the Job controller's verdict are the real Kubernetes ones.

Run by the local cluster beside kwok: ``python -m autoclusters.sim.hosts --kubeconfig PATH``.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from autoclusters.clock import utc_iso_micro
from autoclusters.kube import Kube, KubeError, NotFound, load_kube
from autoclusters.sim.nodes import is_simulated

log = logging.getLogger(__name__)

# The node and pod stages kwok plays on the local cluster (the host's boot and reboot, its
# heartbeat, a failing command); the local cluster hands them to kwok (devcluster/heartbeats.py).
KWOK_STAGES = Path(__file__).with_name("kwok-stages.yaml")

REBOOT = "sim.autoclusters.io/host-reboot"  # set here, removed by the node stage that boots the host again
REBOOT_UNTIL = "sim.autoclusters.io/host-reboot-until"  # optional: when the reboot ends (RFC 3339)
REBOOTED_BY = "sim.autoclusters.io/rebooted-by"  # the uid of the pod whose reboot was played


def boot_id_after(by: str) -> str:
    """The bootID a host comes back with from the reboot ``by`` asked for (the first 32 hex
    digits of the SHA-256 of ``by``; the up stage of ``kwok-stages.yaml`` computes the same).

    Derived from the request, not random: kwok can play a stage twice when an update of the
    node (the node lifecycle controller's not-ready taint, say) reaches it while the first play
    is under way, and a random bootID then rebooted the host twice for one request."""
    return hashlib.sha256(by.encode()).hexdigest()[:32]


def reboot_request(by: str, until: datetime) -> dict[str, str]:
    """The node annotations that make kwok's stages reboot the host, up again at ``until``
    (``by``: who asked; the stage reads the time with Go's RFC 3339 parser)."""
    return {REBOOT: by, REBOOT_UNTIL: utc_iso_micro(until)}
FAILING_IMAGE = "autoclusters.invalid/command-fails"  # kwok's pod stage fails every container of this image
# kwok's pod stage fails every container of this image with exit 127, as nsenter does for a program
# the host lacks (the host-reboot provider's "set the host reboot command" failure)
MISSING_COMMAND_IMAGE = "autoclusters.invalid/command-not-found"


def runs_reboot(pod: dict[str, Any]) -> bool:
    """A container whose command (or args) ends with the host's reboot."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        argv = [*(c.get("command") or []), *(c.get("args") or [])]
        if argv and argv[-1].split()[-1:] == ["reboot"]:
            return True
    return False


def reboots_due(pods: list[dict[str, Any]], nodes: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """(node, pod uid) for every Succeeded reboot pod on a kwok node whose reboot was not played yet."""
    due = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Succeeded" or not runs_reboot(pod):
            continue
        node = nodes.get((pod.get("spec") or {}).get("nodeName", ""))
        uid = pod["metadata"].get("uid", "")
        if node is None or not is_simulated(node):
            continue
        ann = node["metadata"].get("annotations") or {}
        if ann.get(REBOOTED_BY) != uid:
            due.append((node["metadata"]["name"], uid))
    return due


def play_once(kube: Kube) -> int:
    pods = kube.list_items("/api/v1/pods", field_selector="status.phase=Succeeded")
    if not any(runs_reboot(p) for p in pods):
        return 0
    nodes = {n["metadata"]["name"]: n for n in kube.list_nodes()}
    played = 0
    for node, uid in reboots_due(pods, nodes):
        try:
            kube.patch_node(node, {"metadata": {"annotations": {REBOOT: uid, REBOOTED_BY: uid}}})
            log.info("host of %s reboots (pod %s)", node, uid)
            played += 1
        except NotFound:
            pass
    return played


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--ready-file", type=Path, default=None, help="written once the first pass succeeded")
    ap.add_argument("--interval", type=float, default=0.5)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    kube = load_kube(args.kubeconfig, user_agent="autoclusters-sim-hosts")
    ready = False
    while True:
        try:
            play_once(kube)
            if not ready and args.ready_file is not None:
                args.ready_file.write_text("ok\n")
            ready = True
        except KubeError as e:
            log.warning("pass failed: %s", e)
        except Exception:  # the simulated hosts outlive any one bad pass, like the cluster they serve
            log.exception("pass failed")
        time.sleep(args.interval)


if __name__ == "__main__":
    raise SystemExit(main())
