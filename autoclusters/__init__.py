"""autoclusters: self-healing GPU node pools for Kubernetes.

Layers, lowest first (see docs/architecture.md):

- plumbing: ``names``, ``clock``, ``kube`` (the only layer that talks to the API server)
- domain core: ``faults`` (catalog), ``controller.statemachine``, drain, providers
- entry points: ``detector``, ``controller``, ``webhook``, ``policy``, ``cli``, ``devcluster``
"""

__version__ = "0.1.0"
