"""Where the Rego policy bundle is: one answer for the webhook's ConfigMap, the GitOps checks
and the local cluster's OPA.

``autoclusters/policies`` is a link to the repository's ``policies/`` in a checkout and a
copy of its Rego files in an installed wheel (package data), so the same path works in both;
``$AUTOCLUSTERS_POLICIES`` points elsewhere (an operator's own bundle).
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGED = Path(__file__).resolve().parents[1] / "policies"


class PoliciesNotFound(FileNotFoundError):
    """No policy bundle where it should be."""


def policies_dir() -> Path:
    env = os.environ.get("AUTOCLUSTERS_POLICIES")
    path = Path(env) if env else PACKAGED
    if not (path / "lib").is_dir():
        where = "$AUTOCLUSTERS_POLICIES" if env else "the package"
        raise PoliciesNotFound(f"no Rego policy bundle at {path} (from {where}); set AUTOCLUSTERS_POLICIES "
                               "to a directory that holds lib/ and the adapters")
    return path.resolve()
