"""The built runtime image, run the way the kubelet runs a pod's container (no tests here).

``built_image()`` builds the image with ``tools/build-image.sh`` (skipped when its inputs
did not change, so once per change, not per session) and unpacks the OCI archive with
umoci; ``PodContainer`` turns a container of the Deployment/DaemonSet specs that
``autoclusters.deploy`` builds into an OCI runtime spec and starts it with Debian's runc:

- the process is the image's entrypoint with the container's ``args`` (``$(VAR)`` expanded),
  the image's environment, ``KUBERNETES_SERVICE_HOST``/``PORT``, and the container's ``env``
  (``fieldRef`` resolved for the pod's name, namespace and node);
- the service account's token, ``ca.crt`` and ``namespace`` at
  ``/var/run/secrets/kubernetes.io/serviceaccount`` (read-only), and the pod's volumes at
  their ``volumeMounts`` (hostPath: the host path itself; secret/configMap: a directory the
  test fills);
- the container's ``securityContext`` as containerd applies it: the user (``runAsUser`` or
  the image's ``USER``), capabilities (the runtime's default set, minus ``drop``, plus
  ``add``; all of them when privileged), the device cgroup (only the default devices,
  every device when privileged), ``no_new_privs``, a read-only root filesystem.

One difference, on purpose: the containers share the host's network namespace (a pod with
``hostNetwork``), because the test cluster's API server listens on loopback. Ports a pod
would own (metrics, webhook, OPA) are therefore remapped to free ones by the tests.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoclusters import __version__
from tests.conftest import tool_missing

REPO = Path(__file__).resolve().parents[2]
IMAGE_DIR = Path(os.environ.get("AUTOCLUSTERS_IMAGE_DIR", REPO / "build" / "image"))
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# containerd's default capabilities for a container (before securityContext drop/add).
RUNTIME_DEFAULT_CAPS = ("CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
                        "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE")
# Every capability, in the kernel's numbering (bit i of a capability set is ALL_CAPS[i]).
ALL_CAPS = ("CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
            "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
            "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
            "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
            "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
            "CHECKPOINT_RESTORE")


def host_capabilities() -> list[str]:
    """The capabilities this machine can hand out (its bounding set), which is what containerd
    gives a privileged container: on a host that is itself confined, asking for more fails."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            bits = int(line.split()[1], 16)
            return [c for i, c in enumerate(ALL_CAPS) if bits >> i & 1]
    return list(ALL_CAPS)


@dataclass(frozen=True)
class Image:
    archive: Path
    rootfs: Path
    spec: dict[str, Any]  # the runtime spec umoci derived from the image config (user, env, entrypoint)
    build_seconds: float

    @property
    def reference(self) -> str:
        from autoclusters.deploy import DEFAULT_IMAGE

        return DEFAULT_IMAGE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def built_image() -> Image:
    """Builds (when its inputs changed) and unpacks the runtime image; skips or, under
    ``make test``, fails when this machine cannot (not root, no Debian packages)."""
    if os.geteuid() != 0:
        tool_missing("building and running the image needs root (chroot, runc)")
    if shutil.which("apt-get") is None and not all(shutil.which(t) for t in ("debootstrap", "umoci", "runc")):
        tool_missing("debootstrap, umoci and runc are needed (Debian packages)")
    start = time.monotonic()
    res = subprocess.run([str(REPO / "tools" / "build-image.sh")], capture_output=True, text=True, timeout=1800,
                         env={**os.environ, "PYTHON": sys.executable})
    took = time.monotonic() - start
    if res.returncode != 0:
        raise RuntimeError(f"tools/build-image.sh failed ({res.returncode}):\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    print(f"[image] tools/build-image.sh: {took:.1f}s\n{res.stdout.strip()}", file=sys.stderr)
    archive = IMAGE_DIR / f"autoclusters-{__version__}.oci.tar"
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
    bundle = IMAGE_DIR / "unpacked" / digest
    if not (bundle / "config.json").exists():
        shutil.rmtree(IMAGE_DIR / "unpacked", ignore_errors=True)
        layout = IMAGE_DIR / "unpacked" / "layout"
        layout.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(layout, filter="tar")
        tag = __version__
        subprocess.run(["umoci", "unpack", "--image", f"{layout}:{tag}", str(bundle)], check=True,
                       capture_output=True, timeout=600)
        shutil.rmtree(layout)
    spec = json.loads((bundle / "config.json").read_text())
    return Image(archive, bundle / "rootfs", spec, took)


def _expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion of args."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), value)


class PodContainer:
    """One container of a pod spec, started from the image with runc (see the module doc)."""

    def __init__(self, image: Image, pod_spec: dict[str, Any], container: str, *, workdir: Path,
                 namespace: str, token: str, ca_pem: bytes, api_host: str, api_port: int,
                 node_name: str = "node", volumes: dict[str, Path] | None = None,
                 args: list[str] | None = None) -> None:
        self.image = image
        self.id = f"ac-{container}-{secrets.token_hex(4)}"
        self.pod_name = self.id
        self.dir = workdir / self.id
        self.dir.mkdir(parents=True)
        self.log_path = self.dir / "log"
        c = next(x for x in pod_spec["containers"] if x["name"] == container)
        self.container = c
        sa = self.dir / "serviceaccount"
        sa.mkdir()
        for name, data in (("token", token.encode()), ("ca.crt", ca_pem), ("namespace", namespace.encode())):
            (sa / name).write_bytes(data)
            (sa / name).chmod(0o644)
        sa.chmod(0o755)

        env = dict(e.split("=", 1) for e in image.spec["process"]["env"] if not e.startswith("TERM="))
        env.update({"HOSTNAME": self.pod_name, "KUBERNETES_SERVICE_HOST": api_host,
                    "KUBERNETES_SERVICE_PORT": str(api_port)})
        # the downward API's fields; the node is this machine, whose address the API server has too
        fields = {"metadata.name": self.pod_name, "metadata.namespace": namespace, "spec.nodeName": node_name,
                  "status.hostIP": api_host}
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = _expand(e["value"], env)
            else:
                env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        self.env = env
        argv = list(c.get("command") or image.spec["process"]["args"])
        argv += [_expand(a, env) for a in (c.get("args") if args is None else args)]

        sc = c.get("securityContext") or {}
        privileged = bool(sc.get("privileged"))
        if privileged:
            caps = host_capabilities()
        else:
            drop = set((sc.get("capabilities") or {}).get("drop") or [])
            caps = [] if "ALL" in drop else [x for x in RUNTIME_DEFAULT_CAPS if x not in drop]
            caps += [x for x in (sc.get("capabilities") or {}).get("add") or [] if x not in caps]
        caps = [f"CAP_{x}" for x in caps]
        user = dict(image.spec["process"]["user"])
        if "runAsUser" in sc:
            user = {"uid": int(sc["runAsUser"]), "gid": int(sc.get("runAsGroup", sc["runAsUser"]))}
        if sc.get("runAsNonRoot") and user["uid"] == 0:
            raise AssertionError(f"{container}: runAsNonRoot, but the image's user is root: the kubelet refuses it")

        spec = copy.deepcopy(image.spec)
        spec["hostname"] = self.pod_name
        spec["root"] = {"path": str(image.rootfs), "readonly": bool(sc.get("readOnlyRootFilesystem"))}
        proc = spec["process"]
        proc.update({"terminal": False, "args": argv, "env": [f"{k}={v}" for k, v in env.items()], "user": user,
                     "cwd": c.get("workingDir", proc.get("cwd", "/")),
                     "noNewPrivileges": not privileged and sc.get("allowPrivilegeEscalation") is False})
        proc["capabilities"] = {k: list(caps) for k in ("bounding", "effective", "permitted")}
        linux = spec["linux"]
        linux["namespaces"] = [n for n in linux["namespaces"] if n["type"] != "network"]
        linux.setdefault("resources", {})["devices"] = [{"allow": privileged, "access": "rwm"}]
        if privileged:
            linux["maskedPaths"], linux["readonlyPaths"] = [], []
        mounts = [{"destination": SA_DIR, "type": "bind", "source": str(sa), "options": ["rbind", "ro"]}]
        pod_volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
        for vm in c.get("volumeMounts") or []:
            vol = pod_volumes[vm["name"]]
            if volumes and vm["name"] in volumes:
                source = str(volumes[vm["name"]])
            elif "hostPath" in vol and os.path.exists(vol["hostPath"]["path"]):
                source = vol["hostPath"]["path"]
            elif "hostPath" in vol and vol["hostPath"].get("type", "") == "":
                empty = self.dir / "hostpath" / vm["name"]  # the runtime creates a missing path; we don't touch /
                empty.mkdir(parents=True)
                source = str(empty)
            else:
                raise AssertionError(f"{container}: volume {vm['name']} has no source here")
            opts = ["rbind", "ro" if vm.get("readOnly") else "rw"]
            mounts.append({"destination": vm["mountPath"], "type": "bind", "source": source, "options": opts})
        spec["mounts"] = [*spec["mounts"], *mounts]
        (self.dir / "config.json").write_text(json.dumps(spec, indent=1))
        self.state = workdir / "runc-state"
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(["runc", "--root", str(self.state), "run", "--bundle", str(self.dir), self.id],
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s (a pod's grace period), then delete the container."""
        runc = ["runc", "--root", str(self.state)]
        if self.proc.poll() is None:
            subprocess.run([*runc, "kill", self.id, "TERM"], capture_output=True, timeout=30)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                subprocess.run([*runc, "kill", self.id, "KILL"], capture_output=True, timeout=30)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(10)
        subprocess.run([*runc, "delete", "--force", self.id], capture_output=True, timeout=30)
        self._log.close()


def replace_flag(args: list[str], flag: str, value: str) -> list[str]:
    """``args`` with the value after ``flag`` replaced (a remapped port, a local URL)."""
    out = list(args)
    i = out.index(flag)
    out[i + 1] = value
    return out
