"""``RepeatedErrors``: an error is new per key until the same one comes back; a success or the
key's end forgets it (the loops' traceback-once logging rests on this; their own tests check
the log: tests/unit/slurm/test_bridge.py, tests/unit/detector/test_agent.py)."""

from autoclusters.repeats import RepeatedErrors


def test_an_error_is_new_until_it_repeats_and_new_again_after_a_success_or_another_error() -> None:
    bugs = RepeatedErrors()
    assert bugs.is_new("a", KeyError("x"))
    assert not bugs.is_new("a", KeyError("x"))
    assert bugs.is_new("b", KeyError("x"))  # per key
    assert bugs.is_new("a", KeyError("y"))  # another error
    bugs.succeeded("a")
    assert bugs.is_new("a", KeyError("y"))


def test_keys_not_kept_are_forgotten() -> None:
    bugs = RepeatedErrors()
    bugs.is_new("a", ValueError())
    bugs.is_new("b", ValueError())
    bugs.keep_only(["b"])
    assert bugs.is_new("a", ValueError()) and not bugs.is_new("b", ValueError())
