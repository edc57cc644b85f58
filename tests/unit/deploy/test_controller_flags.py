"""The stack setting ``controller`` (deploy/controller_flags.py): each key is a flag of the
controller with the type its ControllerConfig field has, and reaches the Deployment's args."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from autoclusters.cli import controller as controller_cli
from autoclusters.controller.controller_config import ControllerConfig
from autoclusters.deploy import controller_flags
from autoclusters.deploy.controller_flags import TUNABLES
from autoclusters.deploy.stack import stack_objects
from autoclusters.deploy.stack_config import stack_config_from_dict
from autoclusters.pools.pool_config import PoolConfigError

REPO = Path(__file__).resolve().parents[3]


def test_each_key_is_a_controller_field_of_its_type_and_a_flag_it_parses() -> None:
    fields = {f.name: f for f in dataclasses.fields(ControllerConfig)}
    parser = argparse.ArgumentParser()
    controller_cli.register(parser.add_subparsers())
    for t in TUNABLES.values():
        assert t.field in fields, t.field
        assert str(fields[t.field].type) == t.kind.__name__, t.field
        value = "https://n.example/x" if t.kind is str else "7"
        parsed = parser.parse_args(["controller", "run", t.flag, value])
        assert getattr(parsed, t.field) == t.kind(value)
        default = getattr(ControllerConfig(), t.field)
        if t.minimum is not None:  # the default is a value the setting takes
            assert default >= t.minimum, t.field


def _controller_args(settings: dict[str, Any]) -> list[str]:
    objs = stack_objects(stack_config_from_dict({"controller": settings, "controllerShards": 2}))
    deployments = [o for o in objs if o["kind"] == "Deployment"
                   and o["metadata"]["labels"]["app.kubernetes.io/name"] == "autoclusters-controller"]
    assert len(deployments) == 2  # every shard's
    args = [d["spec"]["template"]["spec"]["containers"][0]["args"] for d in deployments]
    flags = [a[next((i for i, w in enumerate(a) if w == "--workers"), len(a)):] for a in args]
    assert flags[0] == flags[1]  # every shard runs with them
    return list(flags[0])


def test_the_settings_reach_the_controllers_args() -> None:
    assert _controller_args({"workers": 32, "retentionDays": 30, "notifierUrl": "https://hooks.example/ac"}) == [
        "--workers", "32", "--retention-days", "30", "--notifier-url", "https://hooks.example/ac"]
    assert _controller_args({}) == []  # nothing added by default


@pytest.mark.parametrize(("settings", "message"), [
    ({"shards": 2}, r"controller: unknown settings \['shards'\]"),
    ({"workers": "32"}, "controller.workers must be an integer"),
    ({"workers": 2.5}, "controller.workers must be an integer"),
    ({"workers": 0}, "controller.workers must be at least 1"),
    ({"retentionDays": True}, "controller.retentionDays must be a number"),
    ({"notifierUrl": "ftp://x"}, "controller.notifierUrl must be an http:// or https:// URL"),
    ([], "controller must be an object"),
])
def test_a_bad_setting_is_refused_naming_its_key(settings: Any, message: str) -> None:
    with pytest.raises(PoolConfigError, match=message):
        stack_config_from_dict({"controller": settings})


def test_the_docs_table_is_the_tunables_table() -> None:
    from autoclusters import doc_tables

    page = (REPO / "docs" / "deploy.md").read_text()
    assert page == doc_tables.with_table(page, controller_flags.DOCS_MARKER, controller_flags.docs_table()), \
        "regenerate: make manifests"
