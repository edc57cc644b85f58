"""``autoclusters policy check --allow-lists``: a GitOps pipeline judges pools under its
installation's allow-lists, as the webhook does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoclusters.cli.main import main

POOL = """apiVersion: remediation.autoclusters.io/v1alpha1
kind: GpuNodePool
metadata: {name: a100}
spec:
  provider: {type: command, command: {command: [/opt/replace-node]}}
"""


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, list[str]]:
    (tmp_path / "pool.yaml").write_text(POOL)
    rc = main(["policy", "check", "-o", "json", str(tmp_path / "pool.yaml"), *flags])
    return rc, [v["rule"] for v in json.loads(capsys.readouterr().out)["violations"]]


def test_an_unlisted_command_fails_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _check(tmp_path, capsys) == (1, ["pool-allow-list"])


def test_the_installations_lists_pass_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lists = tmp_path / "allow-lists.json"
    lists.write_text(json.dumps({"commands": {"replace": ["/opt/replace-node"]}}))
    assert _check(tmp_path, capsys, "--allow-lists", f"@{lists}") == (0, [])
    assert _check(tmp_path, capsys, "--allow-lists", '{"commands": {"other": ["/bin/true"]}}') == \
        (1, ["pool-allow-list"])


def test_a_bad_document_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pool.yaml").write_text(POOL)
    assert main(["policy", "check", str(tmp_path / "pool.yaml"), "--allow-lists", '{"programs": {}}']) == 2
    assert "unknown key(s) programs" in capsys.readouterr().err
