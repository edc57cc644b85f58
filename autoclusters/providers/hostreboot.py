"""The host-reboot provider: resets a node by rebooting its host from a short-lived Job.

The reset of any cluster (bare metal, a cloud without an API integration, the reset step
anywhere): one Job per operation, in the controller's namespace, pinned to the node.

- ``spec.nodeName`` pins the pod: the scheduler is bypassed, so the cordon the repair put on
  the node does not keep it off; ``tolerations: [{operator: Exists}]`` lets it past every
  taint (the maintenance taint, ``node.kubernetes.io/unschedulable``, the NoExecute taints a
  NotReady node gets, and whatever taints the GPU node already carries).
- ``hostPID: true`` + ``privileged: true`` + ``runAsUser: 0``: the container joins the host's PID
  namespace and may ``setns`` into PID 1's namespaces. Root is needed as well as ``privileged``:
  the image's own user is 65532, and a non-root process loses every capability at exec
  (Kubernetes sets no ambient capabilities), so a privileged container running as 65532 has
  CapEff 0 and ``nsenter`` fails with "Operation not permitted" (``REBOOT_SECURITY_CONTEXT``).
  ``nsenter --target 1 --mount --uts --ipc --net --pid -- sh -c 'systemctl reboot || reboot'``
  then asks the host's init for a clean reboot (systemd stops the kubelet and the services in
  order), or runs ``reboot`` where there is no systemd.
  The command returns as soon as the reboot is queued, so the Job completes before the host
  goes down.
- ``backoffLimit: 0``: a reboot is never retried by the Job controller (a second reboot would
  be a second reset); ``activeDeadlineSeconds`` stops a Job that never ran.

Success = the node reports a new ``bootID`` and is Ready again within ``timeoutSeconds`` of
the operation's start; the Job is then deleted. Failure = the Job failed before the host
rebooted (kept one day for its log; a Job whose pod the reboot itself ended counts as run) or
the timeout (the Job is deleted so it cannot reboot the node later). The Job's name derives
from the operation id, so ``drive`` after a controller restart finds the Job it created
instead of starting a second reboot.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from autoclusters import api
from autoclusters.api import RepairAction
from autoclusters.clock import Clock, parse_iso
from autoclusters.kube import Conflict, Kube, KubeError, NotFound
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.providers.base import BuildContext, NodeCache, NodeLookup, Provider, ProviderError, read_node
from autoclusters.providers.declaration import ProviderKind, Rule, Setting
from autoclusters.providers.types import Operation, ProviderState, ProviderView
from autoclusters.redact import redact

# The Job's fixed shape, which deploy/reboot_job.py's admission policy holds the controller's Jobs to.
COMPONENT = "autoclusters-host-reboot"
CONTAINER = "reboot"
# The Job enters PID 1's namespaces, then runs the operator's host command there.
NSENTER = ("nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--")
# privileged (setns into PID 1's namespaces needs CAP_SYS_ADMIN, the reboot CAP_SYS_BOOT) and uid 0:
# under the image's USER 65532 a privileged container keeps no effective capability (issue 23).
REBOOT_SECURITY_CONTEXT: dict[str, Any] = {"privileged": True, "runAsUser": 0, "runAsGroup": 0,
                                           "runAsNonRoot": False}
TOLERATIONS: list[dict[str, str]] = [{"operator": "Exists"}]
# Its command: NSENTER, then the operator's host command (api.HOST_REBOOT_COMMAND unless
# --host-reboot-command says otherwise: api.DEFAULT_HOST_REBOOT_ARGV).
REBOOT_COMMAND = (*NSENTER, *api.DEFAULT_HOST_REBOOT_ARGV)
# nsenter's exit statuses when it cannot run the command in the host (util-linux: EX_EXEC_ENOENT,
# EX_EXEC_FAILED), the shell's the same for a program it cannot find or run
_NOT_FOUND, _NOT_EXECUTABLE = 127, 126
FAILED_JOB_TTL_SECONDS = 86400  # a failed Job stays a day for its log; a succeeded one is deleted at once


def boot_id(node: dict[str, Any] | None) -> str:
    return str((((node or {}).get("status") or {}).get("nodeInfo") or {}).get("bootID", ""))


def job_name(op: Operation) -> str:
    return job_name_for(op.id)


def job_name_for(operation_id: str) -> str:
    """The reboot Job of the operation ``operation_id`` (what the removal names in its report)."""
    return f"host-reboot-{hashlib.sha256(operation_id.encode()).hexdigest()[:16]}"


def reboot_job(op: Operation, node: str, namespace: str, image: str, timeout: float, names: Names,
               host_command: tuple[str, ...] = api.DEFAULT_HOST_REBOOT_ARGV,
               image_pull_secrets: tuple[str, ...] = ()) -> dict[str, Any]:
    """The Job that reboots ``node``'s host; pure, so its shape is unit-tested."""
    labels = {"app.kubernetes.io/name": COMPONENT, "app.kubernetes.io/part-of": "autoclusters"}
    annotations = {names.operation_annotation: op.id, names.operation_node_annotation: node}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(op), "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, int(timeout)),
            "ttlSecondsAfterFinished": FAILED_JOB_TTL_SECONDS,
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "nodeName": node,
                    "hostPID": True,
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 5,
                    "tolerations": [dict(t) for t in TOLERATIONS],
                    **({"imagePullSecrets": [{"name": s} for s in image_pull_secrets]} if image_pull_secrets else {}),
                    "containers": [{
                        "name": CONTAINER,
                        "image": image,
                        "command": [*NSENTER, *host_command],
                        # nsenter's own words ("failed to execute sh: No such file or directory")
                        # become the container's termination message, which the failure names
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        "securityContext": dict(REBOOT_SECURITY_CONTEXT),
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                      "limits": {"memory": "64Mi"}},
                    }],
                },
            },
        },
    }


def _job_condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return c
    return None


class HostRebootProvider:
    name = "hostReboot"

    def __init__(self, kube: Kube, clock: Clock, names: Names, *, namespace: str, image: str,
                 timeout: float = 600, nodes: NodeCache | None = None,
                 host_command: tuple[str, ...] = api.DEFAULT_HOST_REBOOT_ARGV,
                 image_pull_secrets: tuple[str, ...] = ()) -> None:
        if not image:
            raise ProviderError("provider.hostReboot.image is required when the controller does not know its own "
                                "image (start it with --provider-image)")
        self._kube = kube
        self._clock = clock
        self._names = names
        self.namespace = namespace
        self.image = image
        self.timeout = timeout
        self.host_command = host_command
        self.image_pull_secrets = image_pull_secrets
        self._nodes = nodes  # the controller's cache: the node is read there, not from the API
        # Operations whose last look (progress) found their Job running: each poll looks and then
        # drives, and the drive need not read the Job again. Every look starts by forgetting it,
        # so a Job deleted by hand, or an operation that ended, is looked for again as before.
        self._seen: set[str] = set()

    def _path(self, op: Operation | None = None) -> str:
        base = f"/apis/batch/v1/namespaces/{self.namespace}/jobs"
        return f"{base}/{job_name(op)}" if op else base

    def _where(self, op: Operation) -> str:
        return f"Job {self.namespace}/{job_name(op)}"

    def replacement_name(self, op: Operation, pool: str) -> str:
        return ""

    def refusal(self, node: dict[str, Any] | None) -> str:
        return ""

    def _job(self, op: Operation) -> dict[str, Any] | None:
        try:
            return self._kube.get(self._path(op))
        except NotFound:
            return None

    def _delete(self, op: Operation) -> None:
        with contextlib.suppress(NotFound):
            self._kube.delete(self._path(op), {"propagationPolicy": "Background"})

    def drive(self, op: Operation, node: str, pool: str) -> None:
        if op.action != RepairAction.RESET:
            raise ProviderError("the hostReboot provider resets nodes only; name another provider for replace")
        if op.id in self._seen or self._job(op) is not None:
            return  # created earlier (maybe by a controller that crashed since): never a second reboot
        if boot_id(read_node(node, self._nodes, self._kube)) not in ("", op.boot_id_before):
            return  # the host already rebooted for this operation; its Job was cleaned up
        with contextlib.suppress(Conflict):
            self._kube.create(self._path(), reboot_job(op, node, self.namespace, self.image, self.timeout,
                                                       self._names, self.host_command, self.image_pull_secrets))

    def progress(self, op: Operation, node: str, pool: str, lookup: NodeLookup) -> ProviderView:
        if op.action != RepairAction.RESET:
            return ProviderView(ProviderState.FAILED, "the hostReboot provider cannot replace a node")
        self._seen.discard(op.id)
        current = lookup(node)
        if current is None:
            return ProviderView(ProviderState.FAILED, f"node {node} disappeared during its host reboot")
        rebooted = boot_id(current) not in ("", op.boot_id_before)
        if rebooted and node_ready(current):
            self._delete(op)
            return ProviderView(ProviderState.SUCCEEDED)
        job = self._job(op)
        if job is None:
            return ProviderView(ProviderState.NOT_STARTED)
        failed = _job_condition(job, "Failed")
        # A host that went down before its kubelet told the API server the command had exited
        # leaves the Job's pod failed ("Unknown", exit 255) after the boot: the reboot happened,
        # so the node's return decides, not the Job (seen on the local cluster's real nodes).
        if failed is not None and not rebooted:
            return ProviderView(ProviderState.FAILED, self._failure(op, node, failed))
        started = parse_iso((job.get("metadata") or {}).get("creationTimestamp")) or op.started
        deadline = started + timedelta(seconds=self.timeout)
        now = self._clock.now()
        if now >= deadline:
            done = _job_condition(job, "Complete") is not None
            self._delete(op)
            what = ("the reboot command ran, but the node did not come back" if done
                    else "the reboot Job did not complete")
            return ProviderView(ProviderState.FAILED, (
                f"{what}: node {node} was not Ready with a new boot id {int(self.timeout)}s after {self._where(op)} "
                "started; the Job was deleted; look at the host's console (BMC) and `kubectl describe node "
                f"{node}`"))
        self._seen.add(op.id)
        return ProviderView(ProviderState.RUNNING, next_check=min(2.0, (deadline - now).total_seconds()))

    def _failure(self, op: Operation, node: str, failed: dict[str, Any]) -> str:
        """Why the reboot Job failed, in the words of its container where it ran: a host without
        the command's program (Bottlerocket and Talos have no ``sh``) is told apart from the rest."""
        where = (f"see `kubectl -n {self.namespace} logs job/{job_name(op)}` and `kubectl -n {self.namespace} "
                 f"describe job {job_name(op)}` (kept {FAILED_JOB_TTL_SECONDS // 3600}h)")
        ended = self._container_end(op)
        said = f": {_one_line(ended.get('message', ''))}" if ended.get("message") else ""
        code = ended.get("exitCode")
        if code in (_NOT_FOUND, _NOT_EXECUTABLE):
            problem = "is not on" if code == _NOT_FOUND else "cannot be run on"
            return (f"the reboot {self._where(op)} could not run its command on node {node}: "
                    f"{self.host_command[0]!r} {problem} the host (exit {code}{said}). Set the controller's host "
                    f"reboot command to one this node's OS has (flag --host-reboot-command, stack setting "
                    f"hostRebootCommand; Bottlerocket: 'apiclient reboot'; docs/operations.md, "
                    f"\"hostReboot on every node OS\"); {where}")
        verdict = f"{failed.get('reason', 'Failed')}: {failed.get('message', '').rstrip('.')}"
        ran = f"; its command exited {code}{said}" if code is not None else ""
        return f"the reboot {self._where(op)} failed on node {node} ({verdict}){ran}; {where}"

    def _container_end(self, op: Operation) -> dict[str, Any]:
        """The terminated state of the Job's container (exit code, termination message), or {}
        where its pod is gone or never ran (one LIST, made only once the Job has failed)."""
        try:
            pods = self._kube.list_items(f"/api/v1/namespaces/{self.namespace}/pods",
                                         label_selector=f"batch.kubernetes.io/job-name={job_name(op)}")
        except KubeError:
            return {}
        for pod in pods:
            for c in (pod.get("status") or {}).get("containerStatuses") or []:
                ended = (c.get("state") or {}).get("terminated")
                if c.get("name") == "reboot" and isinstance(ended, dict):
                    return ended
        return {}


def _one_line(text: str, limit: int = api.OUTPUT_REPORT_CHARS) -> str:
    """The container's words (its termination message: the end of its log) as the record and
    the events show them: one line, redacted as every program's output is, cut."""
    return redact(" ".join(str(text).split()), limit).rstrip(".")


def _build(s: Mapping[str, Any], c: BuildContext) -> Provider:
    return HostRebootProvider(c.kube, c.clock, c.names, namespace=c.namespace,
                              image=str(s.get("image") or c.image), timeout=float(s["timeoutSeconds"]),
                              nodes=c.nodes, host_command=c.host_reboot_command,
                              image_pull_secrets=c.image_pull_secrets)


KIND = ProviderKind(
    "hostReboot", (RepairAction.RESET.value,),
    "Reboots the node's host with a short-lived privileged Job pinned to the node; done when the "
    "node reports a new boot id and is Ready.",
    (Setting("image", "string", "Image of the reboot Job (needs nsenter; the autoclusters image "
             "by default); another must be an entry of the allow-list allowLists.images.", allow_list="images"),
     Setting("timeoutSeconds", "integer", "The reset fails when the node is not back Ready with a "
             "new boot id this long after the Job started.", minimum=1, default=600)),
    rules=(Rule("batch", "jobs", ("get", "create", "delete"), namespaced=True),),
    build=_build)
