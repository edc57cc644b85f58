"""The ValidatingAdmissionPolicy that holds the controller's Jobs to the host-reboot Job's fixed
shape, which the ``hostReboot`` provider declares (``providers/hostreboot.py``).

The controller may create Jobs in its namespace (the ``hostReboot`` provider's), and a Job is a
privileged pod with the host's PID namespace: RBAC alone would let the controller's identity
(or whoever takes its token) run any image with any command on any node. The policy admits a
Job the controller's service account creates only in the shape ``providers/hostreboot.py``
builds from its constants, which this module reads: one container named ``reboot`` whose
command is ``NSENTER`` followed by the operator's host command, whose image is the controller's
own or an entry of ``allowLists.images`` (the pod may name the stack's ``imagePullSecrets``),
with exactly ``REBOOT_SECURITY_CONTEXT``, no volumes, no other containers, no environment, no
host network; ``backoffLimit: 0``, one pod.

Keys the API server fills in before admission (defaults: ``dnsPolicy``, ``schedulerName``,
``imagePullPolicy``, ``completions``...) are among the allowed keys; their values are Kubernetes'
own defaults, never ours, and none grants more than the shape (k8s.io/kubernetes
pkg/apis/core/v1/defaults.go, pkg/apis/batch/v1/defaults.go).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT, DEFAULT_NAMESPACE
from autoclusters.deploy.admission import _cel_str, admission_policy_binding, validating_policy
from autoclusters.providers.hostreboot import CONTAINER, NSENTER, REBOOT_SECURITY_CONTEXT

# The controller's own image, a variable of its own whose expression is the image as a CEL
# string literal: a kustomize replacement carries an image override into it (docs/deploy.md,
# examples/kustomize/registry/). Not the controller's Deployment as the policy's parameter: on
# kube-apiserver v1.34.4 a binding created after another installation's was removed found no
# parameter ("no params found for policy binding") and refused every reboot Job.
OWN_IMAGE_VARIABLE = "ownImage"

# The keys of each object of the Job: ours, and those the API server defaults.
JOB_SPEC_KEYS = ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "template",
                 "completions", "parallelism", "completionMode", "suspend", "podReplacementPolicy", "selector",
                 "manualSelector")
POD_SPEC_KEYS = ("nodeName", "hostPID", "restartPolicy", "automountServiceAccountToken",
                 "terminationGracePeriodSeconds", "tolerations", "containers",
                 "dnsPolicy", "schedulerName", "securityContext", "imagePullSecrets")
CONTAINER_KEYS = ("name", "image", "command", "terminationMessagePolicy", "securityContext", "resources",
                  "terminationMessagePath", "imagePullPolicy")


def _list(values: Sequence[str]) -> str:
    return "[" + ", ".join(_cel_str(v) for v in values) + "]"


def job_shape_policy(name: str, *, namespace: str = DEFAULT_NAMESPACE, own_image: str, listed: Sequence[str] = (),
                     host_command: Sequence[str], service_account: str = CONTROLLER_SERVICE_ACCOUNT
                     ) -> dict[str, Any]:
    """The policy: Jobs the controller's ``service_account`` creates have the reboot Job's shape,
    run ``host_command`` in the host and ``own_image`` (the controller's) or one of ``listed``
    (``allowLists.images``)."""
    images = sorted({own_image, *listed})
    who = "the autoclusters controller"
    sc = REBOOT_SECURITY_CONTEXT
    security = " && ".join(f"has(variables.c.securityContext.{k}) && variables.c.securityContext.{k} == "
                           f"{str(v).lower() if isinstance(v, bool) else v}" for k, v in sc.items())
    return validating_policy(name, {
        # only its namespace: Jobs of other namespaces are none of its business
        "matchConstraints": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                             "resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                                                "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]}]},
        "matchConditions": [{"name": "is-the-controller", "expression": (
            f"request.userInfo.username == "
            f"{_cel_str(f'system:serviceaccount:{namespace}:{service_account}')}")}],
        "variables": [{"name": OWN_IMAGE_VARIABLE, "expression": _cel_str(own_image)},
                      {"name": "listedImages", "expression": _list(sorted(set(listed)))},
                      {"name": "pod", "expression": "object.spec.template.spec"},
                      {"name": "c", "expression": "object.spec.template.spec.containers[0]"}],
        "validations": [
            {"expression": f"object.spec.all(k, k in {_list(JOB_SPEC_KEYS)}) && object.spec.backoffLimit == 0 && "
                           "(!has(object.spec.parallelism) || object.spec.parallelism == 1) && "
                           "(!has(object.spec.completions) || object.spec.completions == 1) && "
                           "(!has(object.spec.manualSelector) || !object.spec.manualSelector)",
             "reason": "Forbidden", "message": f"{who} creates only the host-reboot Job: one pod, backoffLimit 0"},
            {"expression": f"variables.pod.all(k, k in {_list(POD_SPEC_KEYS)}) && has(variables.pod.nodeName) && "
                           "variables.pod.hostPID == true && variables.pod.restartPolicy == 'Never' && "
                           "variables.pod.automountServiceAccountToken == false && "
                           "variables.pod.tolerations == [{'operator': 'Exists'}] && "
                           "(!has(variables.pod.securityContext) || variables.pod.securityContext == {}) && "
                           "variables.pod.containers.size() == 1",
             "reason": "Forbidden", "message": (
                 f"{who} creates only the host-reboot Job: a pod pinned to its node with the host's PID "
                 "namespace and one container; no volumes, init containers, host network or token")},
            {"expression": f"variables.c.all(k, k in {_list(CONTAINER_KEYS)}) && "
                           f"variables.c.name == {_cel_str(CONTAINER)} && "
                           f"variables.c.command == {_list([*NSENTER, *host_command])} && "
                           f"has(variables.c.securityContext) && variables.c.securityContext.size() == {len(sc)} && "
                           f"{security}",
             "reason": "Forbidden", "message": (
                 f"{who} creates only the host-reboot Job: its container runs "
                 f"{' '.join([*NSENTER, *host_command])!r} with the reboot's security context, nothing else")},
            {"expression": f"variables.c.image == variables.{OWN_IMAGE_VARIABLE} || "
                           "variables.c.image in variables.listedImages", "reason": "Forbidden",
             "message": (f"{who} runs the host-reboot Job only with its own image or an entry of "
                         f"allowLists.images: {', '.join(images)}")},
        ],
    })


def job_shape_binding(name: str) -> dict[str, Any]:
    return admission_policy_binding(policy_name=name)
