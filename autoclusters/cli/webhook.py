"""``autoclusters webhook run``: the admission webhook (alias ``serve``).

Certificates: either ``--cert-dir`` (generated here: a CA and a serving certificate,
renewed before expiry, the CA bundle written into ``--webhook-config``), or
``--tls-cert``/``--tls-key`` issued by someone else (reloaded when the files change).
"""

from __future__ import annotations

import argparse
import atexit
import logging
import logging.handlers
import os
import queue
from pathlib import Path
from typing import Any

from autoclusters import allow_lists
from autoclusters.cli.exit_codes import EXIT_USAGE, CliError
from autoclusters.clock import SystemClock
from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.deploy.admission import OPA_TIMEOUT_SECONDS, WEBHOOK_CONFIG_NAME, default_node_agents
from autoclusters.names import Names
from autoclusters.rego.policy_data import PolicyConfig, controller_identity

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    webhook = subparsers.add_parser("webhook", help="the admission webhook for the maintenance labels")
    sub = webhook.add_subparsers(dest="webhook_command", metavar="SUBCOMMAND", required=True)
    run = sub.add_parser("run", aliases=["serve"], help="serve AdmissionReviews over HTTPS, deciding with OPA")
    run.add_argument("--listen", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    run.add_argument("--port", type=int, default=8443)
    run.add_argument("--opa-url", default="http://127.0.0.1:8181", help="the OPA server holding policies/")
    run.add_argument("--opa-timeout", type=float, default=OPA_TIMEOUT_SECONDS,
                     help=f"seconds to wait for one OPA decision (default {OPA_TIMEOUT_SECONDS:g}; keep it below the "
                          "webhook configuration's timeoutSeconds)")
    run.add_argument("--cert-dir", type=Path, help="keep a generated, self-renewing CA and serving cert here")
    run.add_argument("--hosts", default=None,
                     help="comma-separated names/IPs for the serving cert (default: 127.0.0.1, localhost and the "
                          "in-cluster Service names)")
    run.add_argument("--tls-cert", type=Path, help="serving certificate issued elsewhere (reloaded on change)")
    run.add_argument("--tls-key", type=Path)
    run.add_argument("--kubeconfig", default=None,
                     help="where to write the CA bundle (default: in-cluster/$KUBECONFIG)")
    run.add_argument("--webhook-config", default=WEBHOOK_CONFIG_NAME,
                     help="ValidatingWebhookConfiguration whose caBundle this webhook keeps current ('' to skip)")
    run.add_argument("--namespace", default=_own_namespace(),
                     help="the system's namespace (default: $AUTOCLUSTERS_NAMESPACE, the pod's, or "
                          f"{DEFAULT_NAMESPACE}); names the controller identity")
    run.add_argument("--push-opa-config", action=argparse.BooleanOptionalAction, default=True,
                     help="write data.autoclusters.config (domain, controller identity) into OPA at start "
                          "(default on; turn off when OPA's data comes from a bundle)")
    run.add_argument("--controller", action="append", default=None, metavar="USERNAME",
                     help="controller identity for --push-opa-config (repeatable)")
    run.add_argument(allow_lists.FLAG, default="", metavar="JSON",
                     help="the operator's allow-lists for --push-opa-config, as the controller's flag takes them "
                          "(the pool rules refuse a command, image or URL no entry names; default: none)")
    run.add_argument("--cert-check-interval", type=float, default=300.0)
    run.set_defaults(func=run_webhook)


def run_webhook(args: argparse.Namespace) -> int:
    from aiohttp import web

    from autoclusters.webhook.certs import CertManager, CertStore, FileCertReloader
    from autoclusters.webhook.decider import OpaDecider
    from autoclusters.webhook.server import Webhook, WebhookSettings

    certs: Any
    writer = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise CliError("--tls-cert and --tls-key go together", EXIT_USAGE)
        certs = FileCertReloader(args.tls_cert, args.tls_key)
    elif args.cert_dir:
        hosts = args.hosts.split(",") if args.hosts else _default_hosts(args.namespace)
        certs = CertManager(CertStore(args.cert_dir), hosts, SystemClock())
        if args.webhook_config:
            writer = _bundle_writer(args.kubeconfig, args.webhook_config, certs)
    else:
        raise CliError("give --cert-dir (generated certificates) or --tls-cert/--tls-key", EXIT_USAGE)
    names = Names.from_env()
    try:
        lists = allow_lists.from_config(args.allow_lists, allow_lists.FLAG)
    except allow_lists.AllowListError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    config = PolicyConfig(names, tuple(args.controller or (controller_identity(args.namespace),)),
                          tuple(default_node_agents(args.namespace)), lists)
    settings = WebhookSettings(check_interval=args.cert_check_interval,
                               opa_config=config.config() if args.push_opa_config else None)
    webhook = Webhook(OpaDecider(args.opa_url, timeout=args.opa_timeout), certs, settings=settings,
                      bundle_writer=writer)
    _log_off_the_request_path()
    certs.ensure()  # fail fast on unreadable certificates, before binding the port
    log.info("webhook listening on https://%s:%d/validate, OPA at %s", args.listen, args.port, args.opa_url)
    web.run_app(webhook.app(), host=args.listen, port=args.port, ssl_context=certs.context,
                access_log=None, print=None)
    return 0


def _log_off_the_request_path() -> None:
    """Every decision is logged (with OPA's decision id); a queue keeps the write to stderr
    off the event loop."""
    root = logging.getLogger()
    handlers = list(root.handlers)
    if not handlers:
        return
    q: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(q, *handlers, respect_handler_level=True)
    for h in handlers:
        root.removeHandler(h)
    root.addHandler(logging.handlers.QueueHandler(q))
    listener.start()
    atexit.register(listener.stop)


def _own_namespace() -> str:
    env = os.environ.get("AUTOCLUSTERS_NAMESPACE")
    if env:
        return env
    sa = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    if sa.exists():
        return sa.read_text().strip() or DEFAULT_NAMESPACE
    return DEFAULT_NAMESPACE


def _default_hosts(namespace: str) -> list[str]:
    svc = "autoclusters-webhook"
    return ["127.0.0.1", "localhost", svc, f"{svc}.{namespace}", f"{svc}.{namespace}.svc",
            f"{svc}.{namespace}.svc.cluster.local"]


def _bundle_writer(kubeconfig: str | None, config_name: str, certs: Any) -> Any:
    from autoclusters.kube import load_kube
    from autoclusters.webhook.install import write_ca_bundle

    kube = load_kube(kubeconfig, user_agent="autoclusters-webhook")

    def write() -> None:
        write_ca_bundle(kube, config_name, certs.ca_bundle())

    return write
