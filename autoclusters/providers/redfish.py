"""The redfish provider: resets a node by power-cycling its system through its BMC.

Redfish (DMTF DSP0266) models a server as a ``ComputerSystem`` with a ``ComputerSystem.Reset``
action whose ``ResetType@Redfish.AllowableValues`` says which resets the BMC offers; the client
is ``sushy``, OpenStack's Redfish library (``Sushy.get_system``, ``System.reset_system``,
``System.get_allowed_reset_system_values``).

- The node names its system: the annotation ``redfish.<domain>/system`` holds the system's URL
  (``https://BMC[:PORT]/redfish/v1/Systems/ID``). A node without it is refused before anything
  is cordoned (``refusal``).
- Credentials: the Secret ``deploy.providers.REDFISH_SECRET`` in the controller's namespace,
  keys ``username`` and ``password``; its ``ca.crt`` (PEM), when present, is the CA bundle the
  BMC's certificate is verified against (else the system's trust store). Verification is off
  only where the pool says ``insecureSkipTLSVerify: true``. The Secret is read per operation.
- The reset: a system that is powered off is powered on (``On``); otherwise the first of
  ``PowerCycle``, ``ForceRestart``, ``GracefulRestart`` the BMC advertises. A system still
  off ``powerOnAfterSeconds`` after the reset gets ``On``; still off as long again, the reset
  fails. Each request is bounded by ``requestTimeoutSeconds`` and never retried (a second
  POST would be a second reset).
- Before the reset request the provider writes the operation id on the node
  (``redfish.<domain>/reset-operation``): a restarted controller that finds it does not ask
  again (a reset it might have sent is never doubled; one it never sent fails at the timeout).
  It removes the id once the operation has ended, succeeded or failed.
- Success, as for a host reboot: the node reports a new ``bootID`` and is Ready within
  ``timeoutSeconds`` of the operation's start. Failure (the BMC refused, did not answer, kept
  the system off, or the node did not come back) names the BMC and its answer.

The requests run in a thread per operation, so a slow BMC never holds the controller's workers;
the thread, the mark and the verdict are ``providers/remote_reset.py``'s, shared with the ec2 provider.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from autoclusters.api import RepairAction
from autoclusters.clock import Clock
from autoclusters.kube import Kube
from autoclusters.names import Names
from autoclusters.providers.base import BuildContext, NodeCache, Provider, read_node
from autoclusters.providers.declaration import CredentialSource, ProviderKind, Setting
from autoclusters.providers.hostreboot import boot_id
from autoclusters.providers.remote_reset import RemoteReset, ResetFailure, read_secret, secret_text
from autoclusters.providers.types import Operation
from autoclusters.redact import redact_url

log = logging.getLogger(__name__)

# The resets that restart a running system, most thorough first (Redfish ResetType values,
# DMTF Redfish schema Resource.ResetType: PowerCycle = power removed and restored,
# ForceRestart = an immediate restart, GracefulRestart = the OS is asked first).
# The BMC credentials (keys username, password; optional ca.crt, PEM), written by the operator in
# the controller's namespace; the controller may read this one Secret only.
REDFISH_SECRET = "autoclusters-redfish"
RESTARTS = ("PowerCycle", "ForceRestart", "GracefulRestart")
POWER_ON = "On"
_POLL_SECONDS = 1.0  # how often the power state is read after the reset


@dataclass(frozen=True)
class SystemRef:
    """Where a node's system lives: the BMC's base URL and the system's path on it."""

    bmc: str  # scheme://host[:port]
    path: str  # /redfish/v1/Systems/ID

    @property
    def url(self) -> str:
        return self.bmc + self.path


def system_ref(url: str) -> SystemRef:
    """The annotation's URL taken apart; raises ValueError saying what is wrong."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{redact_url(url)!r} is not an http(s) URL of a BMC")
    if parts.username or parts.password:
        raise ValueError("the system's URL must not carry credentials (they belong in the Secret)")
    path = parts.path.rstrip("/")
    if not path.startswith("/redfish/v1/Systems/") or path.count("/") != 4:
        raise ValueError(f"{redact_url(url)!r} does not name a system (/redfish/v1/Systems/ID)")
    return SystemRef(f"{parts.scheme}://{parts.netloc}", path)


def choose_reset(allowed: Iterable[str], power_state: str) -> str:
    """The ResetType to send: ``On`` for a system that is off, else the first of ``RESTARTS``
    the BMC allows; raises ValueError naming what the BMC offers when none fits."""
    offered = set(allowed)
    wanted = (POWER_ON,) if power_state == "Off" else RESTARTS
    for reset in wanted:
        if reset in offered:
            return reset
    offers = ", ".join(sorted(offered)) or "none"
    raise ValueError(f"the BMC offers none of the resets {', '.join(wanted)} for a system that is "
                     f"{power_state or 'in an unknown power state'} (it offers: {offers})")


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    ca_bundle: str  # PEM, "" = the system's trust store


def credentials(secret: dict[str, Any], where: str) -> Credentials:
    """The Secret's keys; raises ValueError naming a missing one."""
    def key(name: str) -> str:
        return secret_text(secret, name, where)

    user, password = key("username"), key("password")
    if not user or not password:
        raise ValueError(f"{where} needs the keys username and password")
    return Credentials(user, password, key("ca.crt"))


class BmcFailure(ResetFailure):
    """What went wrong at the BMC, in words for the record: the BMC, what was asked, its answer."""


class RedfishProvider(RemoteReset):
    name = "redfish"
    through = "through its BMC"

    def __init__(self, kube: Kube, clock: Clock, names: Names, *, namespace: str, timeout: float = 600,
                 request_timeout: float = 30, power_on_after: float = 60, insecure: bool = False,
                 nodes: NodeCache | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(kube, clock, names, mark_annotation=names.redfish_reset_annotation, timeout=timeout,
                         nodes=nodes)
        self.namespace = namespace
        self.request_timeout = request_timeout
        self.power_on_after = power_on_after
        self.insecure = insecure
        self._sleep = sleep

    def refusal(self, node: dict[str, Any] | None) -> str:
        ann = self._names.redfish_system_annotation
        url = (((node or {}).get("metadata") or {}).get("annotations") or {}).get(ann, "")
        if not url:
            return f"the redfish provider needs the node's system URL in its annotation {ann}"
        try:
            system_ref(url)
        except ValueError as e:
            return f"the node's annotation {ann}: {e}"
        return ""

    def _late(self, node: str, current: dict[str, Any], done: bool) -> str:
        what = "the BMC reset the system" if done else "the BMC's reset did not finish"
        return (f"{what}, but node {node} was not Ready with a new boot id {int(self.timeout)}s after the "
                f"reset started; look at the system's console on its BMC ({self._bmc_of(current)}) and "
                f"`kubectl describe node {node}`")

    def _bmc_of(self, node: dict[str, Any] | None) -> str:
        url = (((node or {}).get("metadata") or {}).get("annotations") or {}).get(
            self._names.redfish_system_annotation, "")
        return redact_url(url) if url else "unknown"

    # --- the requests, in the operation's thread (RemoteReset._run) -------------------------
    def _reset(self, op: Operation, node: str) -> str:
        current = read_node(node, self._nodes, self._kube)
        if current is None:
            raise BmcFailure(f"node {node} is gone")
        ann = (current.get("metadata") or {}).get("annotations") or {}
        if ann.get(self._names.redfish_reset_annotation) == op.id:
            return "asked before (by this or an earlier controller)"  # never a second reset
        if boot_id(current) not in ("", op.boot_id_before):
            return "the node booted again already"  # this operation's reset is over, its mark removed
        try:
            ref = system_ref(ann.get(self._names.redfish_system_annotation, ""))
        except ValueError as e:
            raise BmcFailure(f"node {node}'s annotation {self._names.redfish_system_annotation}: {e}") from None
        creds = self._credentials()
        with _ca_file(creds.ca_bundle) as ca:
            verify: bool | str = False if self.insecure else (ca or True)
            return self._reset_system(op, node, ref, creds, verify)

    def _credentials(self) -> Credentials:
        secret, where = read_secret(self._kube, self.namespace, REDFISH_SECRET,
                                    "the BMC credentials (username, password; optional ca.crt)")
        try:
            return credentials(secret, where)
        except ValueError as e:
            raise BmcFailure(str(e)) from None

    def _reset_system(self, op: Operation, node: str, ref: SystemRef, creds: Credentials,
                      verify: bool | str) -> str:
        import sushy  # the runtime dependency of this provider alone
        from sushy import exceptions as sushy_errors
        from sushy.resources.constants import ResetType

        bmc = f"the BMC {ref.bmc} (system {ref.path})"
        step = "connecting"
        try:
            root = sushy.Sushy(f"{ref.bmc}/redfish/v1", username=creds.username, password=creds.password,
                               verify=verify, read_timeout=self.request_timeout,
                               connect_timeout=self.request_timeout, server_side_retries=1,
                               server_side_retries_delay=1)
            step = "reading the system"
            system = root.get_system(ref.path)
            state = _value(system.power_state)
            allowed = [_value(v) for v in system.get_allowed_reset_system_values()]
            try:
                reset = choose_reset(allowed, state)
            except ValueError as e:
                raise BmcFailure(f"{bmc} cannot reset node {node}: {e}") from None
            self._mark(node, op.id)
            step = f"asking for ResetType {reset}"
            system.reset_system(ResetType(reset))
            if self._off_for(system, self.power_on_after):
                if reset == POWER_ON or POWER_ON not in allowed:
                    raise BmcFailure(f"{bmc} kept the system powered off {self.power_on_after:g}s after {reset}"
                                     + ("" if reset == POWER_ON else " and offers no ResetType On"))
                step = "asking for ResetType On (the system stayed off)"
                system.reset_system(ResetType.ON)
                if self._off_for(system, self.power_on_after):
                    raise BmcFailure(f"{bmc} kept the system powered off after {reset} and then On "
                                     f"({self.power_on_after:g}s each)")
                return f"{reset}, then On"
            return reset
        except BmcFailure:
            raise
        except sushy_errors.HTTPError as e:
            raise BmcFailure(f"{bmc} answered HTTP {e.status_code} while {step}: "
                             f"{e.detail or e.code or 'no details'}") from None
        except sushy_errors.SushyError as e:
            raise BmcFailure(f"{bmc} failed while {step}: {e}") from None

    def _off_for(self, system: Any, seconds: float) -> bool:
        """Whether the system reads powered off for ``seconds`` on end (a read each second)."""
        waited = 0.0
        while True:
            system.refresh()
            if _value(system.power_state) != "Off":
                return False
            if waited >= seconds:
                return True
            self._sleep(_POLL_SECONDS)
            waited += _POLL_SECONDS


def _value(x: Any) -> str:
    """An enum of sushy's (or a plain string, or None) as the Redfish value."""
    return str(getattr(x, "value", x) or "")


@contextlib.contextmanager
def _ca_file(pem: str) -> Any:
    """The CA bundle in a file for the TLS verification (requests wants a path); "" when none."""
    if not pem:
        yield ""
        return
    fd, path = tempfile.mkstemp(prefix="redfish-ca-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(pem)
        yield path
    finally:
        os.unlink(path)


def _build(s: Mapping[str, Any], c: BuildContext) -> Provider:
    return RedfishProvider(c.kube, c.clock, c.names, namespace=c.namespace, timeout=float(s["timeoutSeconds"]),
                           request_timeout=float(s["requestTimeoutSeconds"]),
                           power_on_after=float(s["powerOnAfterSeconds"]),
                           insecure=bool(s["insecureSkipTLSVerify"]), nodes=c.nodes)


KIND = ProviderKind(
    "redfish", (RepairAction.RESET.value,),
    "Power-cycles the node's system through its BMC (Redfish ComputerSystem.Reset); the system's "
    f"URL is the node's annotation; credentials in the Secret {REDFISH_SECRET} of the controller's "
    "namespace; done when the node reports a new boot id and is Ready.",
    (Setting("timeoutSeconds", "integer", "The reset fails when the node is not back Ready with a "
             "new boot id this long after the operation started.", minimum=1, default=600),
     Setting("requestTimeoutSeconds", "integer", "How long one request to the BMC may take "
             "(connect and answer).", minimum=1, default=30),
     Setting("powerOnAfterSeconds", "integer", "A system still powered off this long after the "
             "reset is powered on (ResetType On); still off as long again, the reset fails.",
             minimum=1, default=60),
     Setting("insecureSkipTLSVerify", "boolean", "Do not verify the BMC's certificate (by default "
             f"it is verified against ca.crt of the Secret {REDFISH_SECRET}, else the system's "
             "trust store).", default=False)),
    credentials=CredentialSource(secret=REDFISH_SECRET, keys=("username", "password", "ca.crt")),
    build=_build)
