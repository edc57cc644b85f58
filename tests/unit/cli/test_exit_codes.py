"""Exit codes of the operator commands that need no cluster to check: unreachable (3) and bad usage (2)."""

from pathlib import Path

import pytest
import yaml

from autoclusters.cli import main as cli


@pytest.fixture()
def dead_kubeconfig(tmp_path: Path) -> str:
    """A kubeconfig naming an API server nobody listens on."""
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "dead",
           "clusters": [{"name": "dead",
                         "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
           "users": [{"name": "u", "user": {"token": "t"}}],
           "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.mark.parametrize("argv", [["status"], ["approve", "n1"], ["approve", "--pool", "p"], ["history"],
                                  ["history", "n1", "--since", "1h"]])
def test_unreachable_cluster_exits_3(argv: list[str], dead_kubeconfig: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*argv, "--kubeconfig", dead_kubeconfig]) == cli.EXIT_UNREACHABLE
    assert "cannot reach the cluster" in capsys.readouterr().err


def test_unreadable_kubeconfig_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status", "--kubeconfig", str(tmp_path / "missing")]) == cli.EXIT_UNREACHABLE
    assert "cannot load Kubernetes credentials" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["approve"], ["approve", "n1", "--pool", "p"], ["history", "--since", "soon"],
                                  ["status", "--domain", "Not A Domain"]])
def test_bad_usage_exits_2_before_touching_the_cluster(argv: list[str], dead_kubeconfig: str) -> None:
    assert cli.main([*argv, "--kubeconfig", dead_kubeconfig]) == cli.EXIT_USAGE


def test_commands_are_registered() -> None:
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert sub.choices is not None and {"status", "approve", "history"} <= set(sub.choices)


def test_exit_codes_hold_under_python_dash_m(dead_kubeconfig: str) -> None:
    """The demo and scripts run ``python -m autoclusters.cli.main``; a CliError must still map to its code."""
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "autoclusters.cli.main", *args], capture_output=True, text=True,
                              timeout=60, check=False)

    usage = run("approve", "--kubeconfig", dead_kubeconfig)
    assert usage.returncode == cli.EXIT_USAGE, usage.stderr
    assert "Traceback" not in usage.stderr and "either NODE... or --pool" in usage.stderr
    assert run("status", "--kubeconfig", dead_kubeconfig).returncode == cli.EXIT_UNREACHABLE
