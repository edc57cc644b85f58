"""The CRD schema in a real API server gives every pool generated from the pool's field table the
verdict the parser and the Rego give it (tests/unit/rego/test_policy_data_pool_fields_parity.py): the
three accept exactly the same pools. Each case is a dry-run create (validation, defaulting and
the CEL rules run; nothing is stored) under strict field validation, kubectl's default, so an
unknown key is refused rather than pruned."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from autoclusters import api
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Invalid
from autoclusters.names import Names
from autoclusters.ops.resources import pools_path
from tests.integration.ops_support import private_domain
from tests.unit.rego.pool_cases import cases


@pytest.fixture(scope="module")
def names(cluster: ClusterHandle) -> Iterator[Names]:
    with private_domain(cluster, secrets.token_hex(3), owner="fields") as n:
        yield n


def test_the_api_server_gives_every_generated_pool_its_verdict(cluster: ClusterHandle, names: Names) -> None:
    wrong = []
    for i, case in enumerate(cases()):
        body = {"apiVersion": f"{names.api_group}/{api.VERSION}", "kind": api.POOLS.kind,
                "metadata": {"name": f"case-{i}"}, "spec": case.spec}
        try:
            cluster.kube.create(pools_path(names), body, dryRun="All", fieldValidation="Strict")
        except Invalid as e:
            if case.valid or case.field not in str(e):
                wrong.append(f"{case.name}: refused ({e})")
            continue
        if not case.valid:
            wrong.append(f"{case.name}: accepted")
    assert wrong == []
