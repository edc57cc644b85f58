"""The Cluster API provider: repairs by deleting the Machine that owns the node.

- Where the Machines are: in the management cluster. ``managementCluster: secret`` reads its
  kubeconfig from the Secret ``CLUSTERAPI_SECRET`` of the controller's namespace (key
  ``kubeconfigKey``, ``value`` by default, as Cluster API's own ``<cluster>-kubeconfig``
  Secrets have it); ``self`` (the default) is a self-hosted Cluster API, whose Machines live in
  the cluster the controller runs in. Nodes are always read from the controller's own cluster
  (the workload cluster); only the Machine requests (discovery, get, patch, delete) go to the
  management cluster. The Secret is read again at most every ``SECRET_REREAD_SECONDS``, and a
  client is built once per resourceVersion of it, so a rotated kubeconfig is used within that
  time; a missing or unusable one fails the operation with the Secret and the reason.
- reset and replace are one repair, what Cluster API's default MachineHealthCheck remediation
  does: delete the Machine. Cluster API drains and deletes its node, and the owning MachineSet
  creates a Machine in its place whose node joins the pool. Cluster API has no reboot verb, so
  a reset is carried out as a replacement (``KIND.carries_out``): the controller records and
  proves it as one, and never waits for a new boot id on the old node's name.
- Done when the Machine and the old node are both gone and a new Ready node of the pool, from a
  Machine of the same namespace, is matched to the operation (one for one, as for Karpenter:
  the operation id is written on the new node with a resourceVersion-guarded patch, so two
  replacements never count one node). A Machine gone while its node stays (Cluster API gives up
  deleting a node after the Machine's ``nodeDeletionTimeout``) is not a finished replacement:
  the old node could still run work and report faults.

The node names its Machine through the ``cluster.x-k8s.io/machine`` and
``cluster.x-k8s.io/cluster-namespace`` annotations that Cluster API writes on every node.
The operation id is written on the Machine, so a retried ``drive`` does nothing twice.
"""

from __future__ import annotations

import base64
import contextlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from autoclusters.api import RepairAction
from autoclusters.clock import Clock
from autoclusters.kube import Forbidden, Kube, KubeError, NotFound
from autoclusters.kube.fence import Fenced
from autoclusters.kube.loader import load_kube_text
from autoclusters.names import Names
from autoclusters.providers.base import BuildContext, NodeLookup, Provider, ProviderError
from autoclusters.providers.declaration import CredentialSource, ProviderKind, Rule, Setting
from autoclusters.providers.remote_reset import ResetFailure, read_secret
from autoclusters.providers.replacement import ReplacementClaims
from autoclusters.providers.types import Operation, ProviderState, ProviderView

# The Cluster API versions of Machine the clusterapi provider speaks, the default first:
# v1beta2 is Cluster API's storage version from v1.11 on; older releases serve only v1beta1.
CLUSTERAPI_VERSIONS = ("v1beta2", "v1beta1")
CAPI_GROUP = "cluster.x-k8s.io"
CAPI_VERSION = CLUSTERAPI_VERSIONS[0]
MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
NAMESPACE_ANNOTATION = "cluster.x-k8s.io/cluster-namespace"
# Where the Machines are: "self" = the controller's own cluster (a self-hosted Cluster API);
# "secret" = the management cluster of the kubeconfig in CLUSTERAPI_SECRET.
MANAGEMENT_CLUSTERS = ("self", "secret")
# The management cluster's kubeconfig, written by the operator in the controller's namespace;
# the controller may read this one Secret only. Its key: Cluster API's own kubeconfig Secrets
# (<cluster>-kubeconfig) hold theirs under "value".
CLUSTERAPI_SECRET = "autoclusters-clusterapi"
KUBECONFIG_KEY = "value"
SECRET_REREAD_SECONDS = 30.0
# What the provider asks of the cluster that holds the Machines (the workload cluster's own for
# ``managementCluster: self``; the kubeconfig's identity needs them in the management cluster),
# beside discovery of the group, which Kubernetes grants every authenticated user
MACHINE_RULES = (Rule(CAPI_GROUP, "machines", ("get", "patch", "delete")),)
# kubeconfig entries that name files: a Secret's kubeconfig must carry their contents (*-data)
_FILE_ENTRIES = {"cluster": ("certificate-authority",), "user": ("client-certificate", "client-key", "tokenFile")}


@dataclass(frozen=True)
class MachineRef:
    namespace: str
    name: str

    def path(self, version: str = CAPI_VERSION) -> str:
        return Kube.custom_path(CAPI_GROUP, version, "machines", self.name, self.namespace)


def machine_ref(node: dict[str, Any] | None) -> MachineRef | None:
    """The Machine that owns ``node``, from the annotations Cluster API writes."""
    ann = ((node or {}).get("metadata") or {}).get("annotations") or {}
    name, ns = ann.get(MACHINE_ANNOTATION), ann.get(NAMESPACE_ANNOTATION)
    return MachineRef(ns, name) if name and ns else None


def check_kubeconfig(text: str) -> str:
    """The API server a kubeconfig's current context names; raises ValueError saying what makes
    it unusable from a Secret: not a kubeconfig, no current context or server, files named
    instead of inlined, or an exec / auth-provider plugin (a program the Secret would have the
    controller run; use a token or a client certificate)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"is not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise ValueError("is not a kubeconfig (a YAML mapping with clusters, users and contexts)")

    def named(section: str, name: Any) -> dict[str, Any] | None:
        entries = doc.get(section) or []
        found = next((e for e in entries if isinstance(e, dict) and e.get("name") == name), None) \
            if isinstance(entries, list) else None
        value = (found or {}).get(section[:-1])
        return value if isinstance(value, dict) else None

    current = doc.get("current-context")
    context = named("contexts", current)
    if not current or context is None:
        raise ValueError(f"has no current context (current-context: {current or 'unset'})")
    cluster = named("clusters", context.get("cluster"))
    if cluster is None or not cluster.get("server"):
        raise ValueError(f"context {current}'s cluster {context.get('cluster')!r} names no server")
    user = named("users", context.get("user")) or {}
    for plugin in ("exec", "auth-provider"):
        if plugin in user:
            raise ValueError(f"user {context.get('user')!r} authenticates with an {plugin} plugin, which would run a "
                             "program the Secret names: use a token or a client certificate")
    for section, entries in (("cluster", cluster), ("user", user)):
        for entry in _FILE_ENTRIES[section]:
            if entries.get(entry):
                raise ValueError(f"{section} entry {entry} names a file, which the controller does not have: "
                                 f"inline it ({entry}-data)" if entry != "tokenFile" else
                                 "user entry tokenFile names a file, which the controller does not have: use token")
    return str(cluster["server"])


# kubeconfig text -> a client of the API server it names (a test's own: a fake API server)
Connect = Callable[[str], Kube]


def connect_kubeconfig(text: str) -> Kube:
    """The project's client (kube/loader.py) for a checked kubeconfig (``check_kubeconfig``)."""
    return load_kube_text(text, user_agent="autoclusters")


class ManagementCluster:
    """The API server that holds the Machines: the workload cluster's own client (``namespace``
    unset: a self-hosted Cluster API), or one built from the kubeconfig in Secret
    ``namespace/CLUSTERAPI_SECRET`` (key ``key``): read again at most every ``reread_seconds``,
    a new client for each new resourceVersion (``connect``: ``connect_kubeconfig``); its
    requests are counted and fenced with the workload client's. ``kube()`` raises ProviderError
    naming the Secret and what is wrong."""

    def __init__(self, workload: Kube, clock: Clock, *, namespace: str = "", key: str = KUBECONFIG_KEY,
                 connect: Connect | None = None, reread_seconds: float = SECRET_REREAD_SECONDS) -> None:
        self._workload = workload
        self._clock = clock
        self.namespace = namespace
        self.key = key
        self._connect = connect
        self._reread = reread_seconds
        self._read_at: datetime | None = None
        self._version = ""  # the Secret's resourceVersion the client was built from
        self._client: Kube | None = None
        self._error = ""
        self.server = ""  # the management cluster's API server, once read
        self.changed = 0  # how many clients were built (a new one: the caller asks discovery again)
        self._lock = threading.Lock()  # the controller's workers ask at once: one reads the Secret

    @property
    def secret(self) -> str:
        return f"Secret {self.namespace}/{CLUSTERAPI_SECRET}"

    @property
    def where(self) -> str:
        """The cluster in words, for messages."""
        if not self.namespace:
            return "the cluster"
        return f"the management cluster {self.server or '(unknown)'} ({self.secret})"

    def kube(self) -> Kube:
        if not self.namespace:
            return self._workload
        with self._lock:
            now = self._clock.now()
            if self._read_at is None or (now - self._read_at).total_seconds() >= self._reread:
                self._read_at = now
                self._refresh()
            if self._client is None:
                raise ProviderError(self._error)
            return self._client

    def _refresh(self) -> None:
        try:
            secret, _ = read_secret(self._workload, self.namespace, CLUSTERAPI_SECRET,
                                    f"the management cluster's kubeconfig (key {self.key})")
        except ResetFailure as e:
            self._fail(str(e))
            return
        version = str((secret.get("metadata") or {}).get("resourceVersion", ""))
        if self._client is not None and version and version == self._version:
            return
        raw = (secret.get("data") or {}).get(self.key)
        if not raw:
            keys = ", ".join(sorted(secret.get("data") or {})) or "none"
            self._fail(f"{self.secret} has no key {self.key} (the management cluster's kubeconfig; "
                       f"its keys: {keys})")
            return
        where = f"{self.secret} key {self.key}"
        try:
            text = base64.b64decode(raw, validate=True).decode()
        except ValueError:
            self._fail(f"{where} is not base64 of UTF-8 text")
            return
        try:
            server = check_kubeconfig(text)
        except ValueError as e:
            self._fail(f"{where}: the kubeconfig {e}")
            return
        try:
            client = (self._connect or connect_kubeconfig)(text)
        except KubeError as e:
            self._fail(f"{where}: no client for the kubeconfig's server {server}: {e}")
            return
        view = client.for_component(self._workload.component)
        view.requests = self._workload.requests  # counted with the controller's, as provider/clusterapi
        self._client = view.fenced(self._workload.fence) if self._workload.fence is not None else view
        self._version, self.server, self._error = version, server, ""
        self.changed += 1

    def _fail(self, why: str) -> None:
        self._client, self._version, self._error = None, "", why


class ClusterApiProvider:
    name = "clusterapi"

    def __init__(self, kube: Kube, clock: Clock, names: Names, *, version: str = CAPI_VERSION,
                 management: ManagementCluster | None = None) -> None:
        self._kube = kube  # the workload cluster: its nodes
        self._clock = clock
        self._names = names
        self._version = version  # as configured; what the cluster serves is resolved on first use
        self._served = ""
        self._served_for = -1  # the management client (ManagementCluster.changed) it was resolved with
        self._management = management or ManagementCluster(kube, clock)
        self._machines: dict[str, MachineRef] = {}  # node -> machine, remembered before the node goes away
        self._claims = ReplacementClaims(kube, names)

    @property
    def operation_annotation(self) -> str:
        """The annotation that matches a new node to the replacement it serves."""
        return self._claims.operation_annotation

    def replacement_name(self, op: Operation, pool: str) -> str:
        return ""  # the infrastructure provider names the new node

    def refusal(self, node: dict[str, Any] | None) -> str:
        if node is not None and machine_ref(node) is None:
            name = (node.get("metadata") or {}).get("name", "")
            return (f"node {name} names no Cluster API Machine (annotations {MACHINE_ANNOTATION} and "
                    f"{NAMESPACE_ANNOTATION}): the clusterapi provider cannot repair it")
        if node is not None:
            try:
                self.served_version()
            except ProviderError as e:
                return str(e)
        return ""

    def _ref(self, node: str, lookup: NodeLookup | None = None) -> MachineRef | None:
        if node in self._machines:
            return self._machines[node]
        obj = lookup(node) if lookup else None
        if obj is None and lookup is None:
            with contextlib.suppress(NotFound):
                obj = self._kube.get_node(node)
        ref = machine_ref(obj)
        if ref:
            self._machines[node] = ref
        return ref

    def _machines_api(self) -> Kube:
        return self._management.kube()

    def served_version(self) -> str:
        """The Machine version to use: the configured one if the management cluster serves it,
        else the other (Cluster API before v1.11 serves only v1beta1). Asked of the group's
        discovery, never guessed from a Machine's 404, which would read as "the Machine is gone";
        asked again when the management cluster's client changes (a rotated kubeconfig)."""
        api = self._machines_api()
        if self._served and self._served_for == self._management.changed:
            return self._served
        for version in (self._version, *(v for v in CLUSTERAPI_VERSIONS if v != self._version)):
            try:
                found = api.get(f"/apis/{CAPI_GROUP}/{version}")
            except NotFound:
                continue
            except KubeError as e:
                raise ProviderError(f"{self._management.where} did not answer Cluster API's discovery: {e}") from None
            if any(r.get("name") == "machines" for r in found.get("resources") or []):
                self._served, self._served_for = version, self._management.changed
                return version
        raise ProviderError(f"{self._management.where} serves no Cluster API Machines ({CAPI_GROUP} "
                            f"{' or '.join(CLUSTERAPI_VERSIONS)}): is Cluster API installed?")

    def _path(self, ref: MachineRef) -> str:
        return ref.path(self.served_version())

    def _machine(self, ref: MachineRef) -> dict[str, Any] | None:
        try:
            return self._machines_api().get(self._path(ref))
        except NotFound:
            return None

    def _same_cluster(self, ref: MachineRef) -> Callable[[dict[str, Any]], bool]:
        """A node Cluster API made for another Machine of the same namespace."""
        def test(candidate: dict[str, Any]) -> bool:
            other = machine_ref(candidate)
            return other is not None and other.namespace == ref.namespace and other != ref
        return test

    def drive(self, op: Operation, node: str, pool: str) -> None:
        """Deletes the node's Machine (a reset too: ``KIND.carries_out``), then matches the node
        its MachineSet brings. Raises ProviderError for a node without a Machine or a management
        cluster that cannot be reached (its progress reports the failure)."""
        ref = self._ref(node)
        if ref is None:
            raise ProviderError(f"node {node} names no Cluster API Machine ({MACHINE_ANNOTATION} annotation)")
        try:
            machine = self._machine(ref)
            if machine is not None:
                if (machine.get("metadata") or {}).get("deletionTimestamp"):
                    return
                api = self._machines_api()
                api.patch(self._path(ref), {"metadata": {"annotations": {self._names.operation_annotation: op.id}}})
                with contextlib.suppress(NotFound):
                    api.delete(self._path(ref))
                return
        except (ProviderError, Fenced):  # a closed fence: the replica's writes stop, as every write's
            raise
        except KubeError as e:
            raise ProviderError(f"Machine {ref.namespace}/{ref.name} in {self._management.where}: {e}") from None
        nodes = self._kube.list_nodes(f"{self._names.pool_label}={pool}")  # deleted: match the new node
        if self._claims.claimed_by(op, nodes) is None:
            self._claims.claim(op, node, pool, self._claims.candidates(op, node, nodes), also=self._same_cluster(ref))

    def progress(self, op: Operation, node: str, pool: str, lookup: NodeLookup) -> ProviderView:
        ref = self._ref(node, lookup)
        if ref is None:
            return ProviderView(ProviderState.FAILED, f"node {node} names no Cluster API Machine")
        try:
            machine = self._machine(ref)
        except ProviderError as e:
            return ProviderView(ProviderState.FAILED, str(e))
        except Forbidden as e:
            return ProviderView(ProviderState.FAILED, (
                f"{self._management.where} refused to read Machine {ref.namespace}/{ref.name}: {e} (the "
                "kubeconfig's identity needs get, patch and delete on machines.cluster.x-k8s.io)"))
        except KubeError as e:  # unreachable for now: asked again until the operation's timeout
            return ProviderView(ProviderState.RUNNING,
                                f"cannot read Machine {ref.namespace}/{ref.name} in {self._management.where}: {e}")
        return self._replace_progress(op, node, pool, ref, machine, lookup)

    def _replace_progress(self, op: Operation, node: str, pool: str, ref: MachineRef,
                          machine: dict[str, Any] | None, lookup: NodeLookup) -> ProviderView:
        current = lookup(node)
        if current is not None:
            self._claims.since(op, current)
        if machine is not None:
            meta = machine.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                return ProviderView(ProviderState.RUNNING,
                                    f"Cluster API is deleting Machine {ref.namespace}/{ref.name}")
            started = (meta.get("annotations") or {}).get(self._names.operation_annotation) == op.id
            return ProviderView(ProviderState.RUNNING if started else ProviderState.NOT_STARTED)
        mine = self._claims.claimed_by(op, self._kube.list_nodes(f"{self._names.pool_label}={pool}"))
        new = str((mine or {}).get("metadata", {}).get("name", ""))
        if current is not None:
            return ProviderView(ProviderState.RUNNING, (
                f"Machine {ref.namespace}/{ref.name} is gone but node {node} still exists: waiting for it to be "
                "deleted (Cluster API gives up after the Machine's nodeDeletionTimeout; then delete the node)"),
                new_node=new)
        if mine is None:
            return ProviderView(ProviderState.RUNNING, (
                f"Machine {ref.namespace}/{ref.name} and node {node} are gone: waiting for a new Ready node of "
                f"pool {pool} (label {self._names.pool_label}={pool}) from a Machine in {ref.namespace}"))
        self._claims.forget(op)
        return ProviderView(ProviderState.SUCCEEDED, new_node=new)


def _build(s: Mapping[str, Any], c: BuildContext) -> Provider:
    management = ManagementCluster(c.kube, c.clock, namespace=c.namespace, key=str(s["kubeconfigKey"])) \
        if s["managementCluster"] == "secret" else None
    return ClusterApiProvider(c.kube, c.clock, c.names, version=str(s["version"]), management=management)


KIND = ProviderKind(
    "clusterapi", (RepairAction.RESET.value, RepairAction.REPLACE.value),
    "Cluster API: deletes the node's Machine, as Cluster API's MachineHealthCheck remediation does (a reset "
    "is carried out as a replacement); done when the old node is gone and a new Ready node of the pool "
    "is matched to the repair.",
    (Setting("version", "enum", "The Cluster API version of the Machine objects (the other "
             "one when the cluster does not serve it).",
             default=CLUSTERAPI_VERSIONS[0], values=tuple(sorted(CLUSTERAPI_VERSIONS))),
     Setting("managementCluster", "enum", "Where the Machines are: self: the cluster the controller "
             "runs in (a self-hosted Cluster API); secret: the management cluster of the kubeconfig in "
             f"the Secret {CLUSTERAPI_SECRET} of the controller's namespace.",
             default=MANAGEMENT_CLUSTERS[0], values=MANAGEMENT_CLUSTERS),
     Setting("kubeconfigKey", "string", f"The key of the Secret {CLUSTERAPI_SECRET} that holds the "
             "management cluster's kubeconfig (value: as in Cluster API's own <cluster>-kubeconfig "
             "Secrets).", default=KUBECONFIG_KEY)),
    rules=MACHINE_RULES,
    credentials=CredentialSource(secret=CLUSTERAPI_SECRET, keys=(KUBECONFIG_KEY,), setting="managementCluster"),
    carries_out=((RepairAction.RESET.value, RepairAction.REPLACE.value),),
    build=_build)
