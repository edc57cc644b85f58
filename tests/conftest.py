"""Shared test configuration.

Integration tests (``tests/integration``) need a real control plane: by default a local one
is started for the session (``autoclusters dev``); ``AUTOCLUSTERS_TEST_KUBECONFIG`` points
them at any other cluster instead (a kind cluster, or a ``dev up`` cluster kept running).
"""

import os
from typing import NoReturn

import pytest

from autoclusters.faults.catalog import Catalog, FaultClass, FaultEntry


def tool_missing(reason: str) -> NoReturn:
    """A test that needs a built upstream binary (OPA, kubectl, ...) that is not there:
    skipped in a quick local run, but a failure where the setup promised the tools
    (``make test`` and CI set AUTOCLUSTERS_REQUIRE_TOOLS=1)."""
    if os.environ.get("AUTOCLUSTERS_REQUIRE_TOOLS") == "1":
        pytest.fail(f"a required tool is missing: {reason}")
    pytest.skip(reason)


def known_fault(catalog: Catalog, fault_class: FaultClass | str, code: str | int) -> FaultEntry:
    """The catalog's entry for a fault code the test relies on being listed."""
    entry = catalog.lookup(fault_class, code)
    assert entry is not None, f"{fault_class} {code} is not in the catalog"
    return entry
