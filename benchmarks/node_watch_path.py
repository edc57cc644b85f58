"""CPU of one node watch event in the controller, without a cluster: heartbeats (a node's status
posted again with new condition times, nothing else changed) replayed through the controller's
own code, the watch stream's reading (``Kube.watch``), the informer (``Informer._apply``) and the
fleet's callback (``Fleet._on_node``: the heartbeat filter).

    python benchmarks/node_watch_path.py [--node node.json] [--nodes 1000] [--rounds 5]

``--node`` is a node as the API server sends it (``kubectl get node NAME -o json``, managed
fields included); by default a simulated GPU node with the status and managed fields a kwok
node of ``autoclusters dev up`` carries. Prints microseconds of CPU per event for each stage
(each one inclusive of those before it), the best of ``--rounds``.
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Iterator
from typing import Any

import orjson

from autoclusters.controller.cache import Fleet
from autoclusters.faults.catalog import load_catalog
from autoclusters.kube.client import Kube
from autoclusters.kube.informer import Informer
from autoclusters.names import Names
from autoclusters.sim import nodes as sim

JSON = dict[str, Any]


def kwok_node(name: str, names: Names) -> JSON:
    """A simulated GPU node with what kwok and the control plane add to it (status, managed fields)."""
    node = sim.gpu_node_manifest(name, "bench", names)
    meta = node["metadata"]
    meta.update(uid="0f5c1d3e-6b0a-4c59-9d3e-1b2f3a4b5c6d", resourceVersion="1000",
                creationTimestamp="2026-11-30T19:00:00Z")
    meta["labels"].update({"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux"})
    t = "2026-11-30T19:00:05Z"
    conds = [{"type": c, "status": "False", "reason": f"Kubelet Has No {c}", "message": f"kubelet has no {c}",
              "lastHeartbeatTime": t, "lastTransitionTime": t}
             for c in ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")]
    conds.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                  "message": "kubelet is posting ready status", "lastHeartbeatTime": t, "lastTransitionTime": t})
    node["status"].update(conditions=conds, phase="Running",
                          addresses=[{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname",
                                                                                      "address": name}],
                          daemonEndpoints={"kubeletEndpoint": {"Port": 10250}})
    node["status"]["nodeInfo"].update(machineID="", kernelVersion="", osImage="", containerRuntimeVersion="",
                                      kubeProxyVersion="fake", systemUUID="")
    status_fields = {"f:conditions": {f'k:{{"type":"{c["type"]}"}}': {
        ".": {}, "f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {},
        "f:status": {}, "f:type": {}} for c in conds}, "f:addresses": {}, "f:allocatable": {}, "f:capacity": {},
        "f:daemonEndpoints": {"f:kubeletEndpoint": {"f:Port": {}}}, "f:nodeInfo": {"f:bootID": {}},
        "f:phase": {}}
    meta["managedFields"] = [
        {"manager": "autoclusters", "operation": "Update", "apiVersion": "v1", "time": t, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kwok.x-k8s.io/node": {}},
                                     "f:labels": {".": {}, **{f"f:{k}": {} for k in meta["labels"]}}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": t,
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {
             "f:node.alpha.kubernetes.io/ttl": {}}}}},
        {"manager": "kwok", "operation": "Update", "apiVersion": "v1", "time": t, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:status": status_fields}, "subresource": "status"},
    ]
    return node


def heartbeat(node: JSON, rv: int, at: str) -> JSON:
    beat = copy.deepcopy(node)
    beat["metadata"]["resourceVersion"] = str(rv)
    for c in beat["status"]["conditions"]:
        c["lastHeartbeatTime"] = at
    for m in beat["metadata"].get("managedFields") or []:
        if m.get("subresource") == "status":
            m["time"] = at
    return beat


class _Body:
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def stream(self, amt: int = 65536, decode_content: bool = True) -> Iterator[bytes]:
        yield from self._chunks

    def release_conn(self) -> None:
        pass


class _Replay:
    """The transport ``Kube`` takes, answering every request with the same watch stream."""

    takes_stream = True

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.user_agent = ""
        self.configuration = type("Cfg", (), {"host": "https://replay"})()

    def param_serialize(self, **kw: Any) -> tuple[str, str, dict[str, str], None, None]:
        return kw["method"], kw["resource_path"], {}, None, None

    def call_api(self, *a: Any, **kw: Any) -> Any:
        resp = type("Resp", (), {})()
        resp.status, resp.response = 200, _Body(self.chunks)
        return resp


def cpu(fn: Any, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--node", default="", help="a node's JSON as the API server sends it")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    names = Names()
    if args.node:
        with open(args.node, "rb") as f:
            base = orjson.loads(f.read())
    else:
        base = kwok_node("n", names)
    nodes = []
    for i in range(args.nodes):
        n = copy.deepcopy(base)
        n["metadata"]["name"] = f"node-{i}"
        nodes.append(n)
    beats = [heartbeat(n, 2000 + i, "2026-11-30T19:05:05Z") for i, n in enumerate(nodes)]
    lines = [orjson.dumps({"type": "MODIFIED", "object": b}) + b"\n" for b in beats]
    print(f"{len(lines)} heartbeat events of {sum(map(len, lines)) // len(lines)} bytes "
          f"(managed fields {len(orjson.dumps(base['metadata'].get('managedFields') or []))} bytes of each)")
    kube = Kube(_Replay(lines))

    fleet = Fleet(kube, names, load_catalog(), lambda key: None)

    def decode() -> None:
        for line in lines:
            orjson.loads(line)

    def stream() -> None:
        for _ in kube.watch("/api/v1/nodes", resource_version="1"):
            pass

    stages = [("orjson.loads of the event", decode), ("+ Kube.watch (read, split, decode)", stream)]
    per = len(lines)
    for label, fn in stages:
        print(f"  {cpu(fn, args.rounds) / per * 1e6:7.1f} µs  {label}")
    best = float("inf")
    for _ in range(args.rounds):
        informer = Informer(kube, "/api/v1/nodes", fleet._on_node, name="nodes")
        fleet.node_informer = informer
        fleet.node_index._prints.clear()
        for n in nodes:  # the versions before the heartbeats, as the list left them
            informer._apply({"type": "ADDED", "object": n})
        t = time.thread_time()
        for event in kube.watch("/api/v1/nodes", resource_version="1"):
            informer._apply(event)
        best = min(best, time.thread_time() - t)
    print(f"  {best / per * 1e6:7.1f} µs  + Informer._apply and Fleet._on_node (the heartbeat filter)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
