"""The client layer: the only package that imports the ``kubernetes`` library.

Everything above it talks to the API server through :class:`Kube` and sees only the
named exceptions of :mod:`autoclusters.kube.errors`.
"""

from autoclusters.kube.client import Kube
from autoclusters.kube.errors import (
    Conflict,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    Throttled,
    TooManyRequests,
    Unavailable,
)
from autoclusters.kube.loader import load_kube

__all__ = [
    "Conflict",
    "Forbidden",
    "Invalid",
    "Kube",
    "KubeError",
    "NotFound",
    "Throttled",
    "TooManyRequests",
    "Unavailable",
    "load_kube",
]
