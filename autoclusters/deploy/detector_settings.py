"""The ``detector`` stack setting: where the DaemonSet's detectors read DCGM from, and their window.

Both are off unless set, since only a cluster that runs DCGM has them (docs/detector.md,
"DCGM on GPU Operator clusters"): ``dcgmHost``, the hostengine ``dcgmi`` asks
(``--dcgm-host``; the GPU Operator's is ``nvidia-dcgm.<its namespace>.svc:5555``), and
``dcgmExporterUrl``, the node's own dcgm-exporter page (``--dcgm-exporter-url``; it may say
``$(HOST_IP)``, the DaemonSet's downward-API address of the node). ``windowSeconds``: how long a
fault must last before its condition is raised (``--window``; the detector's 60 s unless set).
"""

from __future__ import annotations

from dataclasses import dataclass


class DetectorConfigError(ValueError):
    pass


def exporter_url_error(url: str) -> str | None:
    """Why ``url`` cannot be a dcgm-exporter page's address, or None ("" is no exporter)."""
    if url == "":
        return None
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or any(c.isspace() for c in url):
        return f"expected an http:// or https:// URL, got {url!r}"
    return None


@dataclass(frozen=True)
class DetectorSettings:
    dcgm_host: str = ""
    dcgm_exporter_url: str = ""
    # how long a fault must last before its condition is raised (``--window``); None: the
    # detector's own default (60 s, detector/agent_config.py)
    window_seconds: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.dcgm_host, str) or any(c.isspace() for c in self.dcgm_host):
            raise DetectorConfigError(f"detector.dcgmHost must be an address such as "
                                      f"nvidia-dcgm.gpu-operator.svc:5555, got {self.dcgm_host!r}")
        why = exporter_url_error(self.dcgm_exporter_url)
        if why:
            raise DetectorConfigError(f"detector.dcgmExporterUrl: {why}")
        w = self.window_seconds
        if w is not None and (isinstance(w, bool) or not isinstance(w, int | float) or w < 0):
            raise DetectorConfigError(f"detector.windowSeconds must be a number of seconds >= 0, got {w!r}")

    def args(self) -> list[str]:
        """The detector's flags for these settings (none for what is not set)."""
        out = ["--dcgm-host", self.dcgm_host] if self.dcgm_host else []
        out += ["--dcgm-exporter-url", self.dcgm_exporter_url] if self.dcgm_exporter_url else []
        return out + (["--window", f"{self.window_seconds:g}"] if self.window_seconds is not None else [])
