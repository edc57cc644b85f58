"""``autoclusters controller run|crds``: the remediation controller.

Every duration is a flag (with an ``AUTOCLUSTERS_CONTROLLER_*`` environment default), so
tests and demos shorten them through configuration, never by patching code.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from dataclasses import fields, replace
from typing import Any

from autoclusters import api
from autoclusters.cli._output import print_json

_FLAGS: dict[str, str] = {
    "namespace": "namespace of the leader-election Lease",
    "lease_name": "name of the leader-election Lease",
    "identity": "this replica's identity in the Lease (default: host-pid)",
    "lease_seconds": "lease duration",
    "renew_deadline_seconds": "give up leadership when not renewed within this time",
    "retry_period_seconds": "lease acquire/renew period",
    "verify_timeout_seconds": "time a repaired node has to come back healthy",
    "operation_timeout_seconds": "time a provider operation may take",
    "poll_seconds": "how often a repair in progress is looked at",
    "hold_recheck_seconds": "how often a held repair re-checks its guards",
    "resync_seconds": "full resync period",
    "pool_status_delay_seconds": "a change of a pool's nodes updates the pool's status this much later (a burst "
                                 "is written once)",
    "watch_gather_seconds": "the node and record watches read the events of a burst together, each waiting at "
                            "most this long (0: every event wakes the watch)",
    "watch_seconds": "each watch of nodes, pools and records runs this long, then is resumed from the last "
                     "version seen (a version etcd compacted meanwhile: a fresh list)",
    "gc_interval_seconds": "how often old records are garbage-collected",
    "retention_days": "keep closed Remediation records this long",
    "metrics_port": "Prometheus metrics port (0: off)",
    "workers": "parallel reconciles",
    "shards": "number of shards the pools are spread over (each shard is a Deployment with its own Lease; "
              "docs/controller.md, Scaling out)",
    "shard": "the shard this process runs (0 <= shard < shards): it owns the pools whose name hashes to it",
    "sim_reset_seconds": "simulated provider: reset duration (pool provider.simulated.resetSeconds overrides)",
    "sim_replace_seconds": "simulated provider: replacement duration (pool provider.simulated.replaceSeconds "
                           "overrides)",
    "provider_image": "image of provider Jobs (host reboot) when the pool names none (default: the image of "
                      "the controller's own pod, read through POD_NAME/POD_NAMESPACE)",
    "image_pull_secrets": "comma-separated names of Secrets in --namespace that provider Jobs pull their image "
                          "with (the stack's imagePullSecrets)",
    "host_reboot_command": "what the host-reboot Job runs inside the host's namespaces, as shell words (the "
                           "default needs sh and systemctl or reboot; Bottlerocket: 'apiclient reboot')",
    "allow_lists": "the commands, images and URLs pools may name, as JSON: {\"commands\": {NAME: [ARGV...]}, "
                   "\"images\": {NAME: IMAGE}, \"urls\": {NAME: URL}} (docs/admission.md, Who may write pools; "
                   "default: none)",
    "notifier_url": "POST failed-repair notifications to this URL (default: log them)",
    "catalog_path": "an operator's fault catalog instead of the shipped one",
    "event_source": "the events' source (source.component, reportingComponent)",
    "webhook_tls_secret": "keep the webhook's serving certificate in this TLS Secret of --namespace, renewed "
                          "before expiry (empty: someone else issues it; docs/admission.md, Certificates)",
    "webhook_ca_secret": "the Secret holding the CA that signs the webhook's certificate (the controller's only)",
    "webhook_config": "the ValidatingWebhookConfiguration whose caBundle the controller keeps current",
    "webhook_hosts": "comma-separated names/IPs of the webhook's certificate (empty: its Service's DNS names)",
    "webhook_ca_lifetime_seconds": "lifetime of the webhook's CA",
    "webhook_cert_lifetime_seconds": "lifetime of the webhook's serving certificate (renewed with a third left)",
    "webhook_cert_check_seconds": "how often the leader checks the webhook's certificate",
}


_TYPES: dict[str, type] = {"float": float, "int": int, "str": str}


def register(sub: Any) -> None:
    from autoclusters.controller.controller_config import ControllerConfig

    ctl = sub.add_parser("controller", help="the remediation controller")
    csub = ctl.add_subparsers(dest="controller_command", metavar="ACTION", required=True)
    run = csub.add_parser("run", help="run the controller (leader-elected) against a cluster")
    run.add_argument("--kubeconfig", default=None, help="kubeconfig path (default: $KUBECONFIG or in-cluster)")
    defaults = ControllerConfig()
    for f in fields(ControllerConfig):
        env = f"AUTOCLUSTERS_CONTROLLER_{f.name.upper()}"
        default = getattr(defaults, f.name)
        kind = _TYPES[str(f.type)]
        value = os.environ.get(env)
        run.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=kind(value) if value else default,
                         help=f"{_FLAGS.get(f.name, f.name)} (default {default!r}; env {env})")
    run.set_defaults(func=_run)

    crds = csub.add_parser("manifests", help="print the CRDs and the controller's RBAC as JSON")
    crds.add_argument("--namespace", default=api.DEFAULT_NAMESPACE)
    crds.set_defaults(func=_manifests)


def _run(args: argparse.Namespace) -> int:
    from autoclusters import allow_lists
    from autoclusters.cli.exit_codes import CliError
    from autoclusters.controller import shards
    from autoclusters.controller.controller_config import ControllerConfig
    from autoclusters.controller.manager import Controller
    from autoclusters.controller.own_image import OwnImageError, own_image, own_pod
    from autoclusters.deploy.workloads import CONTROLLER_CONTAINER
    from autoclusters.kube import load_kube
    from autoclusters.names import Names, event_source_error

    config = ControllerConfig(**{f.name: getattr(args, f.name) for f in fields(ControllerConfig)})
    why = event_source_error(config.event_source)
    if why:
        raise CliError(why, 2)
    try:
        api.host_reboot_argv(config.host_reboot_command)
    except ValueError as e:
        raise CliError(f"--host-reboot-command: {e}", 2) from None
    try:
        allow_lists.from_config(config.allow_lists, allow_lists.FLAG)
    except allow_lists.AllowListError as e:
        raise CliError(str(e), 2) from None
    try:
        shards.check(config.shards, config.shard)
    except shards.ShardConfigError as e:
        raise CliError(str(e), 2) from None
    config = config.with_identity()
    # The replica's identity in its user agent (after the "/", so the API server's default field
    # manager stays "autoclusters-controller"): an audit log tells the replicas' requests apart.
    kube = load_kube(args.kubeconfig, user_agent=f"autoclusters-controller/{config.identity}",
                     qps_pool=max(32, config.workers * 2))
    pod = own_pod()
    if not config.provider_image and pod:  # the Deployment's image, whatever set it (controller/own_image.py)
        try:
            config = replace(config, provider_image=own_image(kube, *pod, container=CONTROLLER_CONTAINER))
        except OwnImageError as e:
            print(f"warning: {e}", file=sys.stderr)
    controller = Controller(kube, config, names=Names.from_env())

    def stop(_sig: int, _frame: Any) -> None:
        controller.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    ok = controller.run()
    if not ok:
        print("error: lost the leader lease; exiting so a supervisor restarts this replica", file=sys.stderr)
        # At once: a thread may still wait on a request sent before the lease was lost (on a
        # black-holed network, until its time-out); its answer cannot be acted on (every write
        # is fenced) and must not hold up the restart.
        logging.shutdown()
        sys.stderr.flush()
        os._exit(1)
    return 0


def _manifests(args: argparse.Namespace) -> int:
    from autoclusters.deploy.controller import controller_rbac
    from autoclusters.deploy.crds import crds
    from autoclusters.names import Names

    names = Names.from_env()
    print_json([*crds(names), *controller_rbac(names, args.namespace)])
    return 0
