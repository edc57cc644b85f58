"""Every Kubernetes object of one stack, from its ``StackConfig``.

``stack_objects`` is the list the Pulumi components register (``components/``; a unit test
runs them under Pulumi's mock engine and compares) and the list ``manifests/`` is rendered
from (``components/render.py``), so what Pulumi deploys and what the YAML holds cannot drift.
Left out: the nodes of a pool (kwok nodes, or labels on existing nodes), which are not
objects of the stack but of the cluster it runs on.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from autoclusters import api
from autoclusters.allow_lists import NONE as NO_ENTRIES
from autoclusters.allow_lists import AllowLists
from autoclusters.api import DEFAULT_KERNEL_LOG_SOURCE, KernelLogSource
from autoclusters.deploy import (
    CONTROLLER_SERVICE_ACCOUNT,
    admission,
    cluster_scoped_name,
    controller,
    crds,
    detector,
    reboot_job,
    workloads,
)
from autoclusters.deploy.detector_settings import DetectorSettings
from autoclusters.deploy.monitoring import monitoring_objects
from autoclusters.deploy.nvml_reach import NvmlReach
from autoclusters.deploy.policy_bundle import policies_dir as bundled_policies
from autoclusters.deploy.pool_roles import pool_roles
from autoclusters.deploy.providers import granted_providers
from autoclusters.deploy.slurm_bridge import slurm_bridge_rbac
from autoclusters.deploy.stack_config import StackConfig
from autoclusters.names import Names
from autoclusters.pools import default_pool
from autoclusters.pools.pool_config import gpu_node_pool_object

CONTROLLER_REPLICAS = 2
JOB_SHAPE_POLICY = "autoclusters-controller-jobs"


def rbac_objects(names: Names, namespace: str, *, slurm_bridge: bool = False, local: bool = False,
                 providers: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Every service account, role and binding of the system, service accounts first; the
    Slurm bridge's when asked (``StackConfig.slurm_bridge``: a pool of the stack enables Slurm);
    the pool viewer, editor and author roles (``deploy.pool_roles``); the controller's with the
    rights of ``providers`` (``StackConfig.granted_providers``: those
    in use), by default of every provider but the simulated, whose rights go to a local cluster
    only (``granted_providers``)."""
    objs = [workloads.service_account(CONTROLLER_SERVICE_ACCOUNT, namespace), *controller.controller_rbac(
        names, namespace, webhook_config=webhook_config_name(namespace),
        providers=granted_providers(local) if providers is None else providers)]
    objs += detector.detector_rbac(names, namespace, local=local)
    if slurm_bridge:
        objs += slurm_bridge_rbac(names, namespace)
    objs += admission.webhook_rbac(namespace)
    objs += pool_roles(names, namespace)  # who may write pools: viewer, editor (held), author
    order = {"ServiceAccount": 0, "ClusterRole": 1, "Role": 1, "ClusterRoleBinding": 2, "RoleBinding": 2}
    return sorted(objs, key=lambda o: order.get(o["kind"], 3))


def webhook_config_name(namespace: str) -> str:
    return cluster_scoped_name(admission.WEBHOOK_CONFIG_NAME, namespace)


def detector_daemonset(names: Names, namespace: str, image: str, *, await_rollout: bool = True,
                       condition_codes: tuple[str, ...] = (),
                       kernel_log_source: KernelLogSource = DEFAULT_KERNEL_LOG_SOURCE,
                       settings: DetectorSettings | None = None, nvml: NvmlReach | None = None) -> dict[str, Any]:
    """The detector DaemonSet; without ``await_rollout`` Pulumi does not wait for a pod on every
    GPU node (the shared local cluster, where nodes of other pools may be mid-repair); ``nvml``:
    the stack's ``nvml`` setting (deploy/nvml_reach.py)."""
    obj = workloads.detector_daemonset(names, namespace, image, (settings or DetectorSettings()).args(),
                                       condition_codes=condition_codes, kernel_log_source=kernel_log_source,
                                       nvml=nvml)
    if not await_rollout:
        obj["metadata"]["annotations"] = {"pulumi.com/skipAwait": "true"}
    return obj


def controller_objects(names: Names, namespace: str, image: str, replicas: int = CONTROLLER_REPLICAS,
                       event_source: str = workloads.CONTROLLER, shards: int = 1,
                       host_reboot_command: str = api.HOST_REBOOT_COMMAND,
                       flags: tuple[tuple[str, str], ...] = (),
                       allow_lists: AllowLists = NO_ENTRIES) -> list[dict[str, Any]]:
    """The controller Deployment and its PodDisruptionBudget; with ``shards`` > 1, one of each
    per shard (docs/controller.md, "Scaling out"); and the policy that admits the controller's
    Jobs only as the host-reboot Job, with its image or an entry of ``allowLists.images``
    (``deploy.reboot_job``)."""
    jobs = cluster_scoped_name(JOB_SHAPE_POLICY, namespace)
    out: list[dict[str, Any]] = [
        reboot_job.job_shape_policy(jobs, namespace=namespace, own_image=image,
                                    listed=list(allow_lists.images.values()),
                                    host_command=api.host_reboot_argv(host_reboot_command)),
        reboot_job.job_shape_binding(jobs)]
    for shard in range(shards):
        out += [workloads.controller_deployment(names, namespace, image, replicas, event_source, shards=shards,
                                                shard=shard, host_reboot_command=host_reboot_command,
                                                webhook_config=webhook_config_name(namespace), flags=flags,
                                                allow_lists=allow_lists),
                workloads.controller_pdb(namespace, shards=shards, shard=shard)]
    return out


def webhook_tls_secret(namespace: str, *, cert_pem: str = "", key_pem: str = "", ca_pem: str = "") -> dict[str, Any]:
    return workloads.webhook_tls_secret(namespace, workloads.WEBHOOK_TLS_SECRET, cert_pem=cert_pem, key_pem=key_pem,
                                        ca_pem=ca_pem)


def policy_name(namespace: str) -> str:
    return cluster_scoped_name(admission.POLICY_NAME, namespace)


def webhook_configuration(names: Names, namespace: str, webhook_url: str | None, ca_pem: str = "") -> dict[str, Any]:
    return admission.webhook_configuration(names, ca_bundle=ca_pem.encode(), url=webhook_url, namespace=namespace,
                                           name=webhook_config_name(namespace))


def webhook_objects(names: Names, namespace: str, image: str, opa_image: str, *, webhook_url: str | None = None,
                    policies_dir: Path | None = None, ca_pem: str = "", cert_pem: str = "", key_pem: str = "",
                    allow_lists: AllowLists = NO_ENTRIES) -> list[dict[str, Any]]:
    """The webhook (TLS Secret, policy ConfigMap, Deployment, Service, PDB), the CEL floor
    (ValidatingAdmissionPolicy + binding) and the ValidatingWebhookConfiguration, in that order."""
    pname = policy_name(namespace)
    return [
        webhook_tls_secret(namespace, cert_pem=cert_pem, key_pem=key_pem, ca_pem=ca_pem),
        workloads.policy_configmap(namespace, workloads.POLICY_CONFIGMAP, Path(policies_dir or bundled_policies()),
                                   admission.policy_data_document(names, admission.default_controllers(namespace),
                                                                  admission.default_node_agents(namespace),
                                                                  allow_lists)),
        workloads.webhook_deployment(names, namespace, image, opa_image, tls_secret=workloads.WEBHOOK_TLS_SECRET,
                                     policy_configmap=workloads.POLICY_CONFIGMAP, allow_lists=allow_lists),
        workloads.webhook_service(namespace),
        workloads.pod_disruption_budget(workloads.WEBHOOK, namespace),
        admission.admission_policy(names, admission.default_controllers(namespace), name=pname,
                                   node_agents=admission.default_node_agents(namespace)),
        admission.admission_policy_binding(policy_name=pname),
        webhook_configuration(names, namespace, webhook_url, ca_pem),
    ]


def stack_objects(config: StackConfig, *, ca_pem: str = "", cert_pem: str = "", key_pem: str = ""
                  ) -> list[dict[str, Any]]:
    """Every Kubernetes object ``AutoClusters`` registers for ``config``, in its order.

    The webhook's certificate is made at deploy time; the PEMs default to empty (the
    rendered manifests leave the Secret out and the caBundle to cert-manager)."""
    names, ns = config.names, config.namespace
    return [config.pods.customize(obj) for obj in [
        workloads.namespace(ns),
        *crds.crds(names),
        *rbac_objects(names, ns, slurm_bridge=config.slurm_bridge, local=config.local,
                      providers=config.granted_providers),
        detector_daemonset(names, ns, config.image, await_rollout=not config.local,
                           condition_codes=config.detector_condition_codes,
                           kernel_log_source=config.kernel_log_source, settings=config.detector, nvml=config.nvml),
        default_pool.configmap(config.default_pool, ns),
        *controller_objects(names, ns, config.image, event_source=config.event_source,
                            shards=config.controller_shards, host_reboot_command=config.host_reboot_command,
                            flags=config.controller_flags, allow_lists=config.allow_lists),
        *monitoring_objects(config.monitoring, ns, names),
        *(gpu_node_pool_object(pool, names) for pool in config.pools),
        *webhook_objects(names, ns, config.image, config.opa_image, webhook_url=config.webhook_url,
                         ca_pem=ca_pem, cert_pem=cert_pem, key_pem=key_pem, allow_lists=config.allow_lists),
    ]]
