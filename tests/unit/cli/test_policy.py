"""``autoclusters policy check`` over the good and bad manifest sets, through the CLI."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from autoclusters.cli.main import main
from autoclusters.rego import opa
from tests.conftest import tool_missing

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "manifests"


@pytest.fixture(autouse=True)
def _needs_opa() -> None:
    try:
        opa.opa_binary()
    except opa.OpaError as e:
        tool_missing(str(e))


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    rc = main(["policy", "check", "-o", "json", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_good_set_passes(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _json(capsys, str(FIXTURES / "good"))
    assert rc == 0
    assert out["violations"] == []
    assert out["documents"] == 7


def test_bad_set_reports_every_violation_with_file_and_object(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _json(capsys, str(FIXTURES / "bad"))
    assert rc == 1
    got = {(Path(v["source"]).name, v["index"], v["item"], v["kind"], v["name"], v["rule"]) for v in out["violations"]}
    assert got == {
        ("list.json", 0, 1, "GpuNodePool", "b200", "pool-fault-class-action"),
        ("nodes.yaml", 0, None, "Node", "gpu-h100-1", "manifest-maintenance-required"),
        ("nodes.yaml", 1, None, "Node", "gpu-h100-2", "maintenance-approved-value"),
        ("pools.yaml", 0, None, "GpuNodePool", "h100-training", "pool-consent-mode"),
        ("pools.yaml", 1, None, "GpuNodePool", "a100-inference", "pool-consent-mode"),
        ("pools.yaml", 1, None, "GpuNodePool", "a100-inference", "pool-max-concurrent-repairs"),
        ("pools.yaml", 2, None, "GpuNodePool", "b200-flapping", "pool-circuit-breaker"),
    }


def test_table_output_names_file_object_and_rule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "check", str(FIXTURES / "bad" / "nodes.yaml")]) == 1
    out = capsys.readouterr().out
    assert "nodes.yaml" in out and "Node/gpu-h100-1" in out and "manifest-maintenance-required" in out


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO((FIXTURES / "bad" / "pools.yaml").read_text()))
    rc, out = _json(capsys, "-")
    assert rc == 1
    assert {v["source"] for v in out["violations"]} == {"<stdin>"}


def test_other_domain(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "node.yaml"
    f.write_text("apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  labels:\n"
                 "    crusoe.ai/maintenance-required: 'true'\n    autoclusters.io/maintenance-required: 'true'\n")
    rc, out = _json(capsys, "--domain", "crusoe.ai", str(f))
    assert rc == 1
    assert [v["message"].split("/")[0] for v in out["violations"]] == ["crusoe.ai"]


@pytest.mark.parametrize("name", ["broken.yaml", "not-an-object.yaml"])
def test_invalid_input_exits_2(capsys: pytest.CaptureFixture[str], name: str) -> None:
    assert main(["policy", "check", str(FIXTURES / "invalid" / name)]) == 2
    assert name in capsys.readouterr().err


def test_the_domain_comes_from_the_environment_like_every_entry_point(capsys: pytest.CaptureFixture[str],
                                                                       tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "node.yaml"
    f.write_text("apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  labels:\n"
                 "    crusoe.ai/maintenance-required: 'true'\n")
    assert main(["policy", "check", str(f)]) == 0  # another domain's label means nothing to the default
    monkeypatch.setenv("AUTOCLUSTERS_DOMAIN", "crusoe.ai")
    assert main(["policy", "check", str(f)]) == 1
    monkeypatch.setenv("AUTOCLUSTERS_DOMAIN", "Not A Domain")
    assert main(["policy", "check", str(f)]) == 2
    assert "invalid domain" in capsys.readouterr().err


def test_an_unusable_brand_in_the_environment_is_a_usage_error_everywhere(capsys: pytest.CaptureFixture[str],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOCLUSTERS_CONDITION_PREFIX", "lower")
    assert main(["controller", "manifests"]) == 2
    assert "invalid condition prefix 'lower'" in capsys.readouterr().err
