"""The image's two builds (Containerfile for docker/podman, tools/build-image.sh for make
image) describe the same image: same steps, entrypoint, user, environment."""

from __future__ import annotations

import json
import re
from pathlib import Path

from autoclusters import __version__
from autoclusters.deploy import DEFAULT_IMAGE, workloads

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = (REPO / "Containerfile").read_text()
BUILD_SCRIPT = (REPO / "tools" / "build-image.sh").read_text()
INSTALL = (REPO / "image" / "install.sh").read_text()


def _instruction(name: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", CONTAINERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.startswith(name + " ")]


def test_both_builds_run_the_same_install_steps():
    runs = " ".join(_instruction("RUN"))
    assert "image/wheelhouse.sh" in runs and "install.sh venv" in runs and "install.sh slim" in runs
    assert '"$root/image/wheelhouse.sh"' in BUILD_SCRIPT
    assert "install.sh venv" in BUILD_SCRIPT and "install.sh slim" in BUILD_SCRIPT


def test_same_entrypoint_user_and_environment():
    (entrypoint,) = _instruction("ENTRYPOINT")
    assert json.loads(entrypoint) == ["/opt/autoclusters/bin/autoclusters"]
    assert "--config.entrypoint /opt/autoclusters/bin/autoclusters" in BUILD_SCRIPT
    (user,) = _instruction("USER")
    assert f"--config.user {user}" in BUILD_SCRIPT
    uid = user.split(":")[0]
    assert f"autoclusters:x:{uid}:{uid}:" in INSTALL  # the user exists in /etc/passwd
    (env,) = _instruction("ENV")
    for pair in env.split():
        assert f"--config.env {pair}" in BUILD_SCRIPT


def test_both_start_from_debian_bookworm_with_python3():
    assert "ARG BASE=debian:bookworm-slim" in CONTAINERFILE
    assert "suite=bookworm" in BUILD_SCRIPT and "--variant=minbase --include=python3" in BUILD_SCRIPT
    assert "install -y --no-install-recommends python3 " in " ".join(_instruction("RUN"))


def test_the_tag_is_the_package_version_and_the_workloads_run_the_entrypoints_subcommands():
    assert DEFAULT_IMAGE.rsplit(":", 1)[1] == __version__
    for command in (workloads.CONTROLLER_COMMAND, workloads.DETECTOR_COMMAND, workloads.WEBHOOK_COMMAND):
        assert command[0] == "autoclusters"  # the entrypoint; the pods pass command[1:] as args


def test_the_detector_needs_root_but_the_others_run_as_the_images_user():
    assert workloads.DETECTOR_SECURITY_CONTEXT["runAsUser"] == 0
    assert workloads.DETECTOR_SECURITY_CONTEXT["privileged"] is True
    assert workloads._RESTRICTED["runAsNonRoot"] is True  # needs the image's numeric non-root USER
    (user,) = _instruction("USER")
    assert int(user.split(":")[0]) != 0
