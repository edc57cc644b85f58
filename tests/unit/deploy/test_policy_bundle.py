"""One way to find the Rego bundle, in a checkout and from an installed wheel."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from autoclusters.deploy import policy_bundle

ROOT = Path(__file__).resolve().parents[3]


def test_in_a_checkout_the_package_path_is_the_repositorys_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOCLUSTERS_POLICIES", raising=False)
    assert policy_bundle.policies_dir() == (ROOT / "policies").resolve()


def test_the_environment_names_another_bundle(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AUTOCLUSTERS_POLICIES", str(tmp_path))
    with pytest.raises(policy_bundle.PoliciesNotFound, match="AUTOCLUSTERS_POLICIES"):
        policy_bundle.policies_dir()
    (tmp_path / "lib").mkdir()
    assert policy_bundle.policies_dir() == tmp_path.resolve()


def test_the_wheel_carries_every_rego_module() -> None:
    """The package-data globs (pyproject.toml) match every Rego file of policies/."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["autoclusters"]
    package = ROOT / "autoclusters"
    shipped = {p.resolve() for g in globs for p in package.glob(g)}
    assert {p.resolve() for p in (ROOT / "policies").rglob("*.rego")} <= shipped
