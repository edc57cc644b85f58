"""The ec2 provider: resets a node by rebooting, or stopping and starting, its EC2 instance.

The client is boto3 (AWS's SDK), its EC2 calls ``DescribeInstances``, ``RebootInstances``,
``StopInstances`` and ``StartInstances`` (EC2 API Reference, API version 2016-11-15).

- The node names its instance: ``spec.providerID`` is ``aws:///ZONE/INSTANCE-ID``, as the AWS
  cloud provider (and so EKS) writes it. The region is the pool's ``region``, else the zone's
  region (``us-east-1a`` -> ``us-east-1``; Local and Wavelength Zones keep their parent's
  prefix). A node with another providerID is refused before anything is cordoned (``refusal``).
- Credentials: ``podIdentity`` (the default) is boto3's default chain in the controller's pod,
  which is where IRSA (``AWS_ROLE_ARN`` + ``AWS_WEB_IDENTITY_TOKEN_FILE``) and EKS Pod Identity
  (``AWS_CONTAINER_CREDENTIALS_FULL_URI``) put the role; ``secret`` reads the keys of the Secret
  ``deploy.providers.EC2_SECRET`` per operation. The endpoint is AWS's for the region; an
  operator (tests, an emulator) points the controller elsewhere with boto3's own environment
  setting ``AWS_ENDPOINT_URL_EC2``, never a pool author.
- ``mode: reboot``: RebootInstances on a running instance. ``mode: stopStart``: StopInstances,
  then StartInstances once DescribeInstances says ``stopped``. In either mode an instance found
  stopped is started, one found stopping is waited for and started, one found pending is left
  to boot; a terminated one fails the reset (its node is gone for good: replace it).
- None of these calls takes an idempotency token, so before each one the provider writes
  ``OPERATION/STEP`` on the node (``ec2.<domain>/reset-operation``, STEP = reboot, stop or
  start): a restarted controller that finds ``reboot`` or ``start`` asks for nothing more; one
  that finds ``stop`` waits for the stop and starts the instance. No call is ever repeated for
  one operation, with one exception that doubles nothing: a call EC2 refused unexecuted.
  Throttling (``RequestLimitExceeded``, ``Throttling``...) is retried with backoff until the
  operation's timeout; ``IncorrectInstanceState`` (the instance changed state between the read
  and the call) reads the state again and chooses again. botocore's own retries are off: it
  also retries a call that timed out, which EC2 may have carried out.
- Success, as for a host reboot: a new ``bootID`` and Ready within ``timeoutSeconds``. Failure
  names the instance, the region and AWS's answer.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from autoclusters.api import RepairAction
from autoclusters.clock import Clock
from autoclusters.kube import Kube
from autoclusters.names import Names
from autoclusters.providers.base import BuildContext, NodeCache, Provider, read_node
from autoclusters.providers.declaration import CredentialSource, ProviderKind, Setting
from autoclusters.providers.hostreboot import boot_id
from autoclusters.providers.remote_reset import (
    RemoteReset,
    ResetFailure,
    is_mark_of,
    marked,
    read_secret,
    secret_text,
)
from autoclusters.providers.types import Operation

# The AWS keys when a pool says credentials: secret (keys aws_access_key_id, aws_secret_access_key;
# optional aws_session_token), in the controller's namespace; by default it uses the pod's identity
# (boto3's chain: IRSA, EKS Pod Identity) and reads no Secret.
EC2_SECRET = "autoclusters-ec2"
# How an instance is reset: RebootInstances, or StopInstances then StartInstances (a full power
# cycle: the instance may move to another host, its instance store is lost).
EC2_MODES = ("reboot", "stopStart")
EC2_CREDENTIALS = ("podIdentity", "secret")
_PROVIDER_ID = re.compile(r"^aws:///(?P<zone>[a-z0-9-]+)/(?P<instance>i-[0-9a-f]{8,17})$")
# A zone's region: the zone's name up to its first number (us-east-1a, us-west-2-lax-1a, us-gov-west-1a,
# us-east-1-wl1-bos-wlz-1: AWS's naming of Availability, Local and Wavelength Zones).
_REGION = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d+")
# EC2's answers to a call it did not carry out because of the caller's request rate (EC2 API
# Reference, "Error codes": RequestLimitExceeded; Throttling / ThrottlingException from the SDKs' lists).
THROTTLED = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled"})
WRONG_STATE = "IncorrectInstanceState"
_POLL_SECONDS = 2.0  # how often the instance's state is read while it stops
_BACKOFF_SECONDS = 1.0  # the first wait after a throttled call; doubled each time, at most _BACKOFF_MAX
_BACKOFF_MAX = 20.0
_CHOICES = 6  # how often the state is read again after IncorrectInstanceState before the reset fails


@dataclass(frozen=True)
class InstanceRef:
    zone: str
    instance: str

    @property
    def region(self) -> str:
        m = _REGION.match(self.zone)
        return m.group(0) if m else ""


def instance_ref(provider_id: str) -> InstanceRef:
    """The node's providerID taken apart; raises ValueError saying what is wrong."""
    m = _PROVIDER_ID.match(provider_id.strip())
    if not m:
        raise ValueError(f"spec.providerID {provider_id!r} does not name an EC2 instance (aws:///ZONE/i-ID)"
                         if provider_id else "the node has no spec.providerID (aws:///ZONE/i-ID)")
    return InstanceRef(m.group("zone"), m.group("instance"))


def provider_id(node: dict[str, Any] | None) -> str:
    return str(((node or {}).get("spec") or {}).get("providerID", ""))


@dataclass(frozen=True)
class Keys:
    access_key_id: str
    secret_access_key: str
    session_token: str = ""


def keys(secret: dict[str, Any], where: str) -> Keys:
    """The Secret's AWS keys; raises ValueError naming a missing one."""
    access, secret_key = (secret_text(secret, k, where) for k in ("aws_access_key_id", "aws_secret_access_key"))
    if not access or not secret_key:
        raise ValueError(f"{where} needs the keys aws_access_key_id and aws_secret_access_key")
    return Keys(access, secret_key, secret_text(secret, "aws_session_token", where))


class Ec2Failure(ResetFailure):
    """What went wrong at EC2, in words for the record: the instance, the call, AWS's answer."""


class _WrongState(Exception):
    """EC2 answered IncorrectInstanceState: the call was not carried out."""


class Ec2Provider(RemoteReset):
    name = "ec2"
    through = "through the EC2 API"

    def __init__(self, kube: Kube, clock: Clock, names: Names, *, namespace: str, mode: str = EC2_MODES[0],
                 region: str = "", credentials: str = EC2_CREDENTIALS[0], timeout: float = 900,
                 request_timeout: float = 30, nodes: NodeCache | None = None,
                 sleep: Callable[[float], None] = time.sleep, backoff: float = _BACKOFF_SECONDS,
                 poll: float = _POLL_SECONDS) -> None:
        super().__init__(kube, clock, names, mark_annotation=names.ec2_reset_annotation, timeout=timeout,
                         nodes=nodes)
        if mode not in EC2_MODES or credentials not in EC2_CREDENTIALS:  # pragma: no cover - the parser checks
            raise ValueError(f"ec2: mode {mode!r} / credentials {credentials!r}")
        self.namespace = namespace
        self.mode = mode
        self.region = region
        self.credentials = credentials
        self.request_timeout = request_timeout
        self._sleep = sleep
        self._backoff = backoff
        self._poll = poll

    def refusal(self, node: dict[str, Any] | None) -> str:
        try:
            ref = instance_ref(provider_id(node))
        except ValueError as e:
            return f"the ec2 provider resets EC2 instances only: {e}"
        if not self.region and not ref.region:
            return f"the zone {ref.zone!r} of the node's providerID names no region; set the pool's ec2.region"
        return ""

    def _late(self, node: str, current: dict[str, Any], done: bool) -> str:
        what = "EC2 took the reset" if done else "the reset's calls to EC2 did not finish"
        return (f"{what}, but node {node} was not Ready with a new boot id {int(self.timeout)}s after the "
                f"reset started; look at the instance's console output and status checks "
                f"({provider_id(current) or 'no providerID'}) and `kubectl describe node {node}`")

    # --- the requests, in the operation's thread (RemoteReset._run) -------------------------
    def _reset(self, op: Operation, node: str) -> str:
        current = read_node(node, self._nodes, self._kube)
        if current is None:
            raise Ec2Failure(f"node {node} is gone")
        mark = marked(current, self._mark_annotation)
        step = mark.partition("/")[2] if is_mark_of(mark, op) else ""
        if step in ("reboot", "start"):
            return "asked before (by this or an earlier controller)"  # never a second call
        if not step and boot_id(current) not in ("", op.boot_id_before):
            return "the node booted again already"  # this operation's reset is over, its mark removed
        try:
            ref = instance_ref(provider_id(current))
        except ValueError as e:
            raise Ec2Failure(f"node {node}: {e}") from None
        call = _Calls(self._client(ref), ref, self.region or ref.region, self._sleep, self._backoff,
                      deadline=op.started + timedelta(seconds=self.timeout), clock=self._clock)
        if step == "stop":  # an earlier controller asked for the stop: the start is what is left
            return self._start_when_stopped(op, node, call, "StopInstances (asked before), ")
        for _ in range(_CHOICES):
            try:
                return self._reset_from(op, node, call, call.state())
            except _WrongState:
                continue  # not carried out: read the state again and choose again
        raise Ec2Failure(f"{call.where} kept answering {WRONG_STATE}; its state is {call.state()!r}")

    def _reset_from(self, op: Operation, node: str, call: _Calls, state: str) -> str:
        if state == "pending":
            return "the instance was starting already"
        if state == "stopped":
            self._mark(node, f"{op.id}/start")
            call.ask("start_instances", "StartInstances")
            return "StartInstances (the instance was stopped)"
        if state == "stopping":
            self._mark(node, f"{op.id}/stop")
            return self._start_when_stopped(op, node, call, "the instance was stopping, ")
        if state != "running":
            raise Ec2Failure(f"{call.where} is {state}: there is nothing to reset (replace the node)")
        if self.mode == "reboot":
            self._mark(node, f"{op.id}/reboot")
            call.ask("reboot_instances", "RebootInstances")
            return "RebootInstances"
        self._mark(node, f"{op.id}/stop")
        call.ask("stop_instances", "StopInstances")
        return self._start_when_stopped(op, node, call, "StopInstances, ")

    def _start_when_stopped(self, op: Operation, node: str, call: _Calls, done: str) -> str:
        while (state := call.state()) != "stopped":
            if state not in ("stopping", "running", "pending"):  # running: the stop not visible yet
                raise Ec2Failure(f"{call.where} is {state} while it should stop")
            if self._clock.now() >= call.deadline:
                raise Ec2Failure(f"{call.where} was still {state} {int(self.timeout)}s after the reset started")
            self._sleep(self._poll)
        self._mark(node, f"{op.id}/start")
        for _ in range(_CHOICES):
            try:
                call.ask("start_instances", "StartInstances")
                return done + "then StartInstances"
            except _WrongState:
                self._sleep(self._poll)
        raise Ec2Failure(f"{call.where} answered {WRONG_STATE} to StartInstances {_CHOICES} times")

    def _client(self, ref: InstanceRef) -> Any:
        import boto3  # the runtime dependency of this provider alone
        from botocore.config import Config

        region = self.region or ref.region
        creds: dict[str, str] = {}
        if self.credentials == "secret":
            k = self._keys()
            creds = {"aws_access_key_id": k.access_key_id, "aws_secret_access_key": k.secret_access_key,
                     **({"aws_session_token": k.session_token} if k.session_token else {})}
        config = Config(connect_timeout=self.request_timeout, read_timeout=self.request_timeout,
                        retries={"mode": "standard", "total_max_attempts": 1})
        return boto3.session.Session(region_name=region, **creds).client("ec2", config=config)

    def _keys(self) -> Keys:
        secret, where = read_secret(self._kube, self.namespace, EC2_SECRET, "the AWS keys (aws_access_key_id, "
                                    "aws_secret_access_key; optional aws_session_token)")
        try:
            return keys(secret, where)
        except ValueError as e:
            raise Ec2Failure(str(e)) from None


class _Calls:
    """One instance's calls: throttling retried with backoff until the deadline, IncorrectInstanceState
    raised as ``_WrongState``, every other answer a failure naming the instance and the call."""

    def __init__(self, client: Any, ref: InstanceRef, region: str, sleep: Callable[[float], None], backoff: float,
                 *, deadline: datetime, clock: Clock) -> None:
        self.client, self.ref, self.sleep, self.backoff = client, ref, sleep, backoff
        self.deadline, self.clock = deadline, clock
        self.where = f"EC2 instance {ref.instance} (region {region})"

    def state(self) -> str:
        answer = self._call("describe_instances", "DescribeInstances")
        try:
            return str(answer["Reservations"][0]["Instances"][0]["State"]["Name"])
        except (KeyError, IndexError, TypeError):
            raise Ec2Failure(f"DescribeInstances does not know {self.where}") from None

    def ask(self, method: str, action: str) -> None:
        self._call(method, action)

    def _call(self, method: str, action: str) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        wait = self.backoff
        while True:
            try:
                return getattr(self.client, method)(InstanceIds=[self.ref.instance])
            except ClientError as e:
                err = e.response.get("Error") or {}
                code, message = str(err.get("Code", "")), str(err.get("Message", ""))
                if code == WRONG_STATE and action != "DescribeInstances":
                    raise _WrongState(message) from None
                if code not in THROTTLED:
                    raise Ec2Failure(f"{self.where}: {action} answered {code or 'an error'}: "
                                     f"{message or 'no details'}") from None
                if self.clock.now() + timedelta(seconds=wait) >= self.deadline:
                    raise Ec2Failure(f"{self.where}: {action} was throttled ({code}) until the reset's "
                                     "timeout") from None
            except BotoCoreError as e:
                raise Ec2Failure(f"{self.where}: {action} failed: {e}") from None
            self.sleep(wait)  # a throttled call was not carried out: asking again doubles nothing
            wait = min(wait * 2, _BACKOFF_MAX)


def _build(s: Mapping[str, Any], c: BuildContext) -> Provider:
    return Ec2Provider(c.kube, c.clock, c.names, namespace=c.namespace, mode=str(s["mode"]),
                       region=str(s.get("region", "")), credentials=str(s["credentials"]),
                       timeout=float(s["timeoutSeconds"]), request_timeout=float(s["requestTimeoutSeconds"]),
                       nodes=c.nodes)


KIND = ProviderKind(
    "ec2", (RepairAction.RESET.value,),
    "Reboots (or stops and starts) the EC2 instance of the node's spec.providerID "
    "(aws:///ZONE/INSTANCE-ID) through the EC2 API; done when the node reports a new boot id and "
    "is Ready.",
    (Setting("mode", "enum", "reboot: RebootInstances; stopStart: StopInstances, then StartInstances "
             "once it is stopped (a full power cycle; the instance store is lost).",
             default=EC2_MODES[0], values=EC2_MODES),
     Setting("region", "string", "The instance's region (by default the region of the zone in the "
             "node's providerID)."),
     Setting("credentials", "enum", "podIdentity: the controller pod's identity (boto3's default "
             f"chain: IRSA, EKS Pod Identity); secret: the keys in the Secret {EC2_SECRET} of the "
             "controller's namespace.", default=EC2_CREDENTIALS[0], values=EC2_CREDENTIALS),
     Setting("timeoutSeconds", "integer", "The reset fails when the node is not back Ready with a "
             "new boot id this long after the operation started.", minimum=1, default=900),
     Setting("requestTimeoutSeconds", "integer", "How long one request to the EC2 API may take "
             "(connect and answer).", minimum=1, default=30)),
    credentials=CredentialSource(secret=EC2_SECRET,
                                 keys=("aws_access_key_id", "aws_secret_access_key", "aws_session_token"),
                                 workload_identity=True, setting="credentials"),
    build=_build)
