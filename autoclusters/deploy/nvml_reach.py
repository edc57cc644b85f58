"""The ``nvml`` stack setting: where the detector finds the driver's ``libnvidia-ml.so.1``.

A node has the library in one of three places, and the detector tries them in the order of
``search`` (the first that loads wins):

* ``loader``: the dynamic loader's own path, which is where the NVIDIA container runtime
  puts the driver's libraries when the pod runs under its runtime class
  (``runtimeClassName``, with ``NVIDIA_DRIVER_CAPABILITIES=utility``: "utility: required for
  using nvidia-smi and NVML", NVIDIA Container Toolkit, "Specialized Configurations with
  Docker");
* the GPU Operator's driver root ``/run/nvidia/driver`` (the driver container's root
  filesystem, which the operator mounts there on the host);
* ``/``: the host's own library directories (a driver installed on the host).

Every entry but ``loader`` is a directory *on the host*, searched in ``LIBRARY_DIRS``. The
DaemonSet reaches them through one read-only mount of the host's ``hostRoot`` (default
``/``) at ``HOST_MOUNT``, with ``type: Directory`` (it always exists, so nothing is created
on the host; a mount of ``/run/nvidia/driver`` itself would fail the pod with ``Directory``
on a node without the GPU Operator, and with ``type: ""`` the runtime would create the
directory on the host) and ``mountPropagation: HostToContainer``, so that a driver root the
GPU Operator mounts after the detector started is seen too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LIBRARY = "libnvidia-ml.so.1"
LOADER = "loader"  # the search entry for the dynamic loader's own path
GPU_OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
DEFAULT_SEARCH: tuple[str, ...] = (LOADER, GPU_OPERATOR_DRIVER_ROOT, "/")
# Where a driver's libraries live under a root: Debian/Ubuntu multiarch (x86_64, aarch64),
# the RHEL/SUSE family's lib64, then the plain directories.
LIBRARY_DIRS: tuple[str, ...] = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib",
                                 "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64", "lib")
HOST_MOUNT = "/host"  # where the DaemonSet mounts the host's root (read-only)
DEFAULT_HOST_ROOT = "/"
HOST_ROOT_VOLUME = "host-root"
# What the NVIDIA container runtime reads to inject the driver's NVML (utility) into a pod
# that asks for no GPU through the device plugin.
RUNTIME_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}


class NvmlConfigError(ValueError):
    pass


@dataclass(frozen=True)
class NvmlReach:
    """The ``nvml`` stack setting (docs/deploy.md's settings table; docs/detector.md, "NVML")."""

    enabled: bool = True
    search: tuple[str, ...] = DEFAULT_SEARCH
    host_root: str = DEFAULT_HOST_ROOT  # "": no host mount (only ``loader`` can then find the library)
    runtime_class_name: str = ""  # e.g. "nvidia": the NVIDIA container runtime injects the library

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise NvmlConfigError(f"nvml.enabled must be true or false, got {self.enabled!r}")
        if not isinstance(self.search, tuple) or not self.search or not all(
                isinstance(s, str) and (s == LOADER or s.startswith("/")) and "," not in s for s in self.search):
            raise NvmlConfigError(f"nvml.search must be a non-empty list of '{LOADER}' and absolute host "
                                  f"directories, got {self.search!r}")
        if not isinstance(self.host_root, str) or (self.host_root and not self.host_root.startswith("/")):
            raise NvmlConfigError(f"nvml.hostRoot must be an absolute host directory or '', got {self.host_root!r}")
        if not self.host_root and any(s != LOADER for s in self.search):
            raise NvmlConfigError("nvml.hostRoot '' mounts nothing of the host: nvml.search may then only "
                                  f"hold '{LOADER}'")
        if not isinstance(self.runtime_class_name, str) or any(c.isspace() for c in self.runtime_class_name):
            raise NvmlConfigError(f"nvml.runtimeClassName must be a RuntimeClass name, got "
                                  f"{self.runtime_class_name!r}")

    def detector_args(self) -> list[str]:
        """The ``autoclusters detector run`` flags for this setting."""
        if not self.enabled:
            return ["--no-nvml"]
        out = ["--nvml-search", ",".join(self.search)]
        if self.host_root:
            out += ["--host-root", HOST_MOUNT]
        return out


def nvml_from_config(raw: Mapping[str, Any], as_bool: Any) -> NvmlReach:
    """``nvml`` as the stack configuration writes it (camelCase); ``as_bool`` reads a boolean
    that may arrive as a string."""
    defaults = NvmlReach()
    search = raw.get("search", list(defaults.search))
    if not isinstance(search, list):
        raise NvmlConfigError(f"nvml.search must be a list, got {search!r}")
    return NvmlReach(enabled=as_bool(raw.get("enabled", True), "nvml.enabled"), search=tuple(search),
                     host_root=raw.get("hostRoot", defaults.host_root),
                     runtime_class_name=raw.get("runtimeClassName", defaults.runtime_class_name))


def apply_to_pod(reach: NvmlReach, pod: dict[str, Any], container: dict[str, Any]) -> None:
    """Adds what ``reach`` needs to the detector's pod spec: its flags, the host mount, the
    runtime class and the environment its runtime reads."""
    container["args"] = [*container["args"], *reach.detector_args()]
    if not reach.enabled:
        return
    if reach.host_root:
        pod.setdefault("volumes", []).append(
            {"name": HOST_ROOT_VOLUME, "hostPath": {"path": reach.host_root, "type": "Directory"}})
        container.setdefault("volumeMounts", []).append(
            {"name": HOST_ROOT_VOLUME, "mountPath": HOST_MOUNT, "readOnly": True,
             "mountPropagation": "HostToContainer"})
    if reach.runtime_class_name:
        pod["runtimeClassName"] = reach.runtime_class_name
        container["env"] = [*container.get("env", []), *({"name": k, "value": v} for k, v in RUNTIME_ENV.items())]
