"""The simulated host's boot after a reset through a remote API (a BMC's, EC2's): the kwok
node's annotations of ``autoclusters.sim.hosts.reboot_request``, which kwok's stages play as
NotReady, then Ready with the new boot id ``boot_id_after(by)``."""

from __future__ import annotations

import datetime as dt

from autoclusters.kube import Kube
from autoclusters.sim.hosts import reboot_request


def play_boot(kube: Kube, node: str, by: str) -> None:
    until = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    kube.patch_node(node, {"metadata": {"annotations": reboot_request(by, until)}})
