"""Shared test configuration.

Integration tests (``tests/integration``) need a real control plane: by default a local one
is started for the session (``autoclusters dev``); ``AUTOCLUSTERS_TEST_KUBECONFIG`` points
them at any other cluster instead (a kind cluster, or a ``dev up`` cluster kept running).
"""
