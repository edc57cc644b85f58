"""The unit test tree mirrors the package: ``tests/unit/<pkg>/test_<module>[_<topic>].py`` tests
``autoclusters/<pkg>/<module>.py`` (``tests/unit/components/`` mirrors ``components/``), so a
newcomer finds a module's tests where the module is, and its module where its tests are.

In a package's folder a test names one of the package's modules, or the package itself when
it tests the package as a whole (``providers/test_providers.py``); at the top it names a
top-level module (``test_names.py``). A test of no one module is listed below with its reason.
Every folder of tests is a package (``__init__.py``): pytest imports two ``test_client.py`` of
different folders by their package, and without one the second fails to import."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Tests of no one module: the whole tree, the docs, the build, or the test tools themselves.
PROJECT_WIDE = {
    "test_layers.py": "the import layers of the whole package",
    "test_module_names.py": "no two modules of the package share a file name",
    "test_test_tree.py": "this file: the layout of the tests",
    "test_docs_links.py": "every link in the docs and the code names a file the repository has",
    "test_change_recipes.py": "walks the change recipes of docs/architecture.md in a copy of the repository",
    "test_contract_doc.py": "docs/contract.md against the names it documents",
    "test_xid_docs.py": "the Xid tables of the docs against the catalog, the API and the CRD",
    "test_makefile_test_target.py": "the Makefile's test target",
    "test_image_definition.py": "the Containerfile and tools/build-image.sh describe one image",
    "test_gpu_check.py": "tools/gpu-check.sh",
    "test_drain_ack_example.py": "examples/training/drain_ack.py",
    "test_approval_controller_metrics.py": "the approval example (examples/approval/)",
    "test_fakeapi.py": "the unit tests' fake API server (tests/unit/fakeapi.py)",
    "test_one_fake_api.py": "no test code but tests/unit/fakeapi.py stands in for the Kubernetes client",
    "test_rbac_calls.py": "every identity's RBAC against the calls its code makes (tests/unit/rbac_calls.py)",
    "test_tcp_proxy.py": "the integration tests' TCP proxy (tests/integration/tcp_proxy.py)",
}

# Misplaced for now (glob patterns), each with the reason it has not moved yet and where it goes.
NOT_YET_MOVED = {
    "controller/test_clusterapi*.py": "another change edits them this session; they go to providers/",
}


def _mirrored(root: Path, folder: tuple[str, ...]) -> Path:
    if folder and folder[0] in ("components", "benchmarks"):
        return root.joinpath(*folder)
    return root.joinpath("autoclusters", *folder)


def _names(package: Path, folder: tuple[str, ...]) -> set[str]:
    """What a test in ``folder`` may name: the package's modules (``_private.py`` as
    ``private``) and, below the top, the package itself."""
    names = {p.stem.lstrip("_") for p in package.glob("*.py") if p.stem != "__init__"}
    if folder:
        names.add(folder[-1])
    return names


def misplaced(root: Path, project_wide: dict[str, str] | None = None,
              not_yet_moved: dict[str, str] | None = None) -> list[str]:
    """Each test file under ``root/tests/unit`` that mirrors no module, and each folder of
    tests that is no package, with why."""
    unit = root / "tests" / "unit"
    allowed = set(project_wide if project_wide is not None else PROJECT_WIDE)
    pending = set(not_yet_moved if not_yet_moved is not None else NOT_YET_MOVED)
    found: list[str] = []
    for test in sorted(unit.rglob("test_*.py")):
        rel = test.relative_to(unit)
        folder = rel.parts[:-1]
        if "__pycache__" in folder or any(rel.match(p) for p in pending):
            continue
        if not folder and rel.name in allowed:
            continue
        package = _mirrored(root, folder)
        name = test.stem.removeprefix("test_")
        if not package.is_dir():
            found.append(f"{rel}: {package.relative_to(root)}/ is no package to mirror")
        elif not any(name == m or name.startswith(m + "_") for m in _names(package, folder)):
            found.append(f"{rel}: names no module of {package.relative_to(root)}/ "
                         "(test_<module>[_<topic>].py, or list it as project-wide with its reason)")
    for tests in sorted({t.parent for t in unit.rglob("test_*.py")}):
        if "__pycache__" not in tests.parts and not (tests / "__init__.py").exists():
            found.append(f"{tests.relative_to(unit)}/: no __init__.py")
    return found


def test_every_unit_test_sits_where_its_module_is() -> None:
    assert misplaced(ROOT) == []


def test_the_exceptions_name_files_that_exist_and_say_why() -> None:
    unit = ROOT / "tests" / "unit"
    for name, why in PROJECT_WIDE.items():
        assert (unit / name).is_file() and why, name
    for pattern, why in NOT_YET_MOVED.items():
        assert any(unit.glob(pattern)) and why, pattern


def _tree(root: Path, files: list[str]) -> Path:
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("")
    return root


def test_a_misplaced_test_is_named_with_why(tmp_path: Path) -> None:
    root = _tree(tmp_path, [
        "autoclusters/__init__.py", "autoclusters/names.py", "autoclusters/kube/__init__.py",
        "autoclusters/kube/client.py", "components/_recording.py",
        "tests/unit/__init__.py", "tests/unit/test_names.py", "tests/unit/test_docs.py",
        "tests/unit/kube/__init__.py", "tests/unit/kube/test_client.py", "tests/unit/kube/test_client_races.py",
        "tests/unit/kube/test_kube.py", "tests/unit/components/__init__.py", "tests/unit/components/test_recording.py",
        # misplaced:
        "tests/unit/test_kube_client.py",  # a package's module tested at the top
        "tests/unit/kube/test_informer.py",  # no such module
        "tests/unit/policy/__init__.py", "tests/unit/policy/test_check.py",  # no such package
        "tests/unit/kube/sub/test_client.py",  # no package to mirror, and no __init__.py
    ])
    assert misplaced(root, project_wide={"test_docs.py": "the docs"}, not_yet_moved={}) == [
        "kube/sub/test_client.py: autoclusters/kube/sub/ is no package to mirror",
        "kube/test_informer.py: names no module of autoclusters/kube/ "
        "(test_<module>[_<topic>].py, or list it as project-wide with its reason)",
        "policy/test_check.py: autoclusters/policy/ is no package to mirror",
        "test_kube_client.py: names no module of autoclusters/ "
        "(test_<module>[_<topic>].py, or list it as project-wide with its reason)",
        "kube/sub/: no __init__.py",
    ]
    unlisted = misplaced(root, project_wide={}, not_yet_moved={})
    assert [f for f in unlisted if f.startswith("test_docs.py")] == [
        "test_docs.py: names no module of autoclusters/ "
        "(test_<module>[_<topic>].py, or list it as project-wide with its reason)"]
    assert misplaced(root, project_wide={"test_docs.py": "the docs"},
                     not_yet_moved={"kube/test_informer.py": "moves later"})[1].startswith("policy/")
