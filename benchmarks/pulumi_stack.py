"""Pulumi stack lifecycle timings on the local cluster: ``up``, a no-change ``preview``, a
consent-mode change, ``destroy``, for P pools of N simulated nodes each.

    .venv/bin/python benchmarks/pulumi_stack.py --kubeconfig PATH [--pools 2] [--nodes 2] [-o json]

Runs the real CLI and Kubernetes provider (``tools/build-tools.sh pulumi``) through
``autoclusters.devcluster.pulumi_env`` with a file backend in a temporary directory, under
a private domain and namespace, and destroys what it made. It also runs the component
tree under Pulumi's mock engine, which is the cost of the component unit tests.
"""

from __future__ import annotations

import argparse
import base64
import json
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def config(kubeconfig: str, suffix: str, pools: int, nodes: int, mode: str, port: int) -> dict[str, Any]:
    return {
        "autoclusters:local": True,
        "autoclusters:namespace": f"acb-{suffix}",
        "autoclusters:domain": f"bench{suffix}.autoclusters.test",
        "autoclusters:kubeconfig": kubeconfig,
        "autoclusters:webhookUrl": f"https://127.0.0.1:{port}/validate",
        "autoclusters:pools": [{"name": f"b{suffix}-{i}", "consentMode": mode,
                                "nodes": {"backend": "simulated", "count": nodes}} for i in range(pools)],
    }


def timed(fn: Any) -> tuple[float, Any]:
    t0 = time.monotonic()
    out = fn()
    return time.monotonic() - t0, out


def start_webhook(kubeconfig: str, namespace: str, port: int, opa_url: str, tmp: Path) -> subprocess.Popen[bytes]:
    """The webhook on the host with the certificate the stack issued: pool updates go through it."""
    from autoclusters.kube import load_kube

    secret = load_kube(kubeconfig).get(f"/api/v1/namespaces/{namespace}/secrets/autoclusters-webhook-tls")
    for key in ("tls.crt", "tls.key"):
        (tmp / key).write_bytes(base64.b64decode(secret["data"][key]))
    proc = subprocess.Popen([sys.executable, "-m", "autoclusters.cli.main", "webhook", "run", "--listen", "127.0.0.1",
                             "--port", str(port), "--opa-url", opa_url, "--no-push-opa-config", "--webhook-config", "",
                             "--tls-cert", str(tmp / "tls.crt"), "--tls-key", str(tmp / "tls.key")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the webhook did not start")


def mock_render_seconds() -> float:
    """``AutoClusters`` for the pools of ``manifests/`` under the mock engine."""
    from autoclusters.deploy.stack_config import stack_config_from_dict
    from components import AutoClusters, AutoClustersArgs
    from components._recording import record
    from components.render import EXAMPLE_POOLS

    config = stack_config_from_dict({"pools": EXAMPLE_POOLS})
    seconds, _ = timed(lambda: record(lambda: AutoClusters("autoclusters", AutoClustersArgs(config=config))))
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--opa-url", required=True, help="the local cluster's OPA (autoclusters dev status)")
    parser.add_argument("--pools", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("-o", dest="output", choices=["text", "json"], default="text")
    args = parser.parse_args()

    from autoclusters.devcluster import pulumi_env

    suffix = secrets.token_hex(3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    webhook = None
    tmp = Path(tempfile.mkdtemp(prefix="pulumi-bench-"))
    quiet: list[str] = []
    results: dict[str, Any] = {"pools": args.pools, "nodes_per_pool": args.nodes}
    stack = pulumi_env.stack("bench", tmp / "work", tmp / "state",
                             config(args.kubeconfig, suffix, args.pools, args.nodes, "auto", port),
                             kubeconfig=args.kubeconfig)
    try:
        results["up_seconds"], up = timed(lambda: stack.up(on_output=quiet.append))
        results["resources"] = up.summary.resource_changes.get("create", 0)
        results["preview_seconds"], _ = timed(lambda: stack.preview(expect_no_changes=True,
                                                                    on_output=quiet.append))
        pulumi_env.write_stack_config(tmp / "work", "bench",
                                      config(args.kubeconfig, suffix, args.pools, args.nodes, "off", port))
        webhook = start_webhook(args.kubeconfig, f"acb-{suffix}", port, args.opa_url, tmp)
        results["consent_update_seconds"], _ = timed(lambda: stack.up(on_output=quiet.append))
    finally:
        if webhook:
            webhook.terminate()
            webhook.wait(10)
        results["destroy_seconds"], _ = timed(lambda: stack.destroy(on_output=quiet.append))
        stack.workspace.remove_stack("bench")
    results["mock_render_seconds"] = mock_render_seconds()
    if args.output == "json":
        print(json.dumps(results, indent=2))
    else:
        for key, value in results.items():
            print(f"{key:24} {value:.1f}" if isinstance(value, float) else f"{key:24} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
