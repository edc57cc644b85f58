import os
import subprocess
import sys

import pytest

from autoclusters.cli import main as cli
from autoclusters.cli.exit_codes import EXIT_FAILED


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


@pytest.mark.parametrize("argv", [["controller", "manifests"], ["slurm-bridge", "rbac"]],
                         ids=["written-while-running", "written-at-the-final-flush"])
def test_a_reader_gone_is_a_failure_without_a_traceback(argv: list[str]) -> None:
    """``autoclusters ... | head -1`` once head has exited: the output's reader is gone (the
    pipe's read end closed before the command writes). The command ends with the failure code
    and a quiet stderr, whether its output (over 8 KB, or within the buffer) is written while
    it runs or at the final flush."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "autoclusters.cli.main", *argv], stdout=write,
                              stderr=subprocess.PIPE, timeout=60, check=False)
    finally:
        os.close(write)
    err = proc.stderr.decode()
    assert proc.returncode == EXIT_FAILED, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
