"""The ``nvml`` stack setting's documented default is its default, and the image installs the
extra the NVML source needs."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import yaml

from autoclusters.deploy.nvml_reach import NvmlReach
from autoclusters.deploy.stack_config import stack_config_from_dict

REPO = Path(__file__).resolve().parents[3]


def test_the_settings_table_shows_the_default() -> None:
    row = next(line for line in (REPO / "docs" / "deploy.md").read_text().splitlines() if line.startswith("| `nvml` |"))
    default = re.match(r"\| `nvml` \| `([^`]*)` \|", row)
    assert default, row
    assert stack_config_from_dict({"nvml": yaml.safe_load(default.group(1))}).nvml == NvmlReach()


def test_the_image_installs_the_nvml_extra_with_nvidia_ml_py() -> None:
    extras = subprocess.run(["sh", str(REPO / "image" / "install.sh"), "extras"], capture_output=True, text=True,
                            check=True).stdout.split(",")
    assert "nvml" in [e.strip() for e in extras]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("nvidia-ml-py") for dep in project["optional-dependencies"]["nvml"])
    assert re.search(r"^nvidia-ml-py==", (REPO / "requirements.txt").read_text(), re.M)  # pinned for the image
