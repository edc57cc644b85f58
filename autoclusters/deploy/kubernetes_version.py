"""The oldest Kubernetes the system runs on, and the check that says so before a deploy.

1.30 is where the parts the system is built on are served by default:

- ``admissionregistration.k8s.io/v1`` ValidatingAdmissionPolicy (GA in 1.30): the floor of the
  maintenance-label rules and the detector's own-node rule (``deploy.admission``,
  ``deploy.detector``);
- the node's name in a pod's service-account token (user-info extra
  ``authentication.kubernetes.io/node-name``, on by default from 1.30), which that own-node
  rule reads;
- ``matchConditions`` on the admission webhook (GA in 1.30), which keep the kubelets' writes
  away from it.

The suites run against the version in ``tools/versions.env``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MINIMUM = (1, 30)
MINIMUM_TEXT = f"{MINIMUM[0]}.{MINIMUM[1]}"
WHY = ("ValidatingAdmissionPolicy v1, the node name in pods' service-account tokens, and admission "
       "webhooks' matchConditions")


def parse(version: Mapping[str, Any]) -> tuple[int, int] | None:
    """(major, minor) of an API server's ``/version`` answer; None when it says neither.

    Providers decorate the numbers: ``minor: "30+"`` (EKS, GKE), ``gitVersion:
    "v1.30.4-eks-a737599"``; the digits they start with are the version."""
    major = re.match(r"\d+", str(version.get("major", "")))
    minor = re.match(r"\d+", str(version.get("minor", "")))
    if major and minor:
        return int(major.group()), int(minor.group())
    git = re.match(r"v?(\d+)\.(\d+)", str(version.get("gitVersion", "")))
    return (int(git.group(1)), int(git.group(2))) if git else None


def too_old(version: Mapping[str, Any]) -> str | None:
    """Why a cluster of this ``/version`` cannot run the system; None when it can (or when the
    answer names no version: nothing is refused on a guess)."""
    found = parse(version)
    if found is None or found >= MINIMUM:
        return None
    shown = version.get("gitVersion") or f"{found[0]}.{found[1]}"
    return (f"the cluster runs Kubernetes {shown}; autoclusters needs {MINIMUM_TEXT} or newer ({WHY})")
