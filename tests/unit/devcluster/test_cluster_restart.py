"""``LocalCluster``'s crash and restart of one component (the platform fault tests' etcd and
kube-apiserver), against a stand-in etcd: a process answering etcd's /health on its port."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autoclusters.devcluster import processes as p
from autoclusters.devcluster.cluster import LocalCluster

FAKE_ETCD = """
import http.server, sys
url = next(a for a in sys.argv if a.startswith("--listen-client-urls="))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"health":"true"}')
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(url.rsplit(":", 1)[1])), Health).serve_forever()
"""


def test_a_killed_component_starts_again_with_its_command_line_on_its_port(tmp_path: Path) -> None:
    cluster = LocalCluster("unit", root=tmp_path)
    cluster.logs.mkdir(parents=True)
    script = tmp_path / "fake_etcd.py"
    script.write_text(FAKE_ETCD)
    port = p.free_port()
    first = p.spawn("etcd", [sys.executable, str(script), f"--listen-client-urls=http://127.0.0.1:{port}"],
                    cluster.logs, cluster.dir)
    cluster._save([first], {"etcd": port}, {})
    healthy = lambda: p.http_ok(f"http://127.0.0.1:{port}/health", expect=b'"true"')  # noqa: E731
    try:
        p.wait_healthy(first, healthy, 10, lambda _: None)
        cluster.restart_component("etcd")
        (second,) = cluster.procs()
        assert second.pid != first.pid and not p.alive(first) and p.alive(second)
        assert second.argv == first.argv and healthy()  # the same command line, the same port
        cluster.kill_component("etcd")
        assert not p.alive(second) and not healthy()
        with pytest.raises(p.StartError, match="not running"):
            cluster.kill_component("etcd")
        cluster.start_component("etcd", flags=["--extra"])
        (third,) = cluster.procs()
        assert third.argv == [*first.argv, "--extra"] and healthy()  # kept for its next start
        with pytest.raises(p.StartError, match="still running"):
            cluster.start_component("etcd")
        with pytest.raises(ValueError, match="no restart for component 'kwok'"):
            cluster.kill_component("kwok")
    finally:
        cluster.down()
    assert not any(p.alive(x) for x in (first, second, third))
