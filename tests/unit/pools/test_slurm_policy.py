"""spec.slurm: strict parsing, defaults written out, the CRD schema agreeing with the parser."""

from __future__ import annotations

import pytest

from autoclusters.deploy.crds import pool_schema
from autoclusters.pools.pool_config import PoolConfigError, pool_from_config, pool_spec
from autoclusters.pools.slurm_policy import SignalTarget, SlurmPolicy, slurm_spec


def test_default_is_off_and_written_out() -> None:
    pool = pool_from_config({"name": "a100"})
    assert pool.slurm == SlurmPolicy() and not pool.slurm.enabled
    assert pool_spec(pool)["slurm"] == {"enabled": False, "signal": "TERM", "signalTo": "steps",
                                        "signalLeadSeconds": 60, "requeue": True, "actOnExternalDrains": False}


def test_round_trip_through_the_spec() -> None:
    spec = {"enabled": True, "nodeName": {"fromLabel": "slurm.example/name"}, "signal": "USR1", "signalTo": "batch",
            "signalLeadSeconds": 5, "requeue": False, "actOnExternalDrains": True}
    pool = pool_from_config({"name": "a100", "slurm": spec})
    assert pool.slurm.signal_to is SignalTarget.BATCH
    assert slurm_spec(pool.slurm) == spec
    assert pool_from_config({"name": "a100", **pool_spec(pool)}).slurm == pool.slurm


@pytest.mark.parametrize(("slurm", "message"), [
    ({"enabled": "yes"}, "slurm.enabled must be true or false"),
    ({"signal": "KILL"}, "slurm.signal must be one of"),
    ({"signalTo": "shell"}, "slurm.signalTo must be one of"),
    ({"signalLeadSeconds": -1}, "slurm.signalLeadSeconds must be an integer >= 0"),
    ({"nodeName": {"fromLabel": "a", "fromAnnotation": "b"}}, "one of fromLabel or fromAnnotation"),
    ({"nodeName": {"label": "a"}}, "takes fromLabel or fromAnnotation"),
    ({"nodeName": {"fromLabel": "not a key"}}, "is not a label/annotation key"),
    ({"enable": True}, "unknown key"),
])
def test_bad_values_name_the_field(slurm: dict, message: str) -> None:
    with pytest.raises(PoolConfigError, match=message) as e:
        pool_from_config({"name": "a100", "slurm": slurm})
    assert "pool 'a100'" in str(e.value)


def test_schema_defaults_and_enums_match_the_parser() -> None:
    schema = pool_schema()["properties"]["spec"]["properties"]["slurm"]["properties"]
    defaults = slurm_spec(SlurmPolicy())
    assert {k: v["default"] for k, v in schema.items() if "default" in v} == defaults
    assert set(schema) == {*defaults, "nodeName"}
    assert schema["signalTo"]["enum"] == [t.value for t in SignalTarget]


def test_node_name_mapping() -> None:
    node = {"metadata": {"name": "k8s-a", "labels": {"slurm/name": "gpu001"}, "annotations": {"s/n": "gpu002"}}}
    assert SlurmPolicy().slurm_node_name(node) == "k8s-a"
    assert SlurmPolicy(node_name_label="slurm/name").slurm_node_name(node) == "gpu001"
    assert SlurmPolicy(node_name_annotation="s/n").slurm_node_name(node) == "gpu002"
    assert SlurmPolicy(node_name_label="missing/key").slurm_node_name(node) is None


def test_slinky_pools_are_left_to_slurm_operator() -> None:
    with pytest.raises(PoolConfigError, match="exclude each other"):
        pool_from_config({"name": "a100", "slurm": {"enabled": True}, "preDrain": {"slinky": True}})
    assert pool_from_config({"name": "a100", "slurm": {"enabled": False}, "preDrain": {"slinky": True}})
