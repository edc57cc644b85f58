"""Runs Pulumi offline against the binaries ``tools/build-tools.sh pulumi`` and
``pulumi-python`` built.

The CLI, the Python language host and the Kubernetes provider come from the cache (found
on ``PATH``, never downloaded), and state lives in a local file backend. Two ways in:
:func:`cli_env` is the shell a user runs ``pulumi up`` from in the project directory (the
CLI test), and :func:`stack` runs the same program through the Automation API's inline
mode (the demo and the lifecycle tests), in which the SDK hosts the language runtime itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoclusters.devcluster.tools import ToolsMissing, cache_dir, repo_root, versions

PROJECT = "autoclusters"
DEFAULT_PASSPHRASE = "autoclusters-local-only"


@dataclass(frozen=True)
class PulumiTools:
    cli_dir: Path
    kubernetes_dir: Path
    cli_version: str

    @classmethod
    def locate(cls) -> PulumiTools:
        v = versions()
        cli_version = v.get("PULUMI_CLI_VERSION", v["PULUMI_VERSION"])
        k8s_label = v.get("PULUMI_KUBERNETES_PROVIDER_LABEL", v["PULUMI_KUBERNETES_VERSION"].lstrip("v"))
        bin_dir = cache_dir() / "bin"
        cli, k8s = bin_dir / f"pulumi-{cli_version}", bin_dir / f"pulumi-kubernetes-{k8s_label}"
        for d in (cli, k8s):
            if not (d / ".complete").exists():
                raise ToolsMissing(f"{d.name} is not built yet (expected in {d}); run: tools/build-tools.sh pulumi")
        return cls(cli_dir=cli, kubernetes_dir=k8s, cli_version=cli_version.lstrip("v"))


def pulumi_env(state_dir: Path, *, kubeconfig: str | None = None, passphrase: str = DEFAULT_PASSPHRASE,
               tools: PulumiTools | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for an offline Pulumi run with state in ``state_dir``.

    ``PATH`` gets the CLI, the provider and this interpreter's virtualenv (the dynamic
    provider plugin runs ``python -m pulumi.dynamic`` with it); ``PYTHONPATH`` gets the
    repository root, where the ``components`` package lives.
    """
    tools = tools or PulumiTools.locate()
    state_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ if base is None else base)
    venv_bin = Path(sys.executable).parent
    env.update({
        "PATH": os.pathsep.join([str(tools.cli_dir), str(tools.kubernetes_dir), str(venv_bin), env.get("PATH", "")]),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_BACKEND_URL": f"file://{state_dir}",
        "PULUMI_CONFIG_PASSPHRASE": passphrase,
        "PULUMI_HOME": str(state_dir / ".pulumi-home"),
        "PULUMI_RUNTIME_VIRTUALENV": str(venv_bin.parent),
        "PYTHONPATH": os.pathsep.join(p for p in [str(repo_root()), env.get("PYTHONPATH", "")] if p),
    })
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    return env


def language_host_dir() -> Path:
    """Where ``tools/build-tools.sh pulumi-python`` put the Python language host and its exec shim."""
    v = versions()["PULUMI_LANGUAGE_PYTHON_VERSION"]
    d = cache_dir() / "bin" / f"pulumi-language-python-{v}"
    if not (d / ".complete").exists():
        raise ToolsMissing(f"{d.name} is not built yet (expected in {d}); run: tools/build-tools.sh pulumi-python")
    return d


def cli_env(home: Path, venv: Path, *, passphrase: str = DEFAULT_PASSPHRASE, tools: PulumiTools | None = None,
            base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a user's shell that runs the Pulumi CLI in the project directory:
    the CLI, the Python language host and the Kubernetes provider on ``PATH`` (offline: never
    downloaded), and the virtualenv activated (``VIRTUAL_ENV``, its ``bin`` on ``PATH``), which
    this language host needs because it does not read ``Pulumi.yaml``'s ``virtualenv`` option.
    The backend comes from ``pulumi login``; nothing is put on ``PYTHONPATH``."""
    tools = tools or PulumiTools.locate()
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if k not in ("PULUMI_BACKEND_URL", "PYTHONPATH", "KUBECONFIG", "PULUMI_RUNTIME_VIRTUALENV")}
    env.update({
        # The language host first: it runs the pulumi-language-python-exec found first on PATH,
        # and the one of its own release sits beside it (the CLI's directory has a newer one).
        "PATH": os.pathsep.join([str(language_host_dir()), str(tools.cli_dir), str(tools.kubernetes_dir),
                                 str(venv / "bin"), env.get("PATH", "")]),
        "VIRTUAL_ENV": str(venv),
        "PULUMI_HOME": str(home),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_CONFIG_PASSPHRASE": passphrase,
    })
    return env


def stack(name: str, work_dir: Path, state_dir: Path, config: Mapping[str, Any], *,
          program: Callable[[], None] | None = None, kubeconfig: str | None = None) -> Any:
    """Creates or selects stack ``name`` of the autoclusters program with ``config``
    (``autoclusters:*`` keys; objects and lists allowed) written as its stack settings."""
    import pulumi.automation as auto

    if program is None:
        if str(repo_root()) not in sys.path:
            sys.path.insert(0, str(repo_root()))
        from components.stack import program as stack_program

        program = stack_program
    tools = PulumiTools.locate()
    env = pulumi_env(state_dir, kubeconfig=kubeconfig, tools=tools)
    work_dir.mkdir(parents=True, exist_ok=True)
    write_stack_config(work_dir, name, config)
    command = auto.PulumiCommand(root=str(cli_root(state_dir, tools)), skip_version_check=True)
    opts = auto.LocalWorkspaceOptions(
        work_dir=str(work_dir), pulumi_home=env["PULUMI_HOME"], env_vars=env, pulumi_command=command,
        project_settings=auto.ProjectSettings(name=PROJECT, runtime="python",
                                              backend=auto.ProjectBackend(url=env["PULUMI_BACKEND_URL"])),
        secrets_provider="passphrase")
    return auto.create_or_select_stack(stack_name=name, project_name=PROJECT, program=program, opts=opts)


def cli_root(state_dir: Path, tools: PulumiTools) -> Path:
    """``PulumiCommand`` runs ``ROOT/bin/pulumi``: a link gives it that layout over the cache."""
    root = state_dir / ".pulumi-cli"
    link = root / "bin" / "pulumi"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(tools.cli_dir / "pulumi")
    return root


def write_stack_config(work_dir: Path, name: str, config: Mapping[str, Any]) -> Path:
    """Writes ``Pulumi.<name>.yaml`` the way a user (or a GitOps pipeline) keeps it in git."""
    import yaml

    path = work_dir / f"Pulumi.{name}.yaml"
    existing = yaml.safe_load(path.read_text()) if path.exists() else {}
    existing = existing or {}
    existing["config"] = dict(config)
    path.write_text(yaml.safe_dump(existing, sort_keys=False))
    return path
