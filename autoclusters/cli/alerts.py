"""``autoclusters alerts``: the shipped Prometheus alert rules for an installation's names, as a
rule file, or as the PrometheusRule object the stack's ``monitoring`` setting creates
(``deploy.alerts``, ``deploy.monitoring``): for installations under another domain (whose
webhooks the rules name) or made without Pulumi."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from autoclusters.cli._cluster import names_from_args
from autoclusters.cli._output import print_json
from autoclusters.cli.exit_codes import EXIT_USAGE, CliError
from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.deploy.alerts import APPROVAL_WAIT_ALERT_SECONDS, rules, spoken_duration, valid_approval_wait
from autoclusters.deploy.monitoring import prometheus_rule
from autoclusters.names import DEFAULT_DOMAIN, DEFAULT_PREFIX


def register(sub: Any) -> None:
    p = sub.add_parser("alerts", help="print the Prometheus alert rules (a rule file, or a PrometheusRule "
                                      "for the Prometheus Operator: kubectl apply -f -)")
    p.add_argument("--domain", default=None,
                   help=f"label domain (default: $AUTOCLUSTERS_DOMAIN or {DEFAULT_DOMAIN}): the rules name "
                        "its webhooks")
    p.add_argument("--condition-prefix", default=None,
                   help=f"condition prefix (default: $AUTOCLUSTERS_CONDITION_PREFIX or {DEFAULT_PREFIX})")
    p.add_argument("--prometheus-rule", action="store_true",
                   help="print the PrometheusRule object (JSON) instead of a rule file (YAML)")
    p.add_argument("--namespace", default=None,
                   help="the installation's namespace: the controller-down alert asks for the controller's "
                        "series of that namespace (the PodMonitors label them so); the PrometheusRule is created "
                        f"there (default {DEFAULT_NAMESPACE}). Without it the rule file's alert asks for any "
                        "controller's")
    p.add_argument("--approval-wait-seconds", type=_approval_wait, default=APPROVAL_WAIT_ALERT_SECONDS,
                   metavar="SECONDS",
                   help="how long a repair of a propose pool waits for its approval before "
                        f"AutoclustersRepairAwaitingApproval fires (default {APPROVAL_WAIT_ALERT_SECONDS}: "
                        f"{spoken_duration(APPROVAL_WAIT_ALERT_SECONDS)}; the stack setting "
                        "monitoring.approvalWaitAlertSeconds)")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="a label for the PrometheusRule, for an operator's ruleSelector (repeatable; e.g. "
                        "release=kube-prometheus-stack)")
    p.set_defaults(func=_alerts)


def _approval_wait(text: str) -> int:
    if not text.strip().isdigit() or not valid_approval_wait(int(text)):
        raise argparse.ArgumentTypeError(f"expected a positive whole number of seconds, got {text!r}")
    return int(text)


def _alerts(args: argparse.Namespace) -> int:
    import yaml

    names = names_from_args(args)
    labels: dict[str, str] = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--label {item!r}: expected KEY=VALUE", EXIT_USAGE)
        labels[key] = value
    if not args.prometheus_rule:
        if labels:
            raise CliError("--label is for the PrometheusRule (--prometheus-rule)", EXIT_USAGE)
        sys.stdout.write(yaml.safe_dump(rules(names, args.namespace, args.approval_wait_seconds),
                                        sort_keys=False, width=120))
        return 0
    print_json(prometheus_rule(args.namespace or DEFAULT_NAMESPACE, labels, names, args.approval_wait_seconds))
    return 0
