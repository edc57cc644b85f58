import pytest

from autoclusters.cli import main as cli


def test_every_command_module_registers() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sub.choices is not None and "dev" in sub.choices


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == cli.EXIT_USAGE
    assert "usage" in capsys.readouterr().out


def test_kubeconfig_of_a_missing_cluster_is_a_clear_error(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("AUTOCLUSTERS_STATE_DIR", str(tmp_path))
    assert cli.main(["dev", "kubeconfig", "--name", "nope"]) == cli.EXIT_FAILED
    assert "not running" in capsys.readouterr().err


def test_bad_cluster_name_is_rejected() -> None:
    from autoclusters.devcluster.cluster import LocalCluster

    with pytest.raises(ValueError, match="invalid cluster name"):
        LocalCluster("../etc")
