"""One repair on the local cluster's real nodes, timed, with the pods' own CPU and memory
(docs/benchmarks/real-nodes.md).

    .venv/bin/python benchmarks/real_nodes.py [--window 3] [--burst 20000] [--idle-seconds 30]

Starts a local cluster of its own with two real nodes (devcluster/realnodes.py), deploys the
stack onto them with the Automation API (local off, the built image, the hostReboot provider),
then:
1. samples the detector and controller pods' cgroups while idle;
2. writes a burst of ordinary kernel lines into node 0's own kernel log, ended by a
   warning-severity Xid 13, and samples the detector pod until its Warning event for that line
   shows it has read them all;
3. writes the driver's Xid 79 line there, and times: written -> labelled, -> cordoned,
   cordoned -> drained (no pod of the node left but the DaemonSet's), -> Succeeded; the
   controller pods are sampled over the repair.

CPU is ``cpuacct.usage`` (nanoseconds of CPU) over wall time; memory is the cgroup's
``memory.usage_in_bytes`` minus its page cache (``total_cache``), i.e. what the pod itself holds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autoclusters import api  # noqa: E402
from autoclusters.devcluster import pulumi_env  # noqa: E402
from autoclusters.devcluster.cluster import LocalCluster  # noqa: E402
from autoclusters.devcluster.handle import ClusterHandle  # noqa: E402
from autoclusters.devcluster.node_init import REBOOT_VERB  # noqa: E402
from autoclusters.devcluster.realnodes import CGROUP_ROOT, RealNode  # noqa: E402
from autoclusters.kube import Kube  # noqa: E402
from autoclusters.names import Names  # noqa: E402

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=python, GPU has fallen off the bus."
XID13 = "NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1)"
ORDINARY = "6,{seq},{usec},-;e1000e 0000:00:1f.6 eth0: NIC Link is Up 1000 Mbps Full Duplex, Flow Control: None"


def pod_cgroup(node: RealNode, uid: str, controller: str) -> Path:
    """The pod's cgroup directory under the node's cgroup root (kubepods/<qos>/pod<uid>)."""
    base = CGROUP_ROOT / controller / node.cgroup_root.lstrip("/")
    for d in base.rglob(f"pod{uid}"):
        return d
    raise FileNotFoundError(f"no cgroup of pod {uid} under {base}")


class Sampler:
    def __init__(self, node: RealNode, uid: str) -> None:
        self.cpu = pod_cgroup(node, uid, "cpuacct") / "cpuacct.usage"
        self.mem = pod_cgroup(node, uid, "memory")

    def cpu_ns(self) -> int:
        return int(self.cpu.read_text())

    def memory(self) -> int:
        usage = int((self.mem / "memory.usage_in_bytes").read_text())
        stat = dict(line.split() for line in (self.mem / "memory.stat").read_text().splitlines())
        return usage - int(stat.get("total_cache", 0))


def measure(samplers: list[Sampler], seconds: float) -> dict[str, float]:
    """CPU as a share of one core over ``seconds``, and the highest memory seen (MiB)."""
    start = [s.cpu_ns() for s in samplers]
    t0, peak = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        peak = max(peak, max(s.memory() for s in samplers))
        time.sleep(0.5)
    took = time.monotonic() - t0
    used = max(s.cpu_ns() - a for s, a in zip(samplers, start, strict=True))
    return {"cpu_percent_of_a_core": round(100 * used / 1e9 / took, 2), "memory_mib": round(peak / 2**20, 1)}


def wait(what: str, check: Any, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)
    return time.monotonic()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=int, default=3, help="the detectors' persistence window (detector.windowSeconds)")
    ap.add_argument("--burst", type=int, default=20000, help="ordinary kernel lines in the parsing burst")
    ap.add_argument("--idle-seconds", type=float, default=30)
    args = ap.parse_args()
    names = Names()
    cluster = LocalCluster(f"bench-real-{int(time.time())}")
    cluster.up(progress=lambda m: print(f"[cluster] {m}", file=sys.stderr), real_nodes=2)
    out: dict[str, Any] = {}
    try:
        handle = ClusterHandle(str(cluster.kubeconfig), local=True, state_dir=cluster.dir)
        kube = handle.kube
        nodes = cluster.real_nodes()
        for n in nodes:
            kube.patch_node(n.name, {"metadata": {"labels": {names.pool_label: "bench"}}})
        ns = "acbench"
        config = {"autoclusters:local": False, "autoclusters:namespace": ns,
                  "autoclusters:hostRebootCommand": REBOOT_VERB,
                  "autoclusters:detector": {"windowSeconds": args.window},
                  "autoclusters:pools": [{"name": "bench", "consentMode": "auto",
                                          "drain": {"resetDeadlineSeconds": 20},
                                          "provider": {"type": "hostReboot", "hostReboot": {"timeoutSeconds": 180}}}]}
        tmp = Path(tempfile.mkdtemp(prefix="bench-real-"))
        stack = pulumi_env.stack("bench", tmp / "work", tmp / "state", config, kubeconfig=str(cluster.kubeconfig))
        t0 = time.monotonic()
        stack.up(on_output=lambda _: None)
        out["pulumi_up_seconds"] = round(time.monotonic() - t0, 1)

        def pods(label: str, node: str | None = None) -> list[dict[str, Any]]:
            found = kube.list_items(f"/api/v1/namespaces/{ns}/pods", label_selector=f"app.kubernetes.io/name={label}")
            return [p for p in found if p["status"].get("phase") == "Running" and (node is None or
                                                                                   p["spec"]["nodeName"] == node)]

        wait("the pods", lambda: len(pods("autoclusters-detector")) == 2 and len(pods("autoclusters-controller")) == 2,
             120)
        out["all_pods_running_seconds"] = round(time.monotonic() - t0, 1)
        target = nodes[0]
        by_name = {n.name: n for n in nodes}
        detector = Sampler(target, pods("autoclusters-detector", target.name)[0]["metadata"]["uid"])
        controllers = [Sampler(by_name[p["spec"]["nodeName"]], p["metadata"]["uid"])
                       for p in pods("autoclusters-controller")]
        time.sleep(5)  # past the start-up
        out["detector_idle"] = measure([detector], args.idle_seconds)
        out["controller_idle"] = measure(controllers, args.idle_seconds)
        # the burst ends with a warning-severity Xid (13): the detector's Warning event for it says
        # it has read every line before it
        cpu0, burst_start, peak = detector.cpu_ns(), time.monotonic(), 0
        with open(target.kmsg, "a") as f:
            for i in range(args.burst):
                f.write(ORDINARY.format(seq=10000 + i, usec=i) + "\n")
            f.write(f"4,{10000 + args.burst},{args.burst},-;{XID13}\n")

        def warned() -> bool:
            nonlocal peak
            peak = max(peak, detector.memory())
            events = kube.list_items("/api/v1/namespaces/default/events",
                                     field_selector=f"involvedObject.name={target.name}")
            return any("Xid 13" in (e.get("message") or "") for e in events)

        read_all = wait("the burst read", warned, 600) - burst_start
        out["detector_burst"] = {"lines": args.burst + 1, "seconds_to_read": round(read_all, 1),
                                 "lines_per_second": round((args.burst + 1) / read_all),
                                 "cpu_percent_of_a_core": round(100 * (detector.cpu_ns() - cpu0) / 1e9 / read_all, 2),
                                 "memory_mib": round(peak / 2**20, 1)}

        def node() -> dict[str, Any]:
            return kube.get_node(target.name)

        before = node()["status"]["nodeInfo"]["bootID"]
        written = time.monotonic()
        target.write_kernel_log(f"4,1,{int(written * 1e6)},-;{XID79}")
        # the controller pod on the other node: it stays through the repair (the one on the repaired
        # node is evicted with the drain), and leads from the drain on if it did not already
        survivor = next(Sampler(by_name[p["spec"]["nodeName"]], p["metadata"]["uid"])
                        for p in pods("autoclusters-controller") if p["spec"]["nodeName"] != target.name)
        survivor_start = survivor.cpu_ns()
        labelled = wait("labelled", lambda: (node()["metadata"].get("labels") or {}).get(
            names.maintenance_required) == "true", 120)
        cordoned = wait("cordoned", lambda: bool(node()["spec"].get("unschedulable")), 120)

        def drained() -> bool:
            left = [p for p in kube.list_items("/api/v1/pods", field_selector=f"spec.nodeName={target.name}")
                    if not any(r.get("kind") == "DaemonSet" for r in p["metadata"].get("ownerReferences") or [])
                    and not p["metadata"].get("labels", {}).get("app.kubernetes.io/name", "").startswith(
                        "autoclusters-host-reboot")]
            return not left

        drained_at = wait("drained", drained, 120)
        path = Kube.custom_path(names.api_group, api.VERSION, "remediations")

        def succeeded() -> bool:
            recs = [r for r in kube.list_items(path) if r["spec"]["node"] == target.name]
            return bool(recs) and recs[-1].get("status", {}).get("phase") == "Succeeded"

        done = wait("succeeded", succeeded, 300)
        cpu = survivor.cpu_ns() - survivor_start
        out["repair_seconds"] = {"written_to_labelled": round(labelled - written, 1),
                                 "written_to_cordoned": round(cordoned - written, 1),
                                 "cordoned_to_drained": round(drained_at - cordoned, 1),
                                 "drained_to_succeeded": round(done - drained_at, 1),
                                 "total": round(done - written, 1), "detector_window": args.window}
        out["controller_on_the_other_node_during_repair"] = {
            "cpu_percent_of_a_core": round(100 * cpu / 1e9 / (done - written), 2),
            "memory_mib": round(survivor.memory() / 2**20, 1)}
        out["boot_id_changed"] = node()["status"]["nodeInfo"]["bootID"] != before
        stack.destroy(on_output=lambda _: None)
    finally:
        print(json.dumps(out, indent=2))
        cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
