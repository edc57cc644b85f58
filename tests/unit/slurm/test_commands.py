"""Parsing Slurm's output and the commands the bridge runs (a fake runner; real Slurm in
tests/integration/test_slurm_bridge.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from autoclusters.pools.slurm_policy import SignalTarget
from autoclusters.slurm.commands import Result, Slurm, SlurmError, SubprocessRunner, parse_jobs, parse_nodes

# Captured from Debian's Slurm 22.05 (sinfo -N -h -O NodeList:|,StateComplete:|,User:|,Timestamp:|,Reason:).
SINFO = """\
a100-0|mixed+drain|root|2026-11-30T10:16:36|autoclusters: Xid 79 on GPU 3 (remediation a100-0-xid-79-1)
a100-1|idle|Unknown|Unknown|none
a100-2|idle+drain|alice|2026-11-30T09:00:00|bad DIMM | ticket 42
a100-3|allocated+completing+drain|root|2026-11-30T10:17:00|autoclusters: x
a100-4|down*|slurm|2026-11-30T10:00:00|Not responding
a100-1|idle|Unknown|Unknown|none
"""


def test_node_states_and_reasons_are_read_from_the_field_list() -> None:
    nodes = parse_nodes(SINFO)
    assert set(nodes) == {f"a100-{i}" for i in range(5)}
    n0 = nodes["a100-0"]
    assert (n0.state, n0.drain, n0.busy, n0.drained) == ("mixed", True, True, False)
    assert n0.reason == "autoclusters: Xid 79 on GPU 3 (remediation a100-0-xid-79-1)"
    assert nodes["a100-1"].reason == "" and not nodes["a100-1"].drain
    admin = nodes["a100-2"]
    assert admin.drained and admin.reason == "bad DIMM | ticket 42" and admin.reason_user == "alice"
    # COMPLETING is not DRAINED yet: jobs are still leaving the node.
    assert nodes["a100-3"].drain and not nodes["a100-3"].drained
    assert "not_responding" in nodes["a100-4"].flags and nodes["a100-4"].state == "down"


def test_a_line_that_is_not_the_field_list_fails_loudly() -> None:
    with pytest.raises(SlurmError, match="unexpected sinfo line"):
        parse_nodes("a100-0 idle\n")


def test_jobs_are_parsed_with_their_requeue_flag_and_restarts() -> None:
    jobs = parse_jobs("7|RUNNING|1|0|1|a100-[0-1]\n8|PENDING|0|2|1|\n9|COMPLETING|1|1|1|a100-0\n")
    assert [(j.job_id, j.active, j.pending, j.requeue, j.restarts) for j in jobs] == [
        ("7", True, False, True, 0), ("8", False, True, False, 2), ("9", True, False, True, 1)]


class FakeRunner:
    def __init__(self, answers: dict[str, Result] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.answers = answers or {}

    def __call__(self, argv: Sequence[str], timeout: float) -> Result:
        self.calls.append(list(argv))
        return self.answers.get(argv[0], Result(0, "", ""))


def test_commands_and_their_arguments() -> None:
    run = FakeRunner()
    slurm = Slurm(run, timeout=3)
    slurm.drain("a100-0", "autoclusters: Xid 79 on GPU 3 (remediation r)")
    slurm.signal("7", "USR1", SignalTarget.BATCH)
    slurm.signal("7", "TERM", SignalTarget.STEPS)
    slurm.requeue("7")
    slurm.resume("a100-0")
    assert run.calls == [
        ["scontrol", "update", "NodeName=a100-0", "State=DRAIN",
         "Reason=autoclusters: Xid 79 on GPU 3 (remediation r)"],
        ["scancel", "--signal=USR1", "--batch", "7"],
        ["scancel", "--signal=TERM", "7"],
        ["scontrol", "requeue", "7"],
        ["scontrol", "update", "NodeName=a100-0", "State=RESUME"],
    ]


def test_a_failing_command_raises_with_its_stderr() -> None:
    slurm = Slurm(FakeRunner({"scontrol": Result(1, "", "slurm_update error: Invalid node name specified")}))
    with pytest.raises(SlurmError, match="Invalid node name specified"):
        slurm.resume("nope")


def test_jobs_forgotten_by_slurm_are_unknown_not_an_error() -> None:
    slurm = Slurm(FakeRunner({"squeue": Result(1, "", "slurm_load_jobs error: Invalid job id specified")}))
    assert slurm.jobs(["99"]) == {}


def test_output_that_is_not_utf8_is_read_with_the_bytes_replaced() -> None:
    """A drain reason typed in Latin-1 (``café``) reaches sinfo's output as it was typed; it used
    to raise UnicodeDecodeError out of the runner at every poll. A real process prints it here."""
    import sys

    line = b"a100-2|idle+drain|alice|2026-11-30T09:00:00|caf\xe9 DIMM\n"
    script = f"import sys; sys.stdout.buffer.write({line!r}); sys.stderr.buffer.write(b'\\xff')"
    result = SubprocessRunner()((sys.executable, "-c", script), timeout=30)
    assert result.returncode == 0 and result.stderr == "\ufffd"
    assert parse_nodes(result.stdout)["a100-2"].reason == "caf\ufffd DIMM"
