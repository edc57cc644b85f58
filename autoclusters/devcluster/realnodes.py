"""Real nodes for the local cluster: a kubelet, containerd and kube-proxy per node, beside the
kwok nodes, so that the pods autoclusters ships really run (docs/real-nodes.md).

Each real node is a "machine" of its own on this host, the way a kind node is:

- its own **PID namespace** with its own init (``devcluster/node_init.py`` is PID 1), so that a
  ``hostPID`` pod that enters PID 1's namespaces (the reboot Job) enters this node and no
  other, and a reboot of the node ends every process it ran;
- its own **network namespace**, joined by a veth pair to the bridge :data:`BRIDGE` on the host
  (:data:`HOST_IP`), with a non-loopback node IP (the kubelet refuses loopback, and the API
  server reaches kubelets and webhook pods there);
- its own **mount namespace**: a fresh ``/run`` per boot, its own ``/var/log`` and
  ``/var/lib/cni``, a boot id of its own over ``/proc/sys/kernel/random/boot_id``, and a kernel
  log of its own over ``/dev/kmsg`` (a pseudo-terminal the machine relays :attr:`RealNode.kmsg`
  into), so that a fault line written for a node never reaches this machine's kernel log;
- its own **cgroup root** (``/autoclusters-<node>``) under the host's cgroupfs.

A node's supervisor (``devcluster/machine.py``, a process of the cluster's, stopped by ``down``)
boots it: it creates the namespaces, wires the veth, writes a new boot id, and boots it again
whenever its init ends, which is what a reboot is.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from autoclusters import __version__
from autoclusters.certificates import SERVER_AUTH
from autoclusters.deploy import IMAGE_REPOSITORY
from autoclusters.deploy.stack_config import StackConfig
from autoclusters.devcluster import processes as p
from autoclusters.devcluster.pki import Pki
from autoclusters.devcluster.tools import ToolsMissing, cache_dir, repo_root, versions

Progress = Callable[[str], None]

BRIDGE = "acnodes0"  # the host side of every real node's network (at most 15 characters)
NETWORK = ipaddress.ip_network("10.250.0.0/24")
HOST_IP = "10.250.0.1"  # the host on that network: the API server as the real nodes reach it
FIRST_NODE_HOST = 10  # node i has 10.250.0.(10 + i)
POD_NETWORK = ipaddress.ip_network("10.244.0.0/16")  # node i's pods: 10.244.(i + 1).0/24
MAX_REAL_NODES = 50
# The pod sandbox image, built here (tools/node-images/build.sh, whose OCI layout names it by the
# tag PAUSE_TAG) and imported under PAUSE_BASE_NAME, which containerd then calls PAUSE_IMAGE.
PAUSE_BASE_NAME = "autoclusters.local/pause"
PAUSE_TAG = "pause"
PAUSE_IMAGE = f"{PAUSE_BASE_NAME}:{PAUSE_TAG}"
# The runtime image once more, under a name of its own: what an image override names here
# (tests/integration/test_real_nodes_manifests.py overrides the manifests' image with it).
LOCAL_IMAGE_REPOSITORY = "autoclusters.local/autoclusters"
REAL_NODE_LABEL = "autoclusters.dev/real-node"  # "true" on every real node (the tests select by it)
# The host's cgroup v1 hierarchies a node's cgroup root is made under (and removed from at down).
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Where each node sees its own kubelet state and CNI state (bind mounts in its mount namespace;
# on this host they are empty mount points, made by ``start`` when missing).
KUBELET_ROOT = "/var/lib/kubelet"
MOUNT_POINTS = (KUBELET_ROOT, "/var/lib/cni")


class RealNodesMissing(ToolsMissing):
    """A prerequisite of the real nodes (containerd, runc, CNI plugins, the images) is missing."""


@dataclass(frozen=True)
class NodeTools:
    kubelet: Path
    kube_proxy: Path
    containerd: Path
    ctr: Path
    cni_bin: Path
    pause_archive: Path

    @classmethod
    def locate(cls, root: Path | None = None) -> NodeTools:
        v = versions()["KUBE_VERSION"]
        d = cache_dir() / "bin" / f"kube-node-{v}"
        if not (d / ".complete").exists():
            raise RealNodesMissing(f"kubelet {v} is not built yet (expected in {d}); "
                                   "run: tools/build-tools.sh kube-node")
        missing = [b for b in ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "unshare", "ip")
                   if shutil.which(b) is None]
        cni = Path("/usr/lib/cni")
        if not (cni / "bridge").exists():
            missing.append("the CNI plugins (/usr/lib/cni)")
        if missing:
            raise RealNodesMissing(f"real nodes need {', '.join(missing)}; run: make real-nodes")
        pause = (root or repo_root()) / "build" / "node-images" / "pause.oci.tar"
        if not pause.exists():
            raise RealNodesMissing(f"the pod sandbox image is not built ({pause}); run: make real-nodes")
        return cls(kubelet=d / "kubelet", kube_proxy=d / "kube-proxy", containerd=Path(str(shutil.which("containerd"))),
                   ctr=Path(str(shutil.which("ctr"))), cni_bin=cni, pause_archive=pause)


@dataclass(frozen=True)
class RealNode:
    """One real node's settings, as its supervisor and its init read them (``config.json``)."""

    name: str
    index: int
    dir: str  # the node's own state: kubelet root, containerd root, its kernel log, its configs
    logs: str
    ip: str
    pod_cidr: str
    kubelet: str
    kube_proxy: str
    containerd: str
    ctr: str
    cni_bin: str
    images: list[tuple[str, str]]  # (OCI archive, the name it is imported under)
    python: str

    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def kmsg(self) -> Path:
        """The node's kernel log: lines appended here reach the node's ``/dev/kmsg``."""
        return self.path / "kmsg"

    @property
    def config(self) -> Path:
        return self.path / "config.json"

    @property
    def cgroup_root(self) -> str:
        return f"/autoclusters-{self.name}"

    @property
    def host_veth(self) -> str:
        return f"acn{self.index}h"

    def write_kernel_log(self, line: str) -> None:
        """Appends one line, as the kernel writes a record (``PRIO,SEQ,USEC,-;MESSAGE``), to the
        node's own kernel log, never this machine's."""
        if "\n" in line:
            raise ValueError("one kernel log record per call")
        with open(self.kmsg, "a") as f:
            f.write(line + "\n")

    @classmethod
    def load(cls, path: Path) -> RealNode:
        data = json.loads(path.read_text())
        data["images"] = [tuple(x) for x in data["images"]]
        return cls(**data)


def node_name(cluster: str, index: int) -> str:
    return f"{cluster}-real-{index}"


def node_ip(index: int) -> str:
    return str(NETWORK.network_address + FIRST_NODE_HOST + index)


def pod_cidr(index: int) -> str:
    return str(ipaddress.ip_network(f"{POD_NETWORK.network_address + (index + 1) * 256}/24"))


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Runs a command of the node's plumbing (ip, mount, umoci, ctr); with ``check``, one that
    fails raises with its own words, which the caller's log or error then shows."""
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip() or f'exit {r.returncode}'}")
    return r


def ensure_bridge() -> None:
    """The host's side of the real nodes' network: the bridge with the host's address, and
    forwarding on (the pods' traffic to the API server and between nodes crosses the host)."""
    if run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        run("ip", "link", "add", BRIDGE, "type", "bridge")
    addrs = run("ip", "-o", "-4", "addr", "show", "dev", BRIDGE).stdout
    if f"{HOST_IP}/" not in addrs:
        run("ip", "addr", "add", f"{HOST_IP}/{NETWORK.prefixlen}", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")


def remove_bridge() -> None:
    if run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
        run("ip", "link", "del", BRIDGE, check=False)


def remove_cgroups(root: str) -> list[Path]:
    """Removes a node's cgroup root from every hierarchy, deepest first (a cgroup with no
    process left is removed with rmdir); returns those still there (still busy)."""
    left = []
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / root.lstrip("/")
        if not top.is_dir():
            continue
        for d in sorted((x for x in top.rglob("*") if x.is_dir()), key=lambda x: len(x.parts), reverse=True):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()
        if top.exists():
            left.append(top)
    return left


def kubelet_config(node: RealNode, ca: Path, serving: tuple[Path, Path], status_seconds: int,
                   lease_seconds: int) -> dict[str, Any]:
    """The KubeletConfiguration of a real node (docs/real-nodes.md says why each line is there)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # cgroups are v1 (hybrid) here; the kubelet refuses v1 unless told, and crun refuses that mode
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "cgroupRoot": node.cgroup_root,  # several kubelets on one host: each its own pods' cgroup root
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(serving[0]),
        "tlsPrivateKeyFile": str(serving[1]),
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "failSwapOn": False,
        # this machine's disk is shared with everything else: evict only when it is really full,
        # and never collect the images imported from build/ (they cannot be pulled again)
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False,
        "nodeStatusReportFrequency": f"{status_seconds}s",
        "nodeLeaseDurationSeconds": lease_seconds,
        "shutdownGracePeriod": "0s",
        "maxPods": 50,
    }


def kube_proxy_config(node: RealNode, kubeconfig: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node.name,
        "mode": "iptables",
        "clusterCIDR": str(POD_NETWORK),
        "bindAddress": node.ip,
        "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
        # the node's network namespace is its own, but the conntrack table size is the host's:
        # leave the host's conntrack settings as they are
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def cni_config(node: RealNode) -> dict[str, Any]:
    """The pod network of one node: a bridge with host-local addresses from the node's own
    range, its lease state on the node's /run (a reboot forgets it, as a tmpfs does)."""
    return {
        "cniVersion": "1.0.0",
        "name": "autoclusters",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_cidr}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "/run/cni-ipam"}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def containerd_config(node: RealNode) -> str:
    """containerd 1.6's configuration (version 2) for one node."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join([
        "version = 2",
        f'root = "{node.path / "containerd"}"',
        'state = "/run/containerd"',
        # plugins that would write outside the node's directories, or that this host lacks
        'disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",'
        ' "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",'
        ' "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]',
        "[grpc]",
        '  address = "/run/containerd/containerd.sock"',
        f"[{cri}]",
        f'  sandbox_image = "{PAUSE_IMAGE}"',
        # this machine refuses a negative oom_score_adj even to root: without this every pod
        # sandbox fails with runc's "can't get final child's PID from pipe: EOF"
        "  restrict_oom_score_adj = true",
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]",
        "  SystemdCgroup = false",
        f"[{cri}.cni]",
        f'  bin_dir = "{node.cni_bin}"',
        f'  conf_dir = "{node.path / "cni"}"',
        "",
    ])


def opa_image() -> tuple[str, str]:
    """The OPA image the stack's webhook pods name by default (``StackConfig.opa_image``), as the
    repository a containerd import is named under and its tag."""
    ref = StackConfig().opa_image
    repo, tag = ref.rsplit(":", 1)
    if "/" in repo and "." not in repo.split("/", 1)[0]:
        repo = f"docker.io/{repo}"  # how containerd's CRI names an image without a registry
    return repo, tag


def build_opa_image(opa: Path, out: Path, tag: str) -> Path:
    """An image of the OPA binary ``tools/build-tools.sh`` built (static: CGO off), entrypoint
    ``/opa`` and user 1000 as upstream's ``-static`` images have, packed by umoci; skipped when
    newer than the binary. No registry serves upstream's image here."""
    archive = out / f"opa-{tag}.oci.tar"
    if archive.exists() and archive.stat().st_mtime >= opa.stat().st_mtime:
        return archive
    out.mkdir(parents=True, exist_ok=True)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        layout, bundle = f"{tmp}/oci", f"{tmp}/bundle"
        for argv in (["umoci", "init", "--layout", layout], ["umoci", "new", "--image", f"{layout}:{tag}"],
                     ["umoci", "unpack", "--image", f"{layout}:{tag}", bundle]):
            run(*argv)
        shutil.copy2(opa, f"{bundle}/rootfs/opa")
        for argv in (["umoci", "repack", "--image", f"{layout}:{tag}", bundle],
                     ["umoci", "config", "--image", f"{layout}:{tag}", "--config.entrypoint", "/opa",
                      "--config.user", "1000:1000", "--os", "linux", "--architecture", "amd64"],
                     ["umoci", "gc", "--layout", layout],
                     ["tar", "-C", layout, "-cf", f"{archive}.tmp", "."]):
            run(*argv)
    Path(f"{archive}.tmp").rename(archive)
    return archive


def images(image_archive: Path | None, tools: NodeTools, opa: Path | None = None) -> list[tuple[str, str]]:
    """What each node imports into containerd: the pause image, and the images the stack's pods
    name by default where they are built: the runtime image (``deploy.DEFAULT_IMAGE``, from
    ``make image``; also as ``LOCAL_IMAGE_REPOSITORY``, a name no default names, for trying an
    image override) and OPA's (from the OPA binary of ``make tools``)."""
    out = [(str(tools.pause_archive), PAUSE_BASE_NAME)]
    if image_archive is not None:
        out += [(str(image_archive), IMAGE_REPOSITORY), (str(image_archive), LOCAL_IMAGE_REPOSITORY)]
    if opa is not None:
        repo, tag = opa_image()
        out.append((str(build_opa_image(opa, tools.pause_archive.parent, tag)), repo))
    return out


def default_image_archive(root: Path | None = None) -> Path | None:
    """``build/image/autoclusters-<version>.oci.tar`` (``make image``), when it is there."""
    path = (root or repo_root()) / "build" / "image" / f"autoclusters-{__version__}.oci.tar"
    return path if path.exists() else None


def prepare(cluster_name: str, cluster_dir: Path, logs: Path, pki: Pki, api_port: int, count: int,
            tools: NodeTools, image_archive: Path | None, status_seconds: int, lease_seconds: int,
            opa: Path | None = None) -> list[RealNode]:
    """Writes every node's certificates, kubeconfigs and configurations; starts nothing."""
    if not 1 <= count <= MAX_REAL_NODES:
        raise ValueError(f"real nodes: between 1 and {MAX_REAL_NODES}, not {count}")
    server = f"https://{HOST_IP}:{api_port}"
    node_images = images(image_archive, tools, opa)
    nodes = []
    for i in range(count):
        nm = node_name(cluster_name, i)
        d = cluster_dir / "nodes" / nm
        for sub in ("containerd", "kubelet", "cni", "var-log", "var-lib-cni"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        node = RealNode(name=nm, index=i, dir=str(d), logs=str(logs), ip=node_ip(i), pod_cidr=pod_cidr(i),
                        kubelet=str(tools.kubelet), kube_proxy=str(tools.kube_proxy),
                        containerd=str(tools.containerd), ctr=str(tools.ctr), cni_bin=str(tools.cni_bin),
                        images=node_images, python=sys.executable)
        pki.issue(f"node-{nm}", f"system:node:{nm}", "system:nodes")
        pki.kubeconfig(d / "kubelet.kubeconfig", server, f"node-{nm}", cluster_name)
        serving = pki.issue(f"node-{nm}-serving", f"system:node:{nm}", "system:nodes", usage=SERVER_AUTH,
                            hosts=(nm, node.ip))
        pki.issue(f"kube-proxy-{nm}", "system:kube-proxy")
        pki.kubeconfig(d / "kube-proxy.kubeconfig", server, f"kube-proxy-{nm}", cluster_name)
        (d / "kubelet.yaml").write_text(yaml.safe_dump(
            kubelet_config(node, pki.ca_cert, serving, status_seconds, lease_seconds), sort_keys=False))
        (d / "kube-proxy.yaml").write_text(yaml.safe_dump(kube_proxy_config(node, d / "kube-proxy.kubeconfig"),
                                                          sort_keys=False))
        (d / "cni" / "10-autoclusters.conflist").write_text(json.dumps(cni_config(node), indent=2))
        (d / "containerd.toml").write_text(containerd_config(node))
        (d / "machine-id").write_text(uuid.uuid4().hex + "\n")
        node.kmsg.touch()
        node.config.write_text(json.dumps(asdict(node), indent=2))
        nodes.append(node)
    return nodes


def start(nodes: list[RealNode], cluster_dir: Path, logs: Path, progress: Progress) -> list[p.Proc]:
    """Starts each node's supervisor (``devcluster/machine.py``), which boots it."""
    ensure_bridge()
    for point in MOUNT_POINTS:
        Path(point).mkdir(parents=True, exist_ok=True)
    procs = []
    for node in nodes:
        progress(f"booting real node {node.name} ({node.ip}, pods {node.pod_cidr})")
        procs.append(p.spawn(f"machine-{node.name}", [sys.executable, "-m", "autoclusters.devcluster.machine",
                                                      str(node.config)], logs, cluster_dir))
    return procs


def real_nodes(cluster_dir: Path) -> list[RealNode]:
    base = cluster_dir / "nodes"
    if not base.is_dir():
        return []
    return sorted((RealNode.load(c) for c in base.glob("*/config.json")), key=lambda n: n.index)
