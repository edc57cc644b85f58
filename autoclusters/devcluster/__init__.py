"""A real local control plane on loopback: etcd, kube-apiserver, controller-manager,
scheduler, kwok (simulated GPU nodes and their pods) and an OPA server.

Built from upstream binaries (``tools/build-tools.sh``); used by ``autoclusters dev`` and
by the integration tests.
"""
