"""autoclusters.memo: answers kept per object identity, per part, while they still hold, bounded."""

from __future__ import annotations

import weakref

from autoclusters.memo import ObjectMemo


def test_an_answer_is_worked_out_once_per_object_and_part() -> None:
    memo: ObjectMemo[str] = ObjectMemo(8)
    asked: list[str] = []

    def work(tag: str) -> str:
        asked.append(tag)
        return tag

    a, equal = {"x": 1}, {"x": 1}
    assert memo.get(a, lambda: work("a")) == "a"
    assert memo.get(a, lambda: work("again")) == "a"
    assert memo.get(equal, lambda: work("equal")) == "equal"  # an equal object is another object
    assert memo.get(a, lambda: work("reset"), "reset") == "reset"  # another question of the same object
    assert asked == ["a", "equal", "reset"]


def test_a_kept_answer_that_no_longer_holds_is_worked_out_again() -> None:
    memo: ObjectMemo[int] = ObjectMemo(8)
    version = [1]
    obj = object()
    assert memo.get(obj, lambda: version[0], still=lambda kept: kept == version[0]) == 1
    version[0] = 2
    assert memo.get(obj, lambda: version[0], still=lambda kept: kept == version[0]) == 2


def test_the_memo_is_bounded_and_holds_its_objects() -> None:
    memo: ObjectMemo[int] = ObjectMemo(4)
    for i in range(10):
        memo.get(object(), lambda i=i: i)  # type: ignore[misc]
        assert len(memo) <= 4
    # the object is held with its answer, so its id cannot go to a new object while kept
    class Obj:
        pass

    held = Obj()
    ref = weakref.ref(held)
    memo.get(held, lambda: 7)
    del held
    assert ref() is not None
