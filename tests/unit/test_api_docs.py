"""The docs state the API that autoclusters/api.py defines: the consent modes, the pool
settings with their defaults and ranges, the timings and the controller's flag defaults are
checked against the code, so neither can change alone. Also: every consent mode and every
fault class has a defined behaviour (a new member fails here until it has one)."""

from __future__ import annotations

import itertools
import re
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autoclusters import api, pool_fields
from autoclusters.api import ClassAction, ConsentMode, FaultClass, Phase, RepairAction
from autoclusters.controller.controller_config import ControllerConfig
from autoclusters.detector.agent_config import AgentConfig
from autoclusters.detector.window import FaultTracker

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _rows(doc: str, marker: str) -> list[list[str]]:
    """The cells of each row of the table after ``<!-- marker``."""
    body = (DOCS / doc).read_text().split(f"<!-- {marker}", 1)[1].splitlines()[1:]
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), body))[2:]  # after header, separator
    # a cell may hold an escaped pipe (``\|``), as GitHub's Markdown writes one inside a table
    return [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row.strip().removeprefix("|")
                                                               .removesuffix("|"))] for row in rows]


def _number(text: str) -> float:
    return float(re.sub(r"[^\d.]", "", text.split()[0]))


def test_the_pool_settings_table_is_the_field_table() -> None:
    text = (DOCS / "contract.md").read_text()
    assert pool_fields.docs_table() in text
    assert pool_fields.with_docs_table(text) == text, "docs/contract.md's pool settings table is stale: make manifests"


def test_the_consent_modes_table_lists_each_mode_in_order_and_marks_the_default() -> None:
    rows = _rows("contract.md", "consent-modes-table")
    assert [re.findall(r"`([^`]+)`", r[0])[0] for r in rows] == [m.value for m in ConsentMode]
    assert [r[0] for r in rows if "(default)" in r[0]] == [f"`{api.DEFAULT_CONSENT_MODE}` (default)"]


def test_the_timings_table_shows_the_defaults() -> None:
    limits = {lim.path: lim for lim in pool_fields.INTEGERS}
    config = ControllerConfig()
    checked = 0
    for _, default, source in _rows("contract.md", "timings-table"):
        numbers = [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*", default)]
        refs = re.findall(r"`([^`]+)`", source)
        if source.startswith("pool"):
            group = refs[0].rpartition(".")[0]
            paths = [group + r if r.startswith(".") else r for r in refs]
            assert numbers == [limits[p].default for p in paths], source
        elif source.startswith("controller"):
            assert numbers == [getattr(config, refs[0].removeprefix("--").replace("-", "_"))], source
        elif source.startswith("detector"):  # the detector's flag, its agent and its window: one default
            assert refs == ["--window"], source
            assert numbers == [api.PERSISTENCE_WINDOW_SECONDS] == [_detector_flag_default("window")], source
            assert AgentConfig().window_s == FaultTracker().window_s == api.PERSISTENCE_WINDOW_SECONDS
        else:
            raise AssertionError(f"a timings row no check reads: {source}")
        checked += 1
    assert checked == len(_rows("contract.md", "timings-table"))


def _detector_flag_default(dest: str) -> Any:
    import argparse

    from autoclusters.cli import detector as detector_cli

    parser = argparse.ArgumentParser()
    detector_cli.register(parser.add_subparsers())
    return parser.parse_args(["detector", "run"]).__dict__[dest]


def test_the_controller_flags_table_shows_the_defaults() -> None:
    config = ControllerConfig()
    names = {f.name for f in fields(ControllerConfig)}
    for flags, defaults, _ in _rows("controller.md", "controller-flags-table"):
        keys = [f.removeprefix("--").replace("-", "_") for f in re.findall(r"`(--[a-z-]+)`", flags)]
        values = [v.strip().strip("`") for v in re.split(r",\s*|\s+/\s+", defaults)]
        assert set(keys) <= names, flags
        if len(values) != len(keys):  # one word for all, e.g. "shipped"
            values = values * len(keys)
        for key, shown in zip(keys, values, strict=True):
            actual = getattr(config, key)
            if isinstance(actual, int | float):
                assert _number(shown) == actual, (key, shown)
            elif shown not in ('""', "(log)", "shipped"):
                assert shown == actual, (key, shown)
            else:
                assert actual == "", (key, shown)


def test_the_deploy_page_names_every_mode_class_and_action() -> None:
    text = (DOCS / "deploy.md").read_text()
    assert f"# {' | '.join(ConsentMode)} (default {api.DEFAULT_CONSENT_MODE})" in text
    assert f"# {' | '.join(FaultClass)}: {' | '.join(ClassAction)}" in text


# --- every member has a behaviour ----------------------------------------------------------
def test_every_consent_mode_has_a_first_decision() -> None:
    """What the state machine does with a new fault in each mode; a new mode fails here until
    it is decided (the state machine would otherwise treat it like one of these)."""
    from autoclusters.controller.statemachine import Fault as RecordedFault
    from autoclusters.controller.statemachine import (
        NodeView,
        Observation,
        PoolView,
        RepairPolicy,
        transition,
    )

    first = {ConsentMode.AUTO: Phase.ACTING, ConsentMode.PROPOSE: Phase.AWAITING_APPROVAL, ConsentMode.OFF: None}
    assert set(first) == set(ConsentMode)
    fault = RecordedFault(FaultClass.GPU, "79", "NvidiaXIDError", "GPU 3 reported Xid 79.")
    for mode, phase in first.items():
        o = Observation(node=NodeView(name="n1", boot_id="b1"), fault=fault, fault_action=RepairAction.RESET,
                        pool=PoolView("p", mode))
        d = transition(None, o, datetime(2026, 1, 1, tzinfo=UTC), RepairPolicy(), record_name="n1-x")
        assert (d.state.phase if d.state else None) == phase, mode


def test_every_fault_class_is_in_the_catalog_and_each_override_has_a_meaning() -> None:
    """A new class needs the catalog's `unknown:` action (the parser demands it); a new override
    fails here until the controller's pool gives it a meaning."""
    from autoclusters.api import CatalogAction
    from autoclusters.controller.pool_policy import parse_pool
    from autoclusters.faults.catalog import FaultRef, load_catalog

    assert set(load_catalog().unknown_action) == set(FaultClass)
    meaning = {ClassAction.DEFAULT: RepairAction.REPLACE,  # the catalog's, below
               ClassAction.RESET: RepairAction.RESET, ClassAction.REPLACE: RepairAction.REPLACE, ClassAction.OFF: None}
    assert set(meaning) == set(ClassAction)
    for cls in FaultClass:
        fault = FaultRef(cls, "1", CatalogAction.REPLACE, True, "reason", "message")
        for override, action in meaning.items():
            pool = parse_pool({"metadata": {"name": "p"}, "spec": {"faultClasses": {cls.value: override.value}}})
            assert pool.action_for(fault) == action, (cls, override)


def test_every_fault_class_reaches_a_condition_and_is_read_back() -> None:
    """Detector → node condition → controller for a known code of each class: a new class fails
    here until the catalog has codes for it, a condition carries it and the controller reads it."""
    from autoclusters.detector.conditions import GPU_CLASSES, message_for, reason_for
    from autoclusters.detector.source_records import Record
    from autoclusters.faults.catalog import load_catalog
    from autoclusters.names import Names

    catalog, names = load_catalog(), Names()
    for cls in FaultClass:
        entry = catalog.of_class(cls)[0]
        record = Record("test", cls, entry.code, "GPU 3" if cls in GPU_CLASSES else "HCA mlx5_0 port 1",
                        entry.severity, entry.name)
        ctype = names.gpu_condition if cls in GPU_CLASSES else names.interconnect_condition
        assert cls in GPU_CLASSES or cls == FaultClass.INTERCONNECT
        condition = {"type": ctype, "status": "True", "reason": reason_for(record), "message": message_for(record)}
        ref = catalog.fault_from_condition(condition, names)
        assert ref is not None and (ref.fault_class, ref.code, ref.known) == (cls, entry.code, True), condition


def test_the_prose_states_the_same_defaults() -> None:
    """Defaults the other pages mention in passing."""
    close, top = pool_fields.BREAKER_CLOSE_BELOW_PERCENT, pool_fields.BREAKER_OPEN_ABOVE_PERCENT
    days = pool_fields.ATTEMPT_WINDOW_SECONDS.default // 86400
    mentions = {
        "admission.md": [f"outside {top.minimum}\u2013{top.maximum}",
                         f"(defaults {close.default} and {top.default} apply"],
        "operations.md": [f"`openAbovePercent` (default {top.default} %)",
                          f"(default {pool_fields.MAX_REPAIRS.default} in {days} days)"],
        "workloads.md": [f"(`drain.resetDeadlineSeconds`, default {pool_fields.RESET_DEADLINE_SECONDS.default} s"],
    }
    for doc, phrases in mentions.items():
        text = (DOCS / doc).read_text()
        for phrase in phrases:
            assert phrase in text, (doc, phrase)


def test_the_deploy_page_lists_every_stack_setting() -> None:
    """The settings table of docs/deploy.md has a row for each key ``stack_config_from_dict`` reads."""
    from autoclusters.deploy.stack_config import STACK_SETTINGS

    text = (DOCS / "deploy.md").read_text()
    table = text.split("All settings (", 1)[1].split("\n\n", 2)[1]
    shown = {key for row in table.splitlines() if row.startswith("| `")
             for key in re.findall(r"`(\w+)`", row.split("|")[1])}
    assert set(STACK_SETTINGS) <= shown, sorted(set(STACK_SETTINGS) - shown)
