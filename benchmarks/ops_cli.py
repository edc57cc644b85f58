"""Cost of the operator commands on a large fleet: wall time and API requests.

Stages, under a private domain so nothing else reacts to them: N GPU nodes (plain Node
objects, not kwok-managed, so the API server is not also busy with heartbeats), F of them
with a fault condition and the required label, a GpuNodePool, and R Remediation records
(written with the controller's own serializer). Then it times ``take_snapshot`` (what
``status`` does), ``list_repairs`` (``history``), ``history NODE`` and ``approve_pool``
over the F due nodes, each a few times, plus the ``autoclusters`` processes end to end.

    python benchmarks/ops_cli.py --kubeconfig "$(autoclusters dev kubeconfig --name ops)" \
        --nodes 5000 --faulty 250 --records 1000
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from autoclusters import api
from autoclusters.api import ConsentMode, Phase, RepairAction
from autoclusters.clock import SystemClock, utc_iso
from autoclusters.controller import remediation_record
from autoclusters.controller.statemachine import Fault, RepairState, TimelineStep
from autoclusters.deploy.crds import crds
from autoclusters.kube import Kube, load_kube
from autoclusters.names import Names
from autoclusters.ops.approval import approve_pool
from autoclusters.ops.history import HistoryQuery, list_repairs
from autoclusters.ops.resources import remediations_path
from autoclusters.ops.snapshot import take_snapshot
from autoclusters.pools.pool_config import gpu_node_pool_object, pool_from_config
from autoclusters.sim.nodes import gpu_node_manifest


def _node(kube: Kube, names: Names, name: str, pool: str, faulty: bool) -> None:
    manifest = gpu_node_manifest(name, pool, names)
    manifest["metadata"]["annotations"] = {}  # not kwok-managed: no heartbeat load during the measurement
    if faulty:
        manifest["metadata"]["labels"][names.maintenance_required] = "true"
    kube.create("/api/v1/nodes", manifest)
    if faulty:
        now = utc_iso(datetime.now(UTC))
        kube.patch_node_status(name, {"status": {"conditions": [
            {"type": names.gpu_condition, "status": "True", "reason": "NvidiaXIDError",
             "message": "GPU 3 reported Xid 79 (GPU has fallen off the bus).", "lastTransitionTime": now,
             "lastHeartbeatTime": now}]}})


def _record(kube: Kube, names: Names, i: int, node: str, pool: str, open_: bool) -> None:
    start = datetime.now(UTC) - timedelta(hours=i % 2000)
    phases = [Phase.AWAITING_APPROVAL] if open_ else [Phase.SCHEDULED, Phase.DRAINING, Phase.ACTING,
                                                       Phase.VERIFYING, Phase.SUCCEEDED]
    steps = tuple(TimelineStep(p.value, start + timedelta(seconds=30 * k), f"entered {p.value}")
                  for k, p in enumerate(phases))
    state = RepairState(name=f"{node}-{i:05d}", node=node, pool=pool, consent_mode=ConsentMode.PROPOSE,
                        fault=Fault("gpu", "79", "NvidiaXIDError", "GPU 3 reported Xid 79."), phase=phases[-1],
                        action=RepairAction.RESET, created=start, steps=steps,
                        outcome="" if open_ else "Succeeded", completed=None if open_ else steps[-1].time)
    kube.create(remediations_path(names), remediation_record.new_record(state, names))
    kube.patch(remediations_path(names, state.name) + "/status", {"status": remediation_record.status_of(state)})


def _timed(fn: Any, kube: Kube, repeat: int) -> dict[str, Any]:
    times, reqs = [], []
    for _ in range(repeat):
        before = kube.requests.total
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        reqs.append(kube.requests.total - before)
    return {"median_s": round(statistics.median(times), 3), "max_s": round(max(times), 3), "requests": reqs[-1]}


def _process(kubeconfig: str, names: Names, *args: str) -> float:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", "import sys; from autoclusters.cli.main import main; "
                          "sys.exit(main())", *args, "--kubeconfig", kubeconfig, "--domain", names.domain,
                          "--condition-prefix", names.prefix, "-o", "json"],
                         capture_output=True, text=True, check=False)
    took = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{args} exited {res.returncode}: {res.stderr}")
    return round(took, 3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--faulty", type=int, default=250)
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=16)
    args = ap.parse_args()

    kube = load_kube(args.kubeconfig, user_agent="autoclusters-bench", qps_pool=args.threads * 2)
    suffix = secrets.token_hex(3)
    names = Names(domain=f"bench{suffix}.example.com", prefix="Bench")
    pool = f"bench-{suffix}"
    node_names = [f"{pool}-{i:05d}" for i in range(args.nodes)]
    out: dict[str, Any] = {"nodes": args.nodes, "faulty": args.faulty, "records": args.records}
    crd_objs = crds(names)
    try:
        for obj in crd_objs:
            kube.apply(obj, field_manager="bench")
        time.sleep(3)  # CRDs established
        kube.create(Kube.custom_path(names.api_group, api.VERSION, "gpunodepools"),
                    gpu_node_pool_object(pool_from_config({"name": pool, "consentMode": "propose"}), names))
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.threads) as ex:
            list(ex.map(lambda i: _node(kube, names, node_names[i], pool, i < args.faulty), range(args.nodes)))
            list(ex.map(lambda i: _record(kube, names, i, node_names[i % args.nodes], pool, i < args.faulty),
                        range(args.records)))
        out["staging_s"] = round(time.perf_counter() - t0, 1)
        print(f"staged in {out['staging_s']}s", file=sys.stderr)

        clock = SystemClock()
        out["status"] = _timed(lambda: take_snapshot(kube, names, clock), kube, args.repeat)
        out["history"] = _timed(lambda: list_repairs(kube, names, HistoryQuery()), kube, args.repeat)
        out["history_node"] = _timed(lambda: list_repairs(kube, names, HistoryQuery(node=node_names[0])), kube,
                                     args.repeat)
        out["approve_pool_dry_run"] = _timed(lambda: approve_pool(kube, names, pool, dry_run=True), kube, 1)
        out["approve_pool"] = _timed(lambda: approve_pool(kube, names, pool), kube, 1)
        out["approve_pool_again"] = _timed(lambda: approve_pool(kube, names, pool), kube, 1)
        out["process"] = {"status": _process(args.kubeconfig, names, "status"),
                          "history": _process(args.kubeconfig, names, "history"),
                          "help_only": _process(args.kubeconfig, names, "history", "--since", "1s")}
        snap = take_snapshot(kube, names, clock)
        assert len(snap.faulty) == args.faulty, (len(snap.faulty), args.faulty)
    finally:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.threads) as ex:
            list(ex.map(lambda n: kube.delete(f"/api/v1/nodes/{n}"), node_names))
        for obj in crd_objs:
            kube.delete_object(obj)
        print(f"cleaned up in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    out["cpu_count"] = os.cpu_count()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
