"""The circuit breaker's hysteresis."""

from autoclusters.controller.breaker import CLOSED, OPEN, next_state


def step(state: str, nodes: int, faulty: int, min_nodes: int = 0) -> str:
    return next_state(state, nodes, faulty, open_above=30, close_below=20, min_nodes=min_nodes).state


def test_opens_above_and_closes_only_below_the_lower_threshold() -> None:
    assert step(CLOSED, 10, 3) == CLOSED  # 30% is not above 30%
    assert step(CLOSED, 10, 4) == OPEN
    assert step(OPEN, 10, 3) == OPEN  # between the thresholds: keeps its state
    assert step(OPEN, 10, 2) == OPEN  # 20% is not below 20%
    assert step(OPEN, 10, 1) == CLOSED


def test_one_fault_or_a_small_pool_never_opens_it() -> None:
    assert step(CLOSED, 1, 1) == CLOSED
    assert step(CLOSED, 3, 2) == OPEN
    assert step(CLOSED, 3, 2, min_nodes=5) == CLOSED


def test_reading_reports_the_share() -> None:
    r = next_state(CLOSED, 8, 3, open_above=30, close_below=20)
    assert (r.state, r.percent) == (OPEN, 37)
