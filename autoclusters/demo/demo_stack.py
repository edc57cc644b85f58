"""The demo's Pulumi stack: the real CLI and Kubernetes provider, a local file backend, and
the same program as ``__main__.py`` (run inline, see ``devcluster/pulumi_env.py``)."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoclusters.api import ConsentMode
from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.deploy.workloads import CONTROLLER, WEBHOOK_TLS_SECRET
from autoclusters.devcluster import pulumi_env
from autoclusters.devcluster.handle import ClusterHandle

STACK = "demo"
# A finished resource step of `pulumi up`'s output: " +  kubernetes:core/v1:Namespace ns-x created (0.03s)".
_DONE = re.compile(r"^\s+[+~-]\s+(\S+)\s+(\S+)\s+(created|updated|deleted|replaced)\b")


class DemoStack:
    def __init__(self, handle: ClusterHandle, state: Path, *, pool: str, webhook_port: int,
                 namespace: str = DEFAULT_NAMESPACE, event_source: str = CONTROLLER) -> None:
        self.handle = handle
        self.event_source = event_source
        self.pool = pool
        self.namespace = namespace
        self.webhook_port = webhook_port
        self.work, self.state = state / "work", state / "backend"
        self.stack: Any = None

    def config(self, consent_mode: ConsentMode) -> dict[str, Any]:
        return {
            "autoclusters:local": True,
            "autoclusters:domain": self.handle.names.domain,
            "autoclusters:conditionPrefix": self.handle.names.prefix,
            "autoclusters:eventSource": self.event_source,
            "autoclusters:namespace": self.namespace,
            "autoclusters:kubeconfig": self.handle.kubeconfig,
            "autoclusters:webhookUrl": f"https://127.0.0.1:{self.webhook_port}/validate",
            "autoclusters:pools": [{
                "name": self.pool, "consentMode": consent_mode.value,  # YAML: the plain string
                "drain": {"resetDeadlineSeconds": 20, "replaceDeadlineSeconds": 30},
                "provider": {"type": "simulated"},
                "nodes": {"backend": "simulated", "count": 2, "gpuProduct": "NVIDIA-A100-SXM4-80GB",
                          "gpusPerNode": 8, "instanceType": "a100-80gb-sxm-ib.8x"},
            }],
        }

    def up(self, *, consent_mode: ConsentMode, progress: Callable[[str], None]) -> None:
        """``pulumi up`` with the pool in ``consent_mode``: the first call creates the stack,
        later ones change the stack configuration the way a GitOps pipeline would."""
        if self.stack is None:
            self.stack = pulumi_env.stack(STACK, self.work, self.state, self.config(consent_mode),
                                          kubeconfig=self.handle.kubeconfig)
        else:
            pulumi_env.write_stack_config(self.work, STACK, self.config(consent_mode))
        progress(f"$ pulumi up --stack {STACK}   (config: {self.work}/Pulumi.{STACK}.yaml, "
                 f"pools[{self.pool}].consentMode={consent_mode})")
        lines: list[str] = []

        def out(line: str) -> None:
            lines.append(line)
            m = _DONE.match(line)
            if m:
                kind = m.group(1).rsplit(":", 1)[-1]
                progress(f"{m.group(3):<8} {kind} {m.group(2)}")
            elif line.strip().startswith(("+ ", "~ ", "- ")) and line.startswith("        "):
                progress(line.strip())  # the Resources: summary lines

        t0 = time.monotonic()
        result = self.stack.up(on_output=out)
        if result.summary.result != "succeeded":
            raise RuntimeError("pulumi up failed:\n" + "".join(lines[-40:]))
        changes = ", ".join(f"{k} {v}" for k, v in sorted(result.summary.resource_changes.items()))
        progress(f"pulumi up succeeded in {time.monotonic() - t0:.0f}s ({changes})")
        pools = result.outputs["pools"].value
        if pools.get(self.pool) != consent_mode:
            raise RuntimeError(f"the stack reports pool modes {pools}, expected {self.pool}={consent_mode}")

    def webhook_tls(self, into: Path) -> tuple[Path, Path]:
        """The serving certificate the stack issued, read as the kubelet would mount it into the
        webhook's pod (the webhook's own identity has no API rights)."""
        secret = self.handle.kube.get(f"/api/v1/namespaces/{self.namespace}/secrets/{WEBHOOK_TLS_SECRET}")
        into.mkdir(parents=True, exist_ok=True)
        paths = []
        for key in ("tls.crt", "tls.key"):
            path = into / key
            path.write_bytes(base64.b64decode(secret["data"][key]))
            path.chmod(0o600)
            paths.append(path)
        return paths[0], paths[1]
