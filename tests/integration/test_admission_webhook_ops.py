"""Operating the webhook: it writes its own CA bundle into its configuration, and when it
is down the configuration fails closed for users while the controller keeps working."""

from __future__ import annotations

import base64
import datetime as dt
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from autoclusters.certificates import make_ca
from tests.integration.test_admission import WEBHOOK_MARK, Admission, kubectl


@pytest.fixture(scope="module")
def admission(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Admission]:
    if not cluster.local or not cluster.opa_url:
        pytest.skip("the webhook runs on this host: needs the local cluster and its OPA server")
    adm = Admission(cluster, tmp_path_factory.mktemp("admission-ops"))
    try:
        adm.setup_identities()
        adm.probe = adm.new_node()
        yield adm
    finally:
        adm.cleanup()


def test_webhook_writes_its_ca_bundle_then_fails_closed_when_down(admission: Admission) -> None:
    # The configuration exists first, trusting some other CA: the API server cannot call the webhook.
    foreign = make_ca("foreign-ca", dt.datetime.now(dt.UTC), dt.timedelta(days=1)).cert_pem
    admission.apply_webhook_config(foreign)
    # A fresh webhook generates its CA and writes it into the configuration by itself.
    admission.webhook_start(cert_dir=admission.workdir / "fresh-certs", apply_config=False)
    admission.wait_enforced(WEBHOOK_MARK)
    cfg = admission.kube.get(f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
                             f"{admission.webhook_name}")
    bundle = base64.b64decode(cfg["webhooks"][0]["clientConfig"]["caBundle"])
    assert bundle == (admission.workdir / "fresh-certs" / "ca.crt").read_bytes()

    node = admission.new_node()
    req, appr = admission.names.maintenance_required, admission.names.maintenance_approved
    # Each decision is logged with OPA's decision id (the dev cluster's OPA keeps decision logs).
    assert kubectl(admission.user, "label", "node", node, f"{appr}=true").returncode != 0
    pattern = re.compile(rf"allowed=False outcome=denied opa_decision_id=[0-9a-f-]{{36}} user=\S+:alice "
                         rf"op=UPDATE Node/{node} rules=maintenance-approved-requires-fault")
    deadline = time.monotonic() + 5
    while not pattern.search((admission.workdir / "webhook.log").read_text()):
        assert time.monotonic() < deadline, "no decision line with an OPA decision id in the webhook log"
        time.sleep(0.2)

    admission.webhook_stop(remove_config=False)
    # Users' label writes fail closed...
    r = kubectl(admission.user, "label", "node", node, f"{appr}=true")
    assert r.returncode != 0 and "failed calling webhook" in r.stderr
    # ...the controller is exempt and still marks and clears nodes...
    assert kubectl(admission.controller, "label", "node", node, f"{req}=true").returncode == 0
    # ...and writes that do not touch the maintenance labels never reach the webhook.
    assert kubectl(admission.user, "label", "node", node, "team=research").returncode == 0
    assert kubectl(admission.controller, "label", "node", node, f"{req}-").returncode == 0
