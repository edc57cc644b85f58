"""``autoclusters alerts`` prints the rules the stack deploys, for the installation's names."""

from __future__ import annotations

import json

import pytest
import yaml

from autoclusters.cli.exit_codes import EXIT_USAGE
from autoclusters.cli.main import main
from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.deploy.admission import webhook_names
from autoclusters.deploy.alerts import render, rules
from autoclusters.deploy.monitoring import prometheus_rule
from autoclusters.names import Names


@pytest.fixture(autouse=True)
def default_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOCLUSTERS_DOMAIN", raising=False)
    monkeypatch.delenv("AUTOCLUSTERS_CONDITION_PREFIX", raising=False)


def test_the_rule_file_is_the_shipped_one_for_the_default_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["alerts"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out) == rules() == yaml.safe_load(render())


def test_another_domain_gets_rules_naming_its_own_webhooks(capsys: pytest.CaptureFixture[str]) -> None:
    brand = Names("crusoe.ai", "Crusoe")
    assert main(["alerts", "--domain", "crusoe.ai", "--condition-prefix", "Crusoe", "--namespace", "gpu"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out) == rules(brand, "gpu")
    assert webhook_names(brand)[0].replace(".", "\\\\.") in out
    assert 'absent(autoclusters_controller_leader{namespace="gpu"})' in out


def test_the_prometheus_rule_is_the_stacks_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["alerts", "--prometheus-rule", "--namespace", "gpu", "--label", "release=kps"]) == 0
    assert json.loads(capsys.readouterr().out) == prometheus_rule("gpu", {"release": "kps"}, Names())


@pytest.mark.parametrize("argv", [["alerts", "--prometheus-rule", "--label", "release"],
                                  ["alerts", "--label", "release=kps"]], ids=["not-key-value", "not-for-a-file"])
def test_a_bad_label_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == EXIT_USAGE
    assert "--label" in capsys.readouterr().err


def test_the_approval_wait_is_an_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["alerts", "--approval-wait-seconds", "1800"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == rules(Names(), None, 1800)
    assert main(["alerts", "--prometheus-rule", "--approval-wait-seconds", "1800"]) == 0
    assert json.loads(capsys.readouterr().out) == prometheus_rule(DEFAULT_NAMESPACE, {}, Names(), 1800)


@pytest.mark.parametrize("value", ["0", "6h", "-5"])
def test_a_bad_approval_wait_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["alerts", f"--approval-wait-seconds={value}"])
    assert exit_.value.code == EXIT_USAGE
    assert "positive whole number of seconds" in capsys.readouterr().err
