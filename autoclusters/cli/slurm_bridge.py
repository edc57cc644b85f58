"""``autoclusters slurm-bridge run``: keep Slurm in step with node repairs (see autoclusters/slurm/);
``autoclusters slurm-bridge rbac``: the identity it runs as (``deploy.slurm_bridge``)."""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

from autoclusters.cli.exit_codes import CliError
from autoclusters.deploy import DEFAULT_NAMESPACE


def register(sub: Any) -> None:
    p = sub.add_parser("slurm-bridge", help="drain, signal, requeue and resume Slurm nodes in step with repairs")
    psub = p.add_subparsers(dest="bridge_command", metavar="ACTION", required=True)
    run = psub.add_parser("run", help="run the bridge for every pool with spec.slurm.enabled")
    run.add_argument("--kubeconfig", default=None, help="kubeconfig path (default: $KUBECONFIG or in-cluster)")
    run.add_argument("--slurm-conf", default=os.environ.get("SLURM_CONF"),
                     help="slurm.conf the Slurm commands read (default: $SLURM_CONF, else Slurm's own default)")
    run.add_argument("--poll-seconds", type=float, default=float(os.environ.get("AUTOCLUSTERS_SLURM_POLL", "2")),
                     help="how often nodes and Slurm are looked at (default 2; env AUTOCLUSTERS_SLURM_POLL)")
    run.add_argument("--max-backoff-seconds", type=float, default=None,
                     help="the longest wait before the next poll after polls that failed in a row; the wait "
                          "starts at --poll-seconds and doubles with each, never below --poll-seconds (default: the "
                          "bridge's, 30)")
    run.add_argument("--command-timeout", type=float, default=15.0,
                     help="seconds a Slurm command may take before it counts as failed (default 15)")
    run.add_argument("--metrics-port", type=int, default=0,
                     help="serve Prometheus metrics on this port (default: 0, off)")
    run.add_argument("--metrics-address", default="0.0.0.0", help="address for --metrics-port (default: 0.0.0.0)")
    run.set_defaults(func=_run)
    rbac = psub.add_parser("rbac", help="print the bridge's service account, ClusterRole and binding as JSON "
                                        "(kubectl apply -f -); the stack creates them when a pool of its own "
                                        "enables Slurm")
    rbac.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                      help=f"namespace of the service account (default {DEFAULT_NAMESPACE})")
    rbac.set_defaults(func=_rbac)


def _rbac(args: argparse.Namespace) -> int:
    from autoclusters.cli._output import print_json
    from autoclusters.deploy.slurm_bridge import slurm_bridge_rbac
    from autoclusters.names import Names

    print_json(slurm_bridge_rbac(Names.from_env(), args.namespace))
    return 0


def _run(args: argparse.Namespace) -> int:
    from autoclusters.kube import load_kube
    from autoclusters.names import Names
    from autoclusters.slurm.bridge import SlurmBridge
    from autoclusters.slurm.commands import Slurm, SubprocessRunner

    env = {"SLURM_CONF": args.slurm_conf} if args.slurm_conf else {}
    kube = load_kube(args.kubeconfig, user_agent="autoclusters-slurm-bridge")
    backoff = {} if args.max_backoff_seconds is None else {"max_backoff_seconds": args.max_backoff_seconds}
    bridge = SlurmBridge(kube, Slurm(SubprocessRunner(env), timeout=args.command_timeout), names=Names.from_env(),
                         poll_seconds=args.poll_seconds, **backoff)
    if args.metrics_port:
        from autoclusters.slurm.bridge_metrics import serve

        try:
            serve(bridge, args.metrics_port, args.metrics_address)
        except OSError as e:
            raise CliError(f"cannot serve metrics on {args.metrics_address}:{args.metrics_port}: {e}") from e

    def stop(_sig: int, _frame: Any) -> None:
        bridge.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    bridge.run()
    return 0
