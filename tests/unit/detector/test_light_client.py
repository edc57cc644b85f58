"""The lean transport reads kubeconfigs like the full client and never imports ``kubernetes``."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autoclusters.kube import KubeError
from autoclusters.kube.light import load_light_kube


def kubeconfig(tmp_path: Path, user: dict[str, object]) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443",
                                               "certificate-authority-data": base64.b64encode(b"CA").decode()}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return str(path)


def test_token_and_ca_from_a_kubeconfig(tmp_path: Path) -> None:
    kube = load_light_kube(kubeconfig(tmp_path, {"token": "abc"}), user_agent="t")
    api = kube._api
    assert kube.host == "https://127.0.0.1:6443"
    assert Path(api.configuration.ca_file).read_bytes() == b"CA"
    _, url, headers, body, _ = api.param_serialize(method="PATCH", resource_path="/api/v1/nodes/a/status",
                                                   query_params=[("fieldManager", "x")], header_params={},
                                                   body={"a": 1}, auth_settings=[])
    assert url == "https://127.0.0.1:6443/api/v1/nodes/a/status?fieldManager=x"
    assert headers["Authorization"] == "Bearer abc" and headers["User-Agent"] == "t"
    assert body == b'{"a": 1}'


def test_exec_credentials_are_refused_so_the_caller_can_fall_back(tmp_path: Path) -> None:
    with pytest.raises(KubeError, match="exec"):
        load_light_kube(kubeconfig(tmp_path, {"exec": {"command": "aws"}}))


def test_an_unreachable_server_is_unavailable(tmp_path: Path) -> None:
    from autoclusters.kube import Unavailable

    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump({
        "current-context": "c", "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    with pytest.raises(Unavailable):
        load_light_kube(str(path)).get_node("x")


def test_the_agent_path_does_not_import_the_kubernetes_library() -> None:
    code = ("import sys; from autoclusters.kube.light import load_light_kube; import autoclusters.detector.node, "
            "autoclusters.detector.simulated_fleet, autoclusters.cli.detector; "
            "print(any(m == 'kubernetes' or m.startswith('kubernetes.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
