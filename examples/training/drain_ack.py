"""Acknowledges autoclusters' drain warning from inside a training pod (docs/workloads.md,
"What a training job should do"). Standard library only, so it runs beside the training in
the same container (``python3 drain_ack.py & exec torchrun ...``).

It polls the pod's own annotations, mounted with the downward API; when the controller's
warning (``<domain>/remediation``) appears, it sets ``<domain>/drain-ack`` to that record's
name on its own pod through the API server, with the pod's service-account token (which
needs ``patch`` on ``pods`` in the pod's namespace). The pod must carry the label
``<domain>/drain-wait=true`` for the repair to wait for it.

This job acknowledges at once: it saves its checkpoint on SIGTERM (train.py), inside its
``terminationGracePeriodSeconds``, so it needs no time before the eviction; a job whose
save takes longer than its grace period would save first, then acknowledge.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# The installation's default domain (autoclusters/names.py, which this pod cannot import;
# tests/unit/test_drain_ack_example.py keeps the two equal).
DEFAULT_DOMAIN = "autoclusters.io"


def parse_annotations(text: str) -> dict[str, str]:
    """The downward API's ``metadata.annotations`` file: one ``key="value"`` line per
    annotation, the value quoted with Go's ``%q`` (kubernetes pkg/fieldpath/fieldpath.go,
    ``FormatMap``), which reads back as a JSON string for the values written here."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value.strip('"')
    return out


def to_acknowledge(annotations: dict[str, str], domain: str) -> str:
    """The record to acknowledge: the warning's, unless this pod acknowledged it already."""
    record = annotations.get(f"{domain}/remediation", "")
    return record if record and annotations.get(f"{domain}/drain-ack") != record else ""


def acknowledge(namespace: str, pod: str, key: str, record: str) -> None:
    """A merge patch of the pod's own annotation, through the ``kubernetes`` Service."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    host = f"[{host}]" if ":" in host else host
    token = (SERVICE_ACCOUNT / "token").read_text().strip()
    body = json.dumps({"metadata": {"annotations": {key: record}}}).encode()
    req = urllib.request.Request(f"https://{host}:{port}/api/v1/namespaces/{namespace}/pods/{pod}", data=body,
                                 method="PATCH", headers={"Content-Type": "application/merge-patch+json",
                                                          "Authorization": f"Bearer {token}"})
    context = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
    with urllib.request.urlopen(req, context=context, timeout=10) as answer:
        answer.read()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--annotations", type=Path, default=Path("/etc/podinfo/annotations"))
    p.add_argument("--domain", default=DEFAULT_DOMAIN, help="the installation's label domain")
    p.add_argument("--pod", default=os.environ.get("POD_NAME") or os.environ.get("HOSTNAME", ""))
    p.add_argument("--poll-seconds", type=float, default=1.0)
    p.add_argument("--events", type=Path, default=None, help="appends one JSON line per acknowledgement")
    args = p.parse_args(argv)
    namespace = (SERVICE_ACCOUNT / "namespace").read_text().strip()
    done = ""
    while True:
        try:
            record = to_acknowledge(parse_annotations(args.annotations.read_text()), args.domain)
        except OSError as e:
            print(f"[drain-ack] cannot read {args.annotations}: {e}", file=sys.stderr, flush=True)
            record = ""
        if record and record != done:
            try:
                acknowledge(namespace, args.pod, f"{args.domain}/drain-ack", record)
            except (OSError, urllib.error.URLError) as e:  # tried again at the next poll
                print(f"[drain-ack] acknowledging {record} failed: {e}", file=sys.stderr, flush=True)
            else:
                done = record
                print(f"[drain-ack] acknowledged {record}", flush=True)
                if args.events:
                    with args.events.open("a") as f:
                        f.write(json.dumps({"t": time.time(), "event": "ack", "record": record}) + "\n")
        time.sleep(args.poll_seconds)


if __name__ == "__main__":
    sys.exit(main())
