"""Finding and running the OPA binary, and where the policy bundle lives.

``policy check`` evaluates with ``opa eval`` rather than an OPA server: a GitOps job
has no server, and one process per check evaluates every document in one query.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from autoclusters.deploy import policy_bundle

# What OPA does not serve from policies/: the tests (the samples live in examples/policy-samples/).
IGNORE = ("*_test.rego", "*.md")


class OpaError(RuntimeError):
    """OPA could not be found or could not evaluate the policies."""


def policies_dir() -> Path:
    """The Rego bundle (``deploy.policy_bundle``); OpaError when there is none."""
    try:
        return policy_bundle.policies_dir()
    except policy_bundle.PoliciesNotFound as e:
        raise OpaError(str(e)) from None


def opa_binary() -> Path:
    """``$AUTOCLUSTERS_OPA``, then ``opa`` on PATH, then the binary ``tools/build-tools.sh``
    builds into ``~/.cache/autoclusters/bin/opa-<OPA_VERSION>/`` (version from tools/versions.env)."""
    env = os.environ.get("AUTOCLUSTERS_OPA")
    if env:
        return Path(env)
    found = shutil.which("opa")
    if found:
        return Path(found)
    built = _built_opa()
    if built is None:
        raise OpaError("no opa binary: set AUTOCLUSTERS_OPA, put opa on PATH, or run tools/build-tools.sh core")
    return built


def _built_opa() -> Path | None:
    cache = Path(os.environ.get("AUTOCLUSTERS_CACHE", Path.home() / ".cache" / "autoclusters"))
    for parent in Path(__file__).resolve().parents:
        versions = parent / "tools" / "versions.env"
        if versions.exists():
            for line in versions.read_text().splitlines():
                if line.startswith("OPA_VERSION="):
                    path = cache / "bin" / f"opa-{line.split('=', 1)[1].strip()}" / "opa"
                    return path if path.exists() else None
    candidates = sorted((cache / "bin").glob("opa-*/opa"))
    return candidates[-1] if candidates else None


def load_args(policies: Path) -> list[str]:
    """Arguments that load the bundle without its tests."""
    return [*(f"--ignore={p}" for p in IGNORE), "-d", str(policies)]


def evaluate(query: str, input_doc: Any, data_doc: dict[str, Any], *, policies: Path | None = None,
             timeout: float = 60) -> Any:
    """The value of ``query`` for one input, or None when it is undefined."""
    policies = policies or policies_dir()
    with tempfile.TemporaryDirectory(prefix="autoclusters-opa-") as tmp:
        data_file = Path(tmp) / "config.json"
        data_file.write_text(json.dumps(data_doc))
        cmd = [str(opa_binary()), "eval", "--format=json", "--stdin-input", *load_args(policies),
               "-d", str(data_file), query]
        try:
            proc = subprocess.run(cmd, input=json.dumps(input_doc), capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise OpaError(f"running opa failed: {e}") from e
    if proc.returncode != 0:
        raise OpaError(f"opa eval failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    result = json.loads(proc.stdout).get("result") or []
    if not result:
        return None
    return result[0]["expressions"][0]["value"]
