"""The lean transport reads kubeconfigs like the full client and never imports ``kubernetes``."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autoclusters.kube import KubeError, load_kube
from autoclusters.kube.light import LightApiClient, NeedsFullClient, load_light_kube


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
    assert json.loads(body) == {"a": 1}


def test_tls_server_name_and_token_file_are_read(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("rotated-1\n")
    path = kubeconfig(tmp_path, {"tokenFile": str(token)})
    doc = yaml.safe_load(Path(path).read_text())
    doc["clusters"][0]["cluster"]["tls-server-name"] = "api.internal"
    Path(path).write_text(yaml.safe_dump(doc))
    api = load_light_kube(path)._api
    assert api.configuration.server_name == "api.internal"
    assert api._server.tls.server_name == "api.internal"
    _, _, headers, _, _ = api.param_serialize(method="GET", resource_path="/api", query_params=None,
                                              header_params={}, body=None, auth_settings=[])
    assert headers["Authorization"] == "Bearer rotated-1"


@pytest.mark.parametrize("user, cluster", [
    ({"exec": {"command": "aws"}}, {}),
    ({"auth-provider": {"name": "oidc"}}, {}),
    ({"username": "admin", "password": "x"}, {}),
    ({"token": "t"}, {"proxy-url": "http://proxy:3128"}),
])
def test_load_kube_falls_back_to_the_full_client_for_what_the_lean_one_cannot_serve(
        tmp_path: Path, user: dict[str, object], cluster: dict[str, object]) -> None:
    path = kubeconfig(tmp_path, user)
    doc = yaml.safe_load(Path(path).read_text())
    doc["clusters"][0]["cluster"].update(cluster)
    Path(path).write_text(yaml.safe_dump(doc))
    with pytest.raises(NeedsFullClient):
        load_light_kube(path)
    if "exec" in user or "auth-provider" in user:
        return  # the full client would run the plugin; that it is chosen is what the refusal above proves
    kube = load_kube(path)
    assert type(kube._api).__module__.startswith("kubernetes.")


def test_load_kube_takes_the_lean_transport_when_it_can(tmp_path: Path) -> None:
    kube = load_kube(kubeconfig(tmp_path, {"token": "abc"}), qps_pool=40)
    assert isinstance(kube._api, LightApiClient)
    assert kube._api._server._pool_size == 40


@pytest.mark.parametrize("env, lean", [
    ({"HTTPS_PROXY": "http://proxy:3128"}, False),
    ({"https_proxy": "http://proxy:3128"}, False),
    ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "127.0.0.1"}, True),
    ({"HTTP_PROXY": "http://proxy:3128"}, True),  # a proxy for http:// only; the API server is https://
])
def test_a_proxy_named_by_the_environment_is_honoured_through_the_full_client(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], lean: bool) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy",
                 "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    kube = load_kube(kubeconfig(tmp_path, {"token": "abc"}))
    assert isinstance(kube._api, LightApiClient) is lean
    if not lean:
        assert kube._api.configuration.proxy == "http://proxy:3128"


def test_several_kubeconfig_files_are_merged_by_the_full_client(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    first = kubeconfig(tmp_path, {"token": "abc"})
    monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{tmp_path / 'other'}")
    with pytest.raises(NeedsFullClient):
        load_light_kube()
    assert not isinstance(load_kube()._api, LightApiClient)


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
            "autoclusters.sim.fleet, autoclusters.cli.detector; "
            "print(any(m == 'kubernetes' or m.startswith('kubernetes.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
