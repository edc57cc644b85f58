"""The system's workloads as plain dicts: namespace, detector DaemonSet, controller and
webhook Deployments, their Services and PodDisruptionBudgets.

The Pulumi components and ``manifests/`` are both built from these functions. The pods run
the ``autoclusters`` image; on the local (kwok) cluster kwok only simulates them and the
same commands run on the host under the service accounts' tokens (docs/deploy.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autoclusters import api
from autoclusters.allow_lists import FLAG as ALLOW_LISTS_FLAG
from autoclusters.allow_lists import NONE as NO_ENTRIES
from autoclusters.allow_lists import AllowLists
from autoclusters.api import DEFAULT_KERNEL_LOG_SOURCE, KernelLogSource
from autoclusters.deploy import (
    CONTROLLER_SERVICE_ACCOUNT,
    DETECTOR_SERVICE_ACCOUNT,
    WEBHOOK_SERVICE_ACCOUNT,
)
from autoclusters.deploy.nvml_reach import HOST_MOUNT, NvmlReach, apply_to_pod
from autoclusters.names import Names

PART_OF = "autoclusters"
DETECTOR = "autoclusters-detector"
CONTROLLER = "autoclusters-controller"
WEBHOOK = "autoclusters-webhook"
WEBHOOK_PORT = 8443
WEBHOOK_PORT_NAME = "https"  # /validate and /metrics
OPA_PORT = 8181
OPA_DIAGNOSTIC_PORT = 8282
CONTROLLER_METRICS_PORT = 9102
DETECTOR_METRICS_PORT = 9103
METRICS_PORT_NAME = "metrics"  # the containers' metrics port, by name (the PodMonitors scrape it)
INSTANCE_LABEL = "app.kubernetes.io/instance"  # which controller shard a pod runs (sharded only)
WEBHOOK_TLS_SECRET = "autoclusters-webhook-tls"
# The CA that signs it, which the controller keeps (controller/webhook_certs.py); the webhook never reads it.
WEBHOOK_CA_SECRET = "autoclusters-webhook-ca"
POLICY_CONFIGMAP = "autoclusters-policies"
# The policy ConfigMap's data document (data.autoclusters.config): OPA loads a .json file among its
# paths as data at the root, so the sidecar has this installation's names from its own start.
POLICY_DATA_FILE = "data.json"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_TAINT = "nvidia.com/gpu"
# `autoclusters controller run` reads every setting from AUTOCLUSTERS_CONTROLLER_<NAME>.
EVENT_SOURCE_ENV = "AUTOCLUSTERS_CONTROLLER_EVENT_SOURCE"

# The commands the pods run; the local mode runs the same ones on the host. The controller
# is always leader-elected (its Lease lives in the namespace given here).
CONTROLLER_COMMAND = ["autoclusters", "controller", "run"]
# the controller's container: it reads its own image there (controller/own_image.py)
CONTROLLER_CONTAINER = "controller"
DETECTOR_COMMAND = ["autoclusters", "detector", "run"]
WEBHOOK_COMMAND = ["autoclusters", "webhook", "serve"]


def labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": component, "app.kubernetes.io/part-of": PART_OF}


def _selector(component: str) -> dict[str, Any]:
    return {"matchLabels": {"app.kubernetes.io/name": component}}


def _names_env(names: Names) -> list[dict[str, Any]]:
    return [
        {"name": "AUTOCLUSTERS_DOMAIN", "value": names.domain},
        {"name": "AUTOCLUSTERS_CONDITION_PREFIX", "value": names.prefix},
    ]


def scrape_annotations(port: int, scheme: str = "http") -> dict[str, str]:
    """The pod annotations a Prometheus configured by hand reads to find the metrics (the
    ``kubernetes-pods`` job of Prometheus' example configuration and its Helm chart); the
    Prometheus Operator uses the PodMonitors instead (``deploy/monitoring.py``)."""
    out = {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}
    if scheme != "http":
        out["prometheus.io/scheme"] = scheme
    return out


def webhook_service_dns(ns: str) -> str:
    """The name the API server calls the webhook by, which its serving certificate is for."""
    return f"{WEBHOOK}.{ns}.svc"


def webhook_certificate_hosts(ns: str) -> list[str]:
    """The DNS names the webhook's serving certificate is for: the name the API server calls
    and its cluster-domain form."""
    svc = webhook_service_dns(ns)
    return [svc, f"{svc}.cluster.local"]


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


_RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}


# Reading the host's /dev/kmsg from a container takes three things (docs/deploy.md, "What
# the detector needs"): the device cgroup must allow the character device 1:11, which only
# a privileged container gets (a hostPath mount of the device alone gives EPERM on open);
# CAP_SYSLOG where kernel.dmesg_restrict=1 (Debian's and Ubuntu's default); and uid 0,
# because a non-root process loses its capabilities at exec (Kubernetes sets no ambient
# capabilities). The root filesystem stays read-only and the host mounts are read-only.
DETECTOR_SECURITY_CONTEXT: dict[str, Any] = {
    "privileged": True,
    "runAsUser": 0,
    "runAsNonRoot": False,
    "readOnlyRootFilesystem": True,
}


# Helm keeps an object with this annotation at ``helm uninstall`` (and Pulumi and kubectl
# ignore it): the CRDs and the namespace, so that the repair records, the pools and the
# webhook's TLS Secret (the controller's, never the chart's) outlive the release
# (docs/deploy.md, "With Helm").
HELM_KEEP = {"helm.sh/resource-policy": "keep"}


def namespace(name: str) -> dict[str, Any]:
    """The system namespace; ``privileged`` because the detector mounts host devices."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "annotations": dict(HELM_KEEP), "labels": {
            "app.kubernetes.io/part-of": PART_OF,
            "pod-security.kubernetes.io/enforce": "privileged",
        }},
    }


# The journal source reads the host's journal as an OS root (detector/journal.py): the host's
# /var/log and /run/log under JOURNAL_ROOT. The parents, not the journal directories: a missing
# hostPath is created on the host (containerd; DirectoryOrCreate likewise), and an empty
# /var/log/journal turns a host's journald (Storage=auto) persistent. /var/log is always there;
# /run/log at most gains an empty directory on a tmpfs, where journald makes it anyway.
JOURNAL_ROOT = "/host-log"  # used only where the NVML host-root mount (/host) does not show the host's /
_JOURNAL_HOST_PATHS = [("journal-var-log", "/var/log", "Directory"),
                       ("journal-run-log", "/run/log", "DirectoryOrCreate")]


def detector_daemonset(names: Names, ns: str, image: str, extra_args: Sequence[str] = (), *,
                       condition_codes: tuple[str, ...] = (),
                       kernel_log_source: KernelLogSource = DEFAULT_KERNEL_LOG_SOURCE,
                       nvml: NvmlReach | None = None) -> dict[str, Any]:
    """One detector per GPU node: a node with a GPU product label or in any pool; ``extra_args``
    after its own (the ``detector`` stack setting's, ``DetectorSettings.args``).

    It tolerates every taint a sick or repaired GPU node carries (the GPU taint, the
    maintenance taint, cordon), so it keeps reporting while the node is under repair. It
    reads the kernel log from ``/dev/kmsg`` or, with ``kernel_log_source`` journal, from the
    host's journal, and mounts only what that source reads. ``nvml`` (the stack's ``nvml``
    setting; default: ``NvmlReach()``) adds the host mount, the flags and the runtime class
    through which the detector finds the driver's NVML.
    """
    # /proc/driver/nvidia and /sys/class/infiniband are not mounted: the container's own
    # procfs and sysfs show the host's driver entries and InfiniBand devices there. A mount
    # would keep the pod from starting: runc refuses any mount inside /proc ("cannot be
    # mounted because it is inside /proc"), and on a node without InfiniBand the missing
    # /sys/class/infiniband can be created neither on the host nor in the container's sysfs.
    reach = nvml or NvmlReach()
    if kernel_log_source == KernelLogSource.JOURNAL:
        # The host's root, mounted for NVML at HOST_MOUNT (recursively, HostToContainer), already
        # shows /var/log and /run/log: the journal is read there, with no mounts of its own.
        # Otherwise it gets its own root, never nested inside a mount of another host directory.
        if reach.enabled and reach.host_root == "/":
            root, log_paths = HOST_MOUNT, []
        else:
            root, log_paths = JOURNAL_ROOT, [(n, p, JOURNAL_ROOT + p, t) for n, p, t in _JOURNAL_HOST_PATHS]
        log_args = ["--kernel-log-source", kernel_log_source.value, "--journal-root", root]
    elif kernel_log_source == KernelLogSource.KMSG:
        log_paths, log_args = [("kmsg", "/dev/kmsg", "/dev/kmsg", "CharDevice")], []
    else:
        raise ValueError(f"the DaemonSet reads the kernel log from kmsg or journal, not {kernel_log_source}")
    # The driver's NVML is reached through the host root mount nvml.apply_to_pod adds.
    host_paths = log_paths  # name, host, container, type
    obj: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DETECTOR, "namespace": ns, "labels": labels(DETECTOR)},
        "spec": {
            "selector": _selector(DETECTOR),
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {"labels": labels(DETECTOR), "annotations": scrape_annotations(DETECTOR_METRICS_PORT)},
                "spec": {
                    "serviceAccountName": DETECTOR_SERVICE_ACCOUNT,
                    "priorityClassName": "system-node-critical",
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": GPU_PRODUCT_LABEL, "operator": "Exists"}]},
                            {"matchExpressions": [{"key": names.pool_label, "operator": "Exists"}]},
                        ]}}},
                    "tolerations": [
                        {"key": GPU_TAINT, "operator": "Exists"},
                        {"key": names.taint_key, "operator": "Exists"},
                        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                    ],
                    "containers": [{
                        "name": "detector",
                        "image": image,
                        "args": [*DETECTOR_COMMAND[1:], *log_args, "--metrics-port", str(DETECTOR_METRICS_PORT),
                                 *(["--condition-codes", ",".join(condition_codes)] if condition_codes else []),
                                 *extra_args],
                        # HOST_IP: an arg may say $(HOST_IP), e.g. --dcgm-exporter-url for an exporter on
                        # the host network (docs/detector.md, "DCGM on GPU Operator clusters")
                        "env": [_field_env("NODE_NAME", "spec.nodeName"), _field_env("HOST_IP", "status.hostIP"),
                                *_names_env(names)],
                        "ports": [{"name": METRICS_PORT_NAME, "containerPort": DETECTOR_METRICS_PORT}],
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                      "limits": {"cpu": "100m", "memory": "64Mi"}},
                        "securityContext": DETECTOR_SECURITY_CONTEXT,
                        "volumeMounts": [{"name": n, "mountPath": c, "readOnly": True} for n, _, c, _ in host_paths],
                    }],
                    "volumes": [{"name": n, "hostPath": {"path": p, "type": t}} for n, p, _, t in host_paths],
                },
            },
        },
    }
    pod = obj["spec"]["template"]["spec"]
    apply_to_pod(reach, pod, pod["containers"][0])
    return obj


def controller_name(shards: int = 1, shard: int = 0) -> str:
    """The controller Deployment of one shard: the unsharded name with one shard, else
    ``<name>-shard-<i>`` (without N: a change of N updates the Deployments of the shards both
    layouts have in place, adds or removes the rest)."""
    return CONTROLLER if shards == 1 else f"{CONTROLLER}-shard-{shard}"


def _controller_selector(shards: int, shard: int) -> dict[str, Any]:
    """One shard's pods (with one shard: every controller pod, as before sharding)."""
    if shards == 1:
        return _selector(CONTROLLER)
    return {"matchLabels": {"app.kubernetes.io/name": CONTROLLER, INSTANCE_LABEL: controller_name(shards, shard)}}


def controller_deployment(names: Names, ns: str, image: str, replicas: int = 2,
                          event_source: str = CONTROLLER, *, shards: int = 1, shard: int = 0,
                          host_reboot_command: str = api.HOST_REBOOT_COMMAND,
                          webhook_config: str | None = None,
                          flags: tuple[tuple[str, str], ...] = (),
                          allow_lists: AllowLists = NO_ENTRIES) -> dict[str, Any]:
    """Two replicas behind leader election (always on; the Lease is in ``ns``): one repairs,
    the other takes over when the leader is lost. ``event_source`` is what its events carry
    as ``source.component`` / ``reportingComponent``. With ``shards`` > 1, the Deployment of
    shard ``shard``: its own replicas, Lease and pods (``--shards``/``--shard``; the pools it
    owns: controller.shards). With ``webhook_config``, shard 0's leader keeps the webhook's
    serving certificate (``WEBHOOK_TLS_SECRET``) and that configuration's caBundle."""
    name = controller_name(shards, shard)
    selector = _controller_selector(shards, shard)
    sharding = ["--shards", str(shards), "--shard", str(shard)] if shards > 1 else []
    reboot = ([] if host_reboot_command == api.HOST_REBOOT_COMMAND
              else ["--host-reboot-command", host_reboot_command])
    certs = (["--webhook-tls-secret", WEBHOOK_TLS_SECRET, "--webhook-config", webhook_config]
             if webhook_config and shard == 0 else [])
    certs += _allow_lists_args(allow_lists)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels(CONTROLLER)},
        "spec": {
            "replicas": replicas,
            "selector": selector,
            "template": {
                "metadata": {"labels": {**labels(CONTROLLER), **selector["matchLabels"]},
                             "annotations": scrape_annotations(CONTROLLER_METRICS_PORT)},
                "spec": {
                    "serviceAccountName": CONTROLLER_SERVICE_ACCOUNT,
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "podAffinityTerm": {"labelSelector": selector,
                                            "topologyKey": "kubernetes.io/hostname"}}]}},
                    "containers": [{
                        "name": CONTROLLER_CONTAINER,
                        "image": image,
                        "args": [*CONTROLLER_COMMAND[1:], "--namespace", ns, "--identity", "$(POD_NAME)",
                                 "--metrics-port", str(CONTROLLER_METRICS_PORT),
                                 *sharding, *reboot, *certs, *(word for flag in flags for word in flag)],
                        "env": [_field_env("POD_NAME", "metadata.name"),
                                _field_env("POD_NAMESPACE", "metadata.namespace"), *_names_env(names),
                                {"name": EVENT_SOURCE_ENV, "value": event_source}],
                        "ports": [{"name": METRICS_PORT_NAME, "containerPort": CONTROLLER_METRICS_PORT}],
                        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                                      "limits": {"cpu": "1", "memory": "512Mi"}},
                        "securityContext": _RESTRICTED,
                    }],
                },
            },
        },
    }


def pod_disruption_budget(component: str, ns: str) -> dict[str, Any]:
    """Keeps one replica of ``component`` through voluntary disruptions (drains of its own node)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": component, "namespace": ns, "labels": labels(component)},
        "spec": {"minAvailable": 1, "selector": _selector(component)},
    }


def controller_pdb(ns: str, *, shards: int = 1, shard: int = 0) -> dict[str, Any]:
    """Keeps one replica of each controller shard through drains (one PDB per shard: one over
    them all would let a drain take a whole shard while another shard's replicas count)."""
    if shards == 1:
        return pod_disruption_budget(CONTROLLER, ns)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": controller_name(shards, shard), "namespace": ns, "labels": labels(CONTROLLER)},
        "spec": {"minAvailable": 1, "selector": _controller_selector(shards, shard)},
    }


def _allow_lists_args(lists: AllowLists) -> list[str]:
    """The operator's allow-lists as a flag (none when they are empty, the flag's default)."""
    return [] if lists.empty else [ALLOW_LISTS_FLAG, lists.flag_value()]


def webhook_deployment(names: Names, ns: str, image: str, opa_image: str, *, tls_secret: str,
                       policy_configmap: str, replicas: int = 2, allow_lists: AllowLists = NO_ENTRIES
                       ) -> dict[str, Any]:
    """The admission webhook with an OPA sidecar on loopback that serves the Rego from a ConfigMap."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": WEBHOOK, "namespace": ns, "labels": labels(WEBHOOK)},
        "spec": {
            "replicas": replicas,
            "selector": _selector(WEBHOOK),
            "template": {
                "metadata": {"labels": labels(WEBHOOK), "annotations": scrape_annotations(WEBHOOK_PORT, "https")},
                "spec": {
                    "serviceAccountName": WEBHOOK_SERVICE_ACCOUNT,
                    # No API rights and nothing in its deployed mode calls the API
                    # (deploy.admission.webhook_rbac): no token in the pod either.
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "webhook",
                            "image": image,
                            "args": [*WEBHOOK_COMMAND[1:], "--port", str(WEBHOOK_PORT),
                                     "--tls-cert", "/tls/tls.crt", "--tls-key", "/tls/tls.key",
                                     "--opa-url", f"http://127.0.0.1:{OPA_PORT}", *_allow_lists_args(allow_lists)],
                            "env": _names_env(names),
                            "ports": [{"name": WEBHOOK_PORT_NAME, "containerPort": WEBHOOK_PORT}],
                            "readinessProbe": {"httpGet": {"path": "/healthz", "port": WEBHOOK_PORT,
                                                           "scheme": "HTTPS"}},
                            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                          "limits": {"cpu": "1", "memory": "256Mi"}},
                            "securityContext": _RESTRICTED,
                            "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True}],
                        },
                        {
                            "name": "opa",
                            "image": opa_image,
                            # The API stays on loopback; only /health is served on the pod IP.
                            # --ignore: the kubelet mounts a ConfigMap as symlinks into a hidden
                            # "..<timestamp>" directory, also reachable as "..data"; OPA's loader walks
                            # both, and every module loaded three times fails its start ("package
                            # annotation redeclared"; tests/unit/deploy/test_workloads_opa_sidecar.py).
                            "args": ["run", "--server", f"--addr=127.0.0.1:{OPA_PORT}",
                                     f"--diagnostic-addr=0.0.0.0:{OPA_DIAGNOSTIC_PORT}",
                                     "--disable-telemetry", "--ignore=..*", "/policies"],
                            "readinessProbe": {"httpGet": {"path": "/health", "port": OPA_DIAGNOSTIC_PORT}},
                            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                          "limits": {"cpu": "1", "memory": "256Mi"}},
                            "securityContext": _RESTRICTED,
                            "volumeMounts": [{"name": "policies", "mountPath": "/policies", "readOnly": True}],
                        },
                    ],
                    "volumes": [
                        {"name": "tls", "secret": {"secretName": tls_secret}},
                        {"name": "policies", "configMap": {"name": policy_configmap}},
                    ],
                },
            },
        },
    }


def webhook_service(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": WEBHOOK, "namespace": ns, "labels": labels(WEBHOOK)},
        "spec": {
            "selector": {"app.kubernetes.io/name": WEBHOOK},
            "ports": [{"name": WEBHOOK_PORT_NAME, "port": 443, "targetPort": WEBHOOK_PORT}],
        },
    }


def service_account(name: str, ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/part-of": PART_OF}}}


def cluster_role_binding(name: str, service_account: str, ns: str) -> dict[str, Any]:
    """Binds the ClusterRole ``name`` (the binding takes its name) to one service account."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": PART_OF}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": ns}]}


def webhook_tls_secret(ns: str, name: str, *, cert_pem: str, key_pem: str, ca_pem: str) -> dict[str, Any]:
    """The webhook's serving certificate (``kubernetes.io/tls``), mounted at ``/tls``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns, "labels": labels(WEBHOOK)},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": cert_pem, "tls.key": key_pem, "ca.crt": ca_pem},
    }


def policy_files(policies_dir: Path) -> dict[str, str]:
    """The Rego modules under ``policies_dir`` (tests left out), keyed for a ConfigMap.

    ConfigMap keys cannot hold '/', so ``admission/src.rego`` becomes ``admission.src.rego``;
    OPA reads packages from the file contents, not the paths, so the flat layout loads the same.
    """
    files = {}
    for path in sorted(policies_dir.rglob("*.rego")):
        if path.name.endswith("_test.rego"):
            continue
        files[".".join(path.relative_to(policies_dir).parts)] = path.read_text()
    if not files:
        raise FileNotFoundError(f"no Rego modules under {policies_dir}")
    return files


def policy_configmap(ns: str, name: str, policies_dir: Path, data_document: dict[str, Any] | None = None
                     ) -> dict[str, Any]:
    """The Rego the webhook's OPA sidecar serves (mounted at ``/policies``), and with
    ``data_document`` the installation's policy configuration as ``POLICY_DATA_FILE``: loaded
    by OPA at every start, so an OPA-only restart (the sidecar's container restarted, not the
    pod) keeps it; the webhook's push at its own start would not come again."""
    data = policy_files(policies_dir)
    if data_document is not None:
        data[POLICY_DATA_FILE] = json.dumps(data_document, indent=2, sort_keys=True) + "\n"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels(WEBHOOK)},
        "data": data,
    }
