"""Global settings of ``autoclusters controller run`` (per-pool settings live in GpuNodePool)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

from autoclusters import api
from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.deploy.admission import WEBHOOK_CONFIG_NAME
from autoclusters.deploy.controller import LEASE_NAME
from autoclusters.deploy.workloads import CONTROLLER, WEBHOOK_CA_SECRET
from autoclusters.kube.informer import WATCH_SECONDS
from autoclusters.webhook.certs import CertPolicy

_CERTS = CertPolicy()


@dataclass(frozen=True)
class ControllerConfig:
    namespace: str = DEFAULT_NAMESPACE  # where the leader-election Lease lives
    lease_name: str = LEASE_NAME  # with shards > 1 each shard's Lease is named after it (controller.shards)
    identity: str = ""
    lease_seconds: float = 15
    renew_deadline_seconds: float = 10
    retry_period_seconds: float = 2
    verify_timeout_seconds: float = api.VERIFY_TIMEOUT_SECONDS
    operation_timeout_seconds: float = api.OPERATION_TIMEOUT_SECONDS
    poll_seconds: float = api.POLL_SECONDS
    hold_recheck_seconds: float = api.HOLD_RECHECK_SECONDS
    resync_seconds: float = 300
    # A change of a pool's nodes (a fault raised or cleared, a node added) reconciles the pool's
    # status this much later, so a burst of changes is written once, not once per node; the
    # guards (concurrency, breaker) read the counts directly and never wait for it.
    pool_status_delay_seconds: float = 1.0
    # The node and record watches read a burst's events together: while events come closer
    # together than this, each waits at most this long, and one wake-up of the watch's thread
    # handles them all (a lone event is read at once). 0: every event wakes the thread.
    watch_gather_seconds: float = 0.02
    # How long each watch of the cache runs before the API server ends it and the informer resumes
    # it from the last version seen (kube/informer.py; a version etcd compacted meanwhile: 410, a list).
    watch_seconds: int = WATCH_SECONDS
    gc_interval_seconds: float = 3600
    retention_days: float = api.RETENTION_DAYS
    metrics_port: int = 9102  # 0: no metrics server
    workers: int = 16
    # Sharding by pool (controller.shards): this process owns the pools whose name hashes to
    # ``shard`` among ``shards``; 1 shard owns every pool, as an unsharded controller.
    shards: int = 1
    shard: int = 0
    sim_reset_seconds: float = api.SIM_RESET_SECONDS
    sim_replace_seconds: float = api.SIM_REPLACE_SECONDS
    provider_image: str = ""  # image of provider Jobs (host reboot) when the pool names none: the controller's own
    image_pull_secrets: str = ""  # comma-separated Secrets of its namespace that provider Jobs pull their image with
    # what the host-reboot Job runs inside the host's namespaces (shell words): an operator's
    # choice, never a pool author's (docs/operations.md, "hostReboot on every node OS")
    host_reboot_command: str = api.HOST_REBOOT_COMMAND
    # the operator's allow-lists (autoclusters/allow_lists.py, as JSON): the only commands, images and URLs
    # a pool may name; empty: none (the host-reboot Job's default image needs no entry)
    allow_lists: str = ""
    notifier_url: str = ""
    catalog_path: str = ""
    # source.component / reportingComponent of every event; "nodepool-service" matches the
    # reference system (docs/operations.md)
    event_source: str = CONTROLLER
    # The webhook's serving certificate (controller/webhook_certs.py): the leader of shard 0 keeps
    # it in this TLS Secret when it is set (the deployed controller's arguments set it; empty: the
    # certificate is someone else's, cert-manager's or the local mode's).
    webhook_tls_secret: str = ""
    webhook_ca_secret: str = WEBHOOK_CA_SECRET
    webhook_config: str = WEBHOOK_CONFIG_NAME
    webhook_hosts: str = ""  # comma-separated names/IPs; empty: the webhook Service's DNS names
    webhook_ca_lifetime_seconds: float = _CERTS.ca_lifetime.total_seconds()
    webhook_cert_lifetime_seconds: float = _CERTS.serving_lifetime.total_seconds()
    webhook_cert_check_seconds: float = 60

    def with_identity(self) -> ControllerConfig:
        if self.identity:
            return self
        from dataclasses import replace

        return replace(self, identity=f"{socket.gethostname()}-{os.getpid()}")

    def webhook_cert_policy(self) -> CertPolicy:
        return CertPolicy(ca_lifetime=timedelta(seconds=self.webhook_ca_lifetime_seconds),
                          serving_lifetime=timedelta(seconds=self.webhook_cert_lifetime_seconds),
                          renew_fraction=_CERTS.renew_fraction)
