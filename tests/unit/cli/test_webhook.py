from __future__ import annotations

from pathlib import Path

import pytest

from autoclusters.cli.main import main
from autoclusters.webhook.install import _get


def test_run_needs_certificates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhook", "run", "--port", "0"]) == 2
    assert "--cert-dir" in capsys.readouterr().err


def test_tls_cert_and_key_go_together(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["webhook", "serve", "--tls-cert", str(tmp_path / "tls.crt")]) == 2
    assert "go together" in capsys.readouterr().err


def test_json_pointer_lookup_for_the_bundle_patch() -> None:
    cfg = {"webhooks": [{"clientConfig": {"caBundle": "QQ=="}}, {"clientConfig": {}}]}
    assert _get(cfg, "/webhooks/0/clientConfig/caBundle") == "QQ=="
    assert _get(cfg, "/webhooks/1/clientConfig/caBundle") is None
    assert _get(cfg, "/webhooks/5/clientConfig/caBundle") is None
