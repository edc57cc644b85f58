"""The host-reboot Job's fixed shape, and the ValidatingAdmissionPolicy that holds the
controller's Jobs to it.

The controller may create Jobs in its namespace (the ``hostReboot`` provider's), and a Job is a
privileged pod with the host's PID namespace: RBAC alone would let the controller's identity
(or whoever takes its token) run any image with any command on any node. The policy admits a
Job the controller's service account creates only in the shape ``providers/hostreboot.py``
builds from the constants below: one container named ``reboot`` whose command is ``NSENTER``
followed by the operator's host command, whose image is the controller's own or an entry of
``allowLists.images`` (the pod may name the stack's ``imagePullSecrets``), with exactly
``REBOOT_SECURITY_CONTEXT``, no volumes, no other containers, no environment, no host
network; ``backoffLimit: 0``, one pod.

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
from autoclusters.deploy.workloads import CONTROLLER_CONTAINER

COMPONENT = "autoclusters-host-reboot"
CONTAINER = "reboot"
# The Job enters PID 1's namespaces, then runs the operator's host command there.
NSENTER = ("nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--")
# privileged (setns into PID 1's namespaces needs CAP_SYS_ADMIN, the reboot CAP_SYS_BOOT) and uid 0:
# under the image's USER 65532 a privileged container keeps no effective capability (issue 23).
REBOOT_SECURITY_CONTEXT: dict[str, Any] = {"privileged": True, "runAsUser": 0, "runAsGroup": 0,
                                           "runAsNonRoot": False}
TOLERATIONS: list[dict[str, str]] = [{"operator": "Exists"}]
# The controller's own image is read from its Deployment, the policy's parameter (paramKind): an
# image override of the Deployment (kustomize images:, a Helm value) changes the image the policy
# admits with it, and the controller's identity cannot write Deployments.
OWN_IMAGES_VARIABLE = "ownImages"

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


def job_shape_policy(name: str, *, namespace: str = DEFAULT_NAMESPACE, listed: Sequence[str] = (),
                     host_command: Sequence[str], service_account: str = CONTROLLER_SERVICE_ACCOUNT
                     ) -> dict[str, Any]:
    """The policy: Jobs the controller's ``service_account`` creates have the reboot Job's shape,
    run ``host_command`` in the host and the controller's own image (that of its Deployment, the
    binding's parameter: ``job_shape_binding``) or one of ``listed`` (``allowLists.images``)."""
    images = sorted(set(listed))
    who = "the autoclusters controller"
    sc = REBOOT_SECURITY_CONTEXT
    security = " && ".join(f"has(variables.c.securityContext.{k}) && variables.c.securityContext.{k} == "
                           f"{str(v).lower() if isinstance(v, bool) else v}" for k, v in sc.items())
    return validating_policy(name, {
        "paramKind": {"apiVersion": "apps/v1", "kind": "Deployment"},
        # only its namespace: a binding whose parameter is not there yet (an informer not synced
        # after install) or any more (mid-removal) denies what it matches, before match conditions
        "matchConstraints": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                             "resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                                                "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]}]},
        "matchConditions": [{"name": "is-the-controller", "expression": (
            f"request.userInfo.username == "
            f"{_cel_str(f'system:serviceaccount:{namespace}:{service_account}')}")}],
        "variables": [{"name": OWN_IMAGES_VARIABLE, "expression": (
                          f"params.spec.template.spec.containers.filter(c, c.name == {_cel_str(CONTROLLER_CONTAINER)})"
                          ".map(c, c.image)")},
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
            {"expression": f"variables.c.image in variables.{OWN_IMAGES_VARIABLE} || "
                           "variables.c.image in variables.listedImages", "reason": "Forbidden",
             "message": (f"{who} runs the host-reboot Job only with its own image (its Deployment's) or an "
                         f"entry of allowLists.images{': ' + ', '.join(images) if images else ' (none)'}")},
        ],
    })


def job_shape_binding(name: str, *, namespace: str, controller_deployment: str) -> dict[str, Any]:
    """Binds the policy with the controller's Deployment (shard 0's: every shard runs the same
    image) as its parameter; without it every Job of the controller is refused."""
    binding = admission_policy_binding(policy_name=name)
    binding["spec"]["paramRef"] = {"name": controller_deployment, "namespace": namespace,
                                   "parameterNotFoundAction": "Deny"}
    return binding
