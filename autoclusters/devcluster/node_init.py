"""PID 1 of one real node: its mounts, its network, then containerd, the kubelet and kube-proxy.

Started by the node's machine (``devcluster/machine.py``) inside new PID, mount, network, UTS
and IPC namespaces: ``python -m autoclusters.devcluster.node_init CONFIG NODE_KMSG KUBELET_KMSG``
(the node's kernel log devices, one per reader: machine.KernelLog).

As a node's init it reaps every orphan, restarts a component that exits (as systemd restarts
the kubelet), and ends the node on a signal:

- ``SIGTERM``/``SIGINT``: shut down (the machine stops; ``down``);
- ``SIGUSR1``: reboot. This is the verb the local cluster's ``hostReboot`` Job runs in place of
  ``systemctl reboot`` (``REBOOT_VERB``): the Job enters this process's namespaces exactly as it
  enters a real host's PID 1, and only the last word differs. A ``reboot(2)`` from inside the
  node would end this init too (the kernel turns a reboot in a child PID namespace into a
  signal to its init), never this machine.

When this process ends, the kernel ends every process of the node; the machine boots it again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from autoclusters.devcluster.realnodes import (
    CGROUP_ROOT,
    HOST_IP,
    KUBELET_ROOT,
    NETWORK,
    REAL_NODE_LABEL,
    RealNode,
    run,
)

REBOOT_SIGNAL = signal.SIGUSR1
# The host command the local cluster's reboot Job runs in the node (``--host-reboot-command``):
# ``kill`` is the shell's builtin, so it works in any host with sh.
REBOOT_VERB = "sh -c 'kill -USR1 1'"
RESTART_BACKOFF = 1.0


def _log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} init: {msg}", flush=True)


def _bind(src: Path | str, dst: str) -> None:
    run("mount", "--bind", str(src), dst)


def mounts(node: RealNode, kmsg_device: str) -> None:
    """The node's own view of the host: a fresh /run (a tmpfs, as a booted host has), its own
    /var/log, /var/lib/cni and /var/lib/kubelet, boot id, machine id and kernel log device."""
    # unshare made every mount private, cut off from the host's; within the node they are shared
    # again, as systemd makes them on a host: the kubelet's HostToContainer and Bidirectional
    # mounts (the detector's host root) need a shared or slave source
    run("mount", "--make-rshared", "/")
    run("mount", "-t", "tmpfs", "-o", "mode=0755,nosuid,nodev", "tmpfs", "/run")
    _bind(node.path / "var-log", "/var/log")
    _bind(node.path / "var-lib-cni", "/var/lib/cni")
    # the kubelet's conventional root: device plugins and exporters (dcgm-exporter's pod-resources
    # socket) look there, and a socket path under the state directory is too long for a socket
    _bind(node.path / "kubelet", KUBELET_ROOT)
    _bind(node.path / "boot_id", "/proc/sys/kernel/random/boot_id")
    _bind(node.path / "machine-id", "/etc/machine-id")
    _bind(kmsg_device, "/dev/kmsg")


def cgroup_root(node: RealNode) -> None:
    """The node's cgroup root in every hierarchy of the host: the kubelet (``cgroupRoot``) wants
    it there. A new cpuset cgroup has no CPUs or memory nodes until given its parent's."""
    for hierarchy in CGROUP_ROOT.iterdir():
        d = hierarchy / node.cgroup_root.lstrip("/")
        d.mkdir(exist_ok=True)
        for f in ("cpuset.cpus", "cpuset.mems"):
            if (d / f).exists() and not (d / f).read_text().strip():
                (d / f).write_text((hierarchy / f).read_text())


def network(node: RealNode, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while run("ip", "link", "show", "eth0", check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"eth0 did not appear within {timeout}s")
        time.sleep(0.05)
    run("ip", "link", "set", "lo", "up")
    run("ip", "addr", "add", f"{node.ip}/{NETWORK.prefixlen}", "dev", "eth0")
    run("ip", "link", "set", "eth0", "up")
    run("ip", "route", "add", "default", "via", HOST_IP)
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
    bridge_nf = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
    if bridge_nf.exists():  # Services between pods of one node's bridge go through iptables
        bridge_nf.write_text("1\n")


def own_kernel_log(device: str) -> list[str]:
    """The start of a command that runs in a mount namespace of its own where ``/dev/kmsg`` is
    ``device``; every other mount stays shared with the node's (the kubelet's volume mounts
    reach containerd). The kubelet's OOM watcher reads /dev/kmsg: with a terminal of its own it
    takes no line from the node's, which a terminal would give to one reader only."""
    return ["unshare", "--mount", "--propagation", "unchanged", "--", "sh", "-c",
            'mount --make-private /dev/kmsg && mount --bind "$0" /dev/kmsg && exec "$@"', device]


class Component:
    def __init__(self, name: str, argv: list[str], log_dir: Path, node: str) -> None:
        self.name = name
        self.argv = argv
        self.log = log_dir / f"{node}-{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.started = time.monotonic()
        _log(f"started {self.name} (pid {self.proc.pid})")

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()


def _wait_socket(path: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
            return
        time.sleep(0.1)
    raise RuntimeError(f"{path} did not answer within {timeout}s")


def import_images(node: RealNode, containerd: Component) -> None:
    """Imports each image archive once per change (a marker per archive in containerd's root):
    the node's containerd keeps them on its disk across reboots, as a real node's does."""
    changed = False
    for archive, base in node.images:
        st = os.stat(archive)
        marker = node.path / "containerd" / f".imported-{Path(archive).name}-{base.replace('/', '_')}"
        stamp = f"{st.st_size}:{st.st_mtime_ns}"
        if marker.exists() and marker.read_text() == stamp:
            continue
        run(node.ctr, "--address", "/run/containerd/containerd.sock", "-n", "k8s.io", "images", "import",
            "--base-name", base, archive)
        marker.write_text(stamp)
        changed = True
        _log(f"imported {archive} as {base}")
    if changed:  # the CRI plugin otherwise keeps serving what it listed before the import
        containerd.stop()
        assert containerd.proc is not None
        containerd.proc.wait(timeout=30)
        containerd.start()
        _wait_socket("/run/containerd/containerd.sock")


def _reap(components: list[Component]) -> None:
    """Reaps every child that ended: the orphans re-parented to this init, and the components,
    whose exit status is kept for :meth:`Component.exited`."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        for c in components:
            if c.proc is not None and c.proc.pid == pid:
                c.proc.returncode = os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    node = RealNode.load(Path(argv[0]))
    kmsg_device, kubelet_kmsg = argv[1], argv[2]
    logs = Path(node.logs)
    ending: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: ending.append(0))
    signal.signal(signal.SIGINT, lambda *_: ending.append(0))
    signal.signal(REBOOT_SIGNAL, lambda *_: ending.append(3))
    try:
        mounts(node, kmsg_device)
        socket.sethostname(node.name)
        network(node)
        cgroup_root(node)
        containerd = Component("containerd", [node.containerd, "--config", str(node.path / "containerd.toml")],
                               logs, node.name)
        containerd.start()
        _wait_socket("/run/containerd/containerd.sock")
        import_images(node, containerd)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        _log(f"boot failed: {e}")
        return 1
    components = [containerd,
                  Component("kubelet", [*own_kernel_log(kubelet_kmsg), node.kubelet,
                                        f"--config={node.path / 'kubelet.yaml'}",
                                        f"--kubeconfig={node.path / 'kubelet.kubeconfig'}",
                                        f"--root-dir={KUBELET_ROOT}", f"--hostname-override={node.name}",
                                        f"--node-ip={node.ip}", f"--node-labels={REAL_NODE_LABEL}=true",
                                        "--v=1"], logs, node.name),
                  Component("kube-proxy", [node.kube_proxy, f"--config={node.path / 'kube-proxy.yaml'}", "--v=1"],
                            logs, node.name)]
    for c in components[1:]:
        c.start()
    _log(f"{node.name} is up")
    while not ending:
        _reap(components)
        for c in components:
            rc = c.exited()
            if rc is not None and time.monotonic() - c.started > RESTART_BACKOFF:
                _log(f"{c.name} exited {rc}; restarting it")
                c.start()
        time.sleep(0.2)
    code = ending[0]
    _log("rebooting" if code == 3 else "shutting down")
    for c in reversed(components):
        c.stop()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(c.exited() is None for c in components):
        time.sleep(0.1)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
