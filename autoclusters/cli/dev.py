"""``autoclusters dev up|down|kubeconfig|status``: the local cluster."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from autoclusters.cli._output import add_output_flag, print_json, print_table
from autoclusters.devcluster.heartbeats import KUBELET_LEASE_SECONDS, KUBELET_STATUS_REPORT_SECONDS
from autoclusters.names import DEFAULT_DOMAIN, DEFAULT_PREFIX


def register(sub: Any) -> None:
    dev = sub.add_parser("dev", help="run a real local control plane with simulated GPU nodes")
    dsub = dev.add_subparsers(dest="dev_command", metavar="ACTION", required=True)

    up = dsub.add_parser("up", help="start the local cluster (etcd, apiserver, controller-manager, "
                                    "scheduler, kwok, OPA) and create GPU node pools")
    _name(up)
    up.add_argument("--pool", action="append", default=[], metavar="NAME",
                    help="create a pool of simulated 8x A100 nodes with this name (repeatable)")
    up.add_argument("--nodes", type=int, default=2, metavar="N", help="nodes per pool (default 2)")
    up.add_argument("--domain", default=None,
                    help=f"label domain of the pools' nodes (default: $AUTOCLUSTERS_DOMAIN or {DEFAULT_DOMAIN})")
    up.add_argument("--condition-prefix", default=None,
                    help=f"condition prefix (default: $AUTOCLUSTERS_CONDITION_PREFIX or {DEFAULT_PREFIX})")
    up.add_argument("--slurm", action="store_true",
                    help="also run real Slurm (munged, slurmctld, one slurmd per GPU node, same names) "
                         "from the distribution's packages; install them with `make slurm`")
    up.add_argument("--karpenter", action="store_true",
                    help="also run Karpenter with its kwok cloud provider (built by tools/build-tools.sh karpenter)")
    up.add_argument("--node-status-seconds", type=int, default=KUBELET_STATUS_REPORT_SECONDS, metavar="N",
                    help="how often a simulated node posts its status when nothing changed (default "
                         f"{KUBELET_STATUS_REPORT_SECONDS}, a kubelet's nodeStatusReportFrequency)")
    up.add_argument("--node-lease-seconds", type=int, default=KUBELET_LEASE_SECONDS, metavar="N",
                    help="duration of a simulated node's Lease, renewed every quarter of it (default "
                         f"{KUBELET_LEASE_SECONDS}, a kubelet's nodeLeaseDurationSeconds); the "
                         "controller-manager's node-monitor-grace-period follows it")
    up.add_argument("--real-nodes", type=int, default=0, metavar="N",
                    help="also boot N real nodes (kubelet, containerd, kube-proxy, each in namespaces of its "
                         "own) where pods really run; needs root, `make real-nodes` and `make tools` "
                         "(docs/real-nodes.md). Default 0")
    up.set_defaults(func=_up)

    down = dsub.add_parser("down", help="stop the local cluster and remove its state")
    _name(down)
    down.set_defaults(func=_down)

    kc = dsub.add_parser("kubeconfig", help="print the path of the local cluster's admin kubeconfig")
    _name(kc)
    kc.set_defaults(func=_kubeconfig)

    st = dsub.add_parser("status", help="show the local cluster's components")
    _name(st)
    add_output_flag(st)
    st.set_defaults(func=_status)


def _name(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default="dev", help="cluster name (default: dev)")


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _up(args: argparse.Namespace) -> int:
    from autoclusters.cli._cluster import names_from_args
    from autoclusters.cli.exit_codes import EXIT_FAILED, CliError
    from autoclusters.devcluster.cluster import LocalCluster
    from autoclusters.devcluster.handle import ClusterHandle
    from autoclusters.devcluster.heartbeats import Heartbeats
    from autoclusters.devcluster.processes import StartError
    from autoclusters.devcluster.realnodes import MAX_REAL_NODES
    from autoclusters.devcluster.slurm import SlurmMissing, SlurmSettings
    from autoclusters.devcluster.tools import ToolsMissing

    if args.nodes < 1 or args.nodes > 10000:
        raise CliError("--nodes must be between 1 and 10000", 2)
    if not 0 <= args.real_nodes <= MAX_REAL_NODES:
        raise CliError(f"--real-nodes must be between 0 and {MAX_REAL_NODES}", 2)
    try:
        heartbeats = Heartbeats(lease_seconds=args.node_lease_seconds, status_seconds=args.node_status_seconds)
    except ValueError as e:
        raise CliError(str(e), 2) from e
    names = names_from_args(args)
    cluster = LocalCluster(args.name)
    try:
        cluster.up(progress=_progress, heartbeats=heartbeats, real_nodes=args.real_nodes)
        if args.karpenter:
            cluster.start_karpenter(progress=_progress)
    except (ToolsMissing, StartError) as e:
        raise CliError(str(e), EXIT_FAILED) from e
    slurm_nodes: list[str] = []
    if args.pool:
        handle = ClusterHandle(str(cluster.kubeconfig), local=True, opa_url=cluster.opa_url, state_dir=cluster.dir,
                               names=names)
        for pool in args.pool:
            _progress(f"creating pool {pool!r}: {args.nodes} simulated 8x A100 nodes "
                      f"(label {names.pool_label}={pool})")
            nodes = handle.create_gpu_nodes(pool, args.nodes, prefix=pool)
            _progress(f"  Ready: {', '.join(nodes)}")
            slurm_nodes += nodes
    if args.slurm:
        if not slurm_nodes:
            raise CliError("--slurm needs at least one --pool (Slurm nodes mirror the pools' GPU nodes)", 2)
        try:
            slurm = cluster.start_slurm(SlurmSettings(nodes=tuple(slurm_nodes)), progress=_progress)
        except (SlurmMissing, StartError) as e:
            raise CliError(str(e), EXIT_FAILED) from e
        _progress(f"Slurm clients: export SLURM_CONF={slurm.conf}")
    print(cluster.kubeconfig)
    return 0


def _down(args: argparse.Namespace) -> int:
    from autoclusters.devcluster.cluster import LocalCluster

    cluster = LocalCluster(args.name)
    if not cluster.down(progress=_progress):
        _progress(f"cluster {args.name!r} is not running")
    else:
        _progress(f"cluster {args.name!r} stopped and removed")
    return 0


def _kubeconfig(args: argparse.Namespace) -> int:
    from autoclusters.cli.exit_codes import CliError
    from autoclusters.devcluster.cluster import LocalCluster

    cluster = LocalCluster(args.name)
    if not cluster.is_running():
        raise CliError(f"cluster {args.name!r} is not running; start it with: autoclusters dev up --name {args.name}")
    print(cluster.kubeconfig)
    return 0


def _status(args: argparse.Namespace) -> int:
    from autoclusters.devcluster import processes as p
    from autoclusters.devcluster.cluster import LocalCluster

    cluster = LocalCluster(args.name)
    rows = [{"component": x.name, "pid": x.pid, "running": p.alive(x), "log": x.log}
            for x in cluster.procs() + cluster.slurm_procs()]
    if args.output == "json":
        print_json({"name": args.name, "kubeconfig": str(cluster.kubeconfig), "components": rows,
                    "ports": (cluster.state() or {}).get("ports", {})})
    else:
        print_table(["COMPONENT", "PID", "RUNNING", "LOG"], [list(r.values()) for r in rows])
    return 0 if rows and all(r["running"] for r in rows) else 1
