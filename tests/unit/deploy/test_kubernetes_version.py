"""The oldest Kubernetes the stack deploys to (``deploy.kubernetes_version``): the version read
from an API server's ``/version`` as the providers decorate it, and the stack program that
refuses an older cluster before it registers anything, against a server that answers
``/version`` as an API server does. That server is an HTTP socket below the client, not a
fake of it: the stack program builds its own client from a kubeconfig, which is part of what
is tested (the fake API server, tests/unit/fakeapi.py, sits above the transport)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoclusters.deploy.kubernetes_version import MINIMUM, MINIMUM_TEXT, parse, too_old
from autoclusters.pools.pool_config import PoolConfigError
from components._recording import record


@pytest.mark.parametrize("version, expected", [
    ({"major": "1", "minor": "34", "gitVersion": "v1.34.4"}, (1, 34)),
    ({"major": "1", "minor": "30+", "gitVersion": "v1.30.4-eks-a737599"}, (1, 30)),
    ({"major": "", "minor": "", "gitVersion": "v1.29.8-gke.1000"}, (1, 29)),
    ({"gitVersion": "unknown"}, None),
])
def test_the_version_is_read_as_providers_decorate_it(version: dict[str, str], expected: Any) -> None:
    assert parse(version) == expected


def test_an_older_cluster_is_refused_with_its_version_and_what_it_lacks() -> None:
    why = too_old({"major": "1", "minor": "29", "gitVersion": "v1.29.4"})
    assert why is not None and "v1.29.4" in why and f"needs {MINIMUM_TEXT} or newer" in why
    assert "ValidatingAdmissionPolicy" in why
    assert too_old({"major": str(MINIMUM[0]), "minor": f"{MINIMUM[1]}+"}) is None
    assert too_old({"gitVersion": "unknown"}) is None  # nothing refused on a guess


@contextmanager
def api_server(version: dict[str, str], tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """An HTTP server answering ``/version``, and a kubeconfig naming it; the paths asked."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = json.dumps(version).encode() if self.path == "/version" else b"{}"
            self.send_response(200 if self.path == "/version" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(yaml.safe_dump({
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    try:
        yield str(kubeconfig), asked
    finally:
        server.shutdown()
        server.server_close()


def test_the_stack_program_refuses_an_older_cluster_before_registering_anything(tmp_path: Path) -> None:
    from components import stack

    old = {"major": "1", "minor": "29", "gitVersion": "v1.29.4"}
    with api_server(old, tmp_path) as (kubeconfig, asked), \
            pytest.raises(PoolConfigError, match=r"Kubernetes v1\.29\.4; autoclusters needs 1\.30"):
        record(stack.program, config={"autoclusters:kubeconfig": kubeconfig})
    assert asked == ["/version"]


def test_the_stack_program_deploys_to_a_supported_cluster(tmp_path: Path) -> None:
    from components import stack

    with api_server({"major": "1", "minor": "30+", "gitVersion": "v1.30.4-eks-a737599"}, tmp_path) as (
            kubeconfig, asked):
        mocks = record(stack.program, config={"autoclusters:kubeconfig": kubeconfig})
    assert asked == ["/version"]
    assert any(o["kind"] == "ValidatingAdmissionPolicy" for o in mocks.kubernetes_objects())


def test_a_cluster_that_cannot_be_asked_is_left_to_the_provider(tmp_path: Path) -> None:
    from components import stack

    mocks = record(stack.program, config={"autoclusters:kubeconfig": str(tmp_path / "missing")})
    assert any(o["kind"] == "ValidatingAdmissionPolicy" for o in mocks.kubernetes_objects())


def test_the_docs_name_the_minimum_the_check_uses() -> None:
    root = Path(__file__).resolve().parents[3]
    for doc in ("README.md", "docs/deploy.md"):
        assert f"Kubernetes {MINIMUM_TEXT} or" in (root / doc).read_text().replace("\n", " "), doc
