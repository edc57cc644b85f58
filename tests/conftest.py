"""Shared test configuration.

Integration tests (``tests/integration``) need a real control plane: by default a local one
is started for the session (``autoclusters dev``); ``AUTOCLUSTERS_TEST_KUBECONFIG`` points
them at any other cluster instead (a kind cluster, or a ``dev up`` cluster kept running).
"""

import os

import pytest


def tool_missing(reason: str) -> None:
    """A test that needs a built upstream binary (OPA, kubectl, ...) that is not there:
    skipped in a quick local run, but a failure where the setup promised the tools
    (``make test`` and CI set AUTOCLUSTERS_REQUIRE_TOOLS=1)."""
    if os.environ.get("AUTOCLUSTERS_REQUIRE_TOOLS") == "1":
        pytest.fail(f"a required tool is missing: {reason}")
    pytest.skip(reason)
