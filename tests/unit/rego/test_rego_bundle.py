"""The Rego bundle's own gates, run through the real OPA binary so CI runs them:
formatting, strict compilation, the opa unit tests with coverage, the one-folder-per-
policy layout, and every shipped sample judged as its folder says."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from autoclusters.allow_lists import AllowLists
from autoclusters.rego import opa
from autoclusters.rego.policy_data import PolicyConfig
from tests.conftest import tool_missing

POLICIES = Path(__file__).resolve().parents[3] / "policies"
SAMPLES = Path(__file__).resolve().parents[3] / "examples" / "policy-samples"
ADAPTERS = {"admission": "data.autoclusters.admission.decision",
            "manifests": "data.autoclusters.manifests.violation",
            "pools": "data.autoclusters.pools.violations"}
MIN_COVERAGE = 95.0


@pytest.fixture(scope="module")
def opa_bin() -> str:
    try:
        return str(opa.opa_binary())
    except opa.OpaError as e:
        tool_missing(str(e))


def _opa(opa_bin: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([opa_bin, *args], input=stdin, capture_output=True, text=True, check=False, timeout=120)


def test_formatted(opa_bin: str) -> None:
    proc = _opa(opa_bin, "fmt", "--list", str(POLICIES))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"not opa-fmt formatted: {proc.stdout}"


def test_strict_check(opa_bin: str) -> None:
    proc = _opa(opa_bin, "check", "--strict", str(POLICIES))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_opa_test_as_a_user_types_it(opa_bin: str) -> None:
    """``opa test policies/`` with no flags: nothing in the folder is loaded as data by mistake."""
    proc = _opa(opa_bin, "test", str(POLICIES))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_opa_tests_pass_with_coverage(opa_bin: str) -> None:
    proc = _opa(opa_bin, "test", "--coverage", "--format=json", str(POLICIES))
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    low = {f: v.get("coverage", 0) for f, v in report["files"].items()
           if not f.endswith("_test.rego") and v.get("coverage", 0) < MIN_COVERAGE}
    assert report["coverage"] >= MIN_COVERAGE and not low, f"coverage {report['coverage']}: {low}"


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_policy_folder_is_complete(adapter: str) -> None:
    folder = POLICIES / adapter
    assert (folder / "src.rego").is_file()
    assert (folder / "src_test.rego").is_file()
    for kind in ("allowed", "disallowed"):
        assert any((SAMPLES / adapter / kind).iterdir()), f"{adapter}: no {kind} samples"


def test_policies_hold_no_data_files() -> None:
    """Samples live in examples/policy-samples/: a JSON or YAML file under policies/ would be
    loaded as data by ``opa test policies/`` (OPA v1.22 has no ignore file)."""
    assert [p for p in POLICIES.rglob("*") if p.suffix in {".json", ".yaml", ".yml"}] == []


# The installation the samples are judged in: its operator lists the allowed samples' hook URL
# (a disallowed sample names a command no entry lists).
SAMPLES_CONFIG = PolicyConfig(allow_lists=AllowLists(urls={"pre-drain": "https://hooks.example/pre-drain"}))


def _samples() -> list[tuple[str, Path]]:
    return [(a, f) for a in sorted(ADAPTERS) for f in sorted((SAMPLES / a).rglob("*.*"))]


@pytest.mark.parametrize(("adapter", "sample"), _samples(), ids=lambda x: x.name if isinstance(x, Path) else x)
def test_sample(opa_bin: str, adapter: str, sample: Path) -> None:
    """Disallowed samples are named ``<rule>.<case>.*`` and must break exactly that rule."""
    docs = [d for d in yaml.safe_load_all(sample.read_text()) if d is not None]
    doc = {"apiVersion": "v1", "kind": "List", "items": docs} if len(docs) > 1 else docs[0]
    value = opa.evaluate(ADAPTERS[adapter], doc, SAMPLES_CONFIG.data_document(), policies=POLICIES)
    rules = {v["rule"] for v in (value["violations"] if adapter == "admission" else value)}
    if sample.parent.name == "allowed":
        assert rules == set()
        if adapter == "admission":
            assert value["allowed"] is True
    else:
        assert rules == {sample.name.split(".")[0]}
        if adapter == "admission":
            assert value["allowed"] is False
