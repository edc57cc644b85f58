"""The machine under one real node: boots it, and boots it again whenever it goes down.

``python -m autoclusters.devcluster.machine NODE_DIR/config.json`` runs on the host (the
local cluster's ``down`` stops it). Each boot:

1. writes a new boot id (the node's ``/proc/sys/kernel/random/boot_id``, which its kubelet
   reports as ``status.nodeInfo.bootID``);
2. opens pseudo-terminals, the node's kernel log devices (:class:`KernelLog`): the lines
   appended to the node's ``kmsg`` file after the boot are written to them one record at a
   time, so the node's ``/dev/kmsg`` reads them as the kernel's (and this machine's kernel log
   is never written);
3. starts ``unshare`` with new PID, mount, network, UTS and IPC namespaces and the node's init
   (``devcluster/node_init.py``) as their PID 1, then moves one end of a veth pair into the new
   network namespace as ``eth0`` and puts the other on the host's bridge;
4. waits for the init to end. An init that ended because ``down`` stopped this process is the
   end; any other end (a reboot asked for inside the node, a crash) is followed by the next boot.

A reboot therefore ends every process of the node, drops its network namespace with every pod
network in it and its mount namespace with every container mount, and starts it over with a
new boot id: what a VM reset does, with the node's disk (its kubelet and containerd state) kept.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import termios
import threading
import time
import uuid
from pathlib import Path

from autoclusters.devcluster.realnodes import BRIDGE, RealNode, remove_cgroups, run

# A reboot takes at least this long between boots, so that a node that keeps failing at boot
# does not spin.
MIN_BOOT_INTERVAL = 1.0


def _log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} machine: {msg}", flush=True)


def _init_pid(unshare_pid: int, timeout: float = 10) -> int:
    """The init's pid in the host's PID namespace: the one child of ``unshare --fork``."""
    deadline = time.monotonic() + timeout
    path = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children")
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            kids = path.read_text().split()
            if kids:
                return int(kids[0])
        time.sleep(0.02)
    raise RuntimeError(f"unshare (pid {unshare_pid}) started no init within {timeout}s")


def _wire(node: RealNode, init_pid: int) -> None:
    run("ip", "link", "del", node.host_veth, check=False)
    run("ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", "eth0", "netns", str(init_pid))
    run("ip", "link", "set", node.host_veth, "master", BRIDGE, "up")
    # the API server reaches the node's pods (webhooks) through the node
    run("ip", "route", "replace", node.pod_cidr, "via", node.ip, "dev", BRIDGE)


class KernelLog:
    """The node's kernel log devices: pseudo-terminals in canonical mode without echo, so that
    each read returns one record, as the kernel's ``/dev/kmsg`` does.

    The kernel's device gives every reader its own copy of the log; a terminal gives each line to
    one reader. So there is one per reader of a node's kernel log: :data:`READERS` names them
    (the node's ``/dev/kmsg``, which pods such as the detector read; the kubelet's own, which its
    OOM watcher reads), and every line is written to each."""

    READERS = ("node", "kubelet")

    def __init__(self, source: Path) -> None:
        self.terminals: dict[str, tuple[int, int]] = {}
        for reader in self.READERS:
            master, slave = os.openpty()
            attrs = termios.tcgetattr(slave)
            attrs[3] = (attrs[3] | termios.ICANON) & ~(termios.ECHO | termios.ECHONL)  # lflag
            attrs[1] = attrs[1] & ~termios.OPOST  # oflag: lines as written
            termios.tcsetattr(slave, termios.TCSANOW, attrs)
            self.terminals[reader] = (master, slave)
        self.devices = {r: os.ttyname(slave) for r, (_m, slave) in self.terminals.items()}
        self.source = source
        start = source.stat().st_size if source.exists() else 0  # a boot starts a new log
        self._stop = threading.Event()
        # one relay per reader: a reader that reads slowly (a full terminal blocks its writer)
        # holds back only its own copy, as each reader of the kernel's device has its own position
        self._threads = [threading.Thread(target=self._relay, args=(master, start), daemon=True)
                         for master, _slave in self.terminals.values()]
        for t in self._threads:
            t.start()

    def _relay(self, master: int, offset: int) -> None:
        partial = b""
        while not self._stop.is_set():
            try:
                size = self.source.stat().st_size
            except OSError:
                size = 0
            if size > offset:
                with open(self.source, "rb") as f:
                    f.seek(offset)
                    data = f.read(min(size - offset, 1 << 16))
                offset += len(data)
                lines = (partial + data).split(b"\n")
                partial = lines.pop()
                for line in lines:
                    with contextlib.suppress(OSError):
                        os.write(master, line + b"\n")
                continue
            self._stop.wait(0.05)

    def close(self) -> None:
        self._stop.set()
        for pair in self.terminals.values():  # a relay blocked on a full terminal: its write fails
            with contextlib.suppress(OSError):
                os.close(pair[1])
        for t in self._threads:
            t.join(timeout=2)
        for master, _slave in self.terminals.values():
            with contextlib.suppress(OSError):
                os.close(master)


def main(argv: list[str]) -> int:
    node = RealNode.load(Path(argv[0]))
    stopping = threading.Event()
    current: list[subprocess.Popen[bytes]] = []

    def on_stop(signum: int, _frame: object) -> None:
        stopping.set()
        for proc in current:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    boot = 0
    while not stopping.is_set():
        boot += 1
        started = time.monotonic()
        boot_id = str(uuid.uuid4())
        (node.path / "boot_id").write_text(boot_id + "\n")
        kmsg = KernelLog(node.kmsg)
        _log(f"boot {boot} of {node.name}: boot id {boot_id}, kernel log {kmsg.devices['node']}")
        proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount", "--net", "--uts", "--ipc", "--mount-proc",
             "--propagation", "private", "--kill-child", "--",
             node.python, "-m", "autoclusters.devcluster.node_init", str(node.config),
             *(kmsg.devices[r] for r in KernelLog.READERS)],
            stdin=subprocess.DEVNULL)
        current[:] = [proc]
        try:
            _wire(node, _init_pid(proc.pid))
        except RuntimeError as e:
            _log(f"could not wire {node.name}'s network: {e}")
            proc.kill()
        rc = proc.wait()
        current.clear()
        kmsg.close()
        if stopping.is_set():
            _log(f"{node.name} stopped (init exited {rc})")
            break
        _log(f"{node.name} went down (init exited {rc}); booting again")
        time.sleep(max(0.0, MIN_BOOT_INTERVAL - (time.monotonic() - started)))
    run("ip", "link", "del", node.host_veth, check=False)
    run("ip", "route", "del", node.pod_cidr, check=False)
    # the kernel ends the node's processes once its init is gone; their cgroups empty soon after
    deadline = time.monotonic() + 10
    while remove_cgroups(node.cgroup_root) and time.monotonic() < deadline:
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
