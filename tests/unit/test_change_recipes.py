"""The change recipes of docs/architecture.md, walked: two of them are applied to a copy of the
repository, the generators of ``make manifests`` run there, and the suites that check what is
derived pass there.

- **A pool setting with a default**: one declaration in ``autoclusters/pool_fields.py`` and its
  typed attribute on the parsed pool. The CRD schema, the pool policy's Rego data, the docs
  table and the written-out example pools follow from the generators alone; the parser, the
  writer and the Rego check it with no other change.
- **A fault code** (an SXid): one entry in ``autoclusters/faults/catalog.yaml``.

The files the walk changes (by hand and by the generators) are exactly the files the recipes'
tables list (the rows for the code that uses a setting aside: the walk writes none), so the
page cannot drift from the code. The copy holds the files git knows (tracked, and new ones
not ignored), as a clean clone has them; the generators are read from the Makefile's
``manifests`` target, so a generator added there is run here too.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# The walk's pool setting: in a group that already holds settings, with a default and both limits.
SETTING_PATH, SETTING_DEFAULT, SETTING_MIN, SETTING_MAX = "drain.recipeWalkSeconds", 42, 1, 600
SETTING_DECLARATION = (
    f'RECIPE_WALK_SECONDS = _int("{SETTING_PATH}", {SETTING_DEFAULT}, {SETTING_MIN}, {SETTING_MAX}, description=(\n'
    '    "A setting the recipe walk adds (tests/unit/test_change_recipes.py)."))\n')
SETTING_ATTRIBUTE = "    recipe_walk_seconds: int = pool_fields.RECIPE_WALK_SECONDS.default\n"
# The walk's fault code: an SXid the kernel log reports as any other, known from the catalog alone.
SXID = "26001"
SXID_ENTRY = f'    - {{code: {SXID}, name: "An SXid of the recipe walk", severity: fatal, action: reset}}\n'

# The suites that check what is derived from the declarations (the parser, the writer, the CRD
# schema and the Rego against each other, through ``opa eval`` where OPA is built; the docs
# tables; the rendered manifests; the catalog), run in the copy.
SUITES = (
    "tests/unit/rego/test_policy_data_pool_fields_parity.py",
    "tests/unit/rego/test_policy_data_api_parity.py",
    "tests/unit/pools/test_pool_config.py",
    "tests/unit/test_api_docs.py",
    "tests/unit/components/test_render_manifests.py",
    "tests/unit/faults/test_catalog.py",
)


def recipe_rows(recipe: str, text: str | None = None) -> list[dict[str, str]]:
    """The rows of one recipe's table in docs/architecture.md (``<!-- recipe: NAME ... -->``), each
    by its column's name (``file``, ``how``, and ``for`` where the files differ by the kind of
    change)."""
    text = ARCHITECTURE.read_text() if text is None else text
    marker = f"<!-- recipe: {recipe} "
    assert marker in text, f"docs/architecture.md has no table {marker}-->"
    lines = text.split(marker, 1)[1].split("\n", 1)[1].split("\n\n", 1)[0].splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[2:]]
    for row in rows:
        assert re.findall(r"`([^`]+)`", row["file"]), f"a row of the {recipe} recipe names no file: {row}"
    return rows


def files_of(rows: list[dict[str, str]]) -> set[str]:
    return {f for row in rows for f in re.findall(r"`([^`]+)`", row["file"])}


def walked(rows: list[dict[str, str]], kind: str = "") -> list[dict[str, str]]:
    """The rows a walk of the recipe changes: all but the code that uses the change (the walk
    writes none), and of a table by kind, the rows for every change or for ``kind``."""
    return [r for r in rows if "uses" not in r["how"]
            and ("for" not in r or "every" in r["for"] or (kind and kind in r["for"]))]


def _manifests_commands(makefile: str) -> list[tuple[list[str], str]]:
    """The Makefile's ``manifests`` target as (argv after ``python``, the file stdout goes to or
    ""); a line run only under a condition (the brand's second render) is left out."""
    body = makefile.split("\nmanifests:", 1)[1].split("\n", 1)[1].split("\n\n", 1)[0]
    commands = []
    for line in body.splitlines():
        line = line.strip()
        if not line.startswith("$(BIN)/python "):
            assert line.startswith("$(if "), f"a line of the manifests target this walk cannot run: {line}"
            continue
        words, _, out = line.removeprefix("$(BIN)/python ").partition(">")
        commands.append((words.split(), out.strip()))
    return commands


def _copy_of_the_repository(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src, dst = ROOT / rel, dest / rel
        if not src.is_symlink() and not src.is_file():
            continue  # deleted in the working tree, not yet in git's index
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


def _contents(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts}


def _edit(path: Path, anchor: str, insert: str, *, before: bool = True) -> None:
    text = path.read_text()
    assert text.count(anchor) == 1, f"{path.name}: the walk's anchor {anchor!r} is not there once; update the walk"
    path.write_text(text.replace(anchor, insert + anchor if before else anchor + insert))


def _run(copy: Path, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, *argv], cwd=copy, env=env, text=True, capture_output=True, **kwargs)


def test_the_recipes_list_their_files_and_the_walk_tables_parse() -> None:
    """Every recipe's table lists at least one file of this repository (a path that is a file
    here, or one the recipe adds: ``<type>``, ``<name>``), and the parser finds the rows of the
    code that uses a change."""
    text = ARCHITECTURE.read_text()
    names = re.findall(r"<!-- recipe: ([a-z-]+) ", text)
    assert {"pool-setting", "fault-code", "provider", "action", "consent-mode", "fault-class"} <= set(names)
    for name in names:
        for path in files_of(recipe_rows(name, text)):
            assert "<" in path or (ROOT / path).exists(), f"{name}: {path} is no file of this repository"
    setting = recipe_rows("pool-setting", text)
    assert 0 < len(walked(setting)) < len(setting)  # the code that uses it: rows of its own
    code = recipe_rows("fault-code", text)
    assert 0 < len(walked(code, "an SXid")) < len(walked(code, "an Xid")) < len(code)


def test_a_pool_setting_and_a_fault_code_walk_through_the_recipes(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    _copy_of_the_repository(copy)
    before = _contents(copy)

    # the recipes, by hand: one declaration (and its typed attribute), one catalog entry
    _edit(copy / "autoclusters/pool_fields.py", "SETTINGS: tuple[Setting, ...] = (\n", SETTING_DECLARATION + "\n")
    _edit(copy / "autoclusters/pool_fields.py", "SETTINGS: tuple[Setting, ...] = (\n",
          "    RECIPE_WALK_SECONDS,\n", before=False)
    pool_config = copy / "autoclusters/pools/pool_config.py"
    head, tail = pool_config.read_text().split("\nclass PoolConfig:\n", 1)
    assert "\n    name: str\n" in tail, "PoolConfig's first field is no longer its name: update the walk"
    pool_config.write_text(head + "\nclass PoolConfig:\n" + tail.replace("\n    name: str\n",
                                                                          "\n    name: str\n" + SETTING_ATTRIBUTE, 1))
    _edit(copy / "autoclusters/faults/catalog.yaml", "\n  dcgm:\n", "\n" + SXID_ENTRY.rstrip("\n"))

    # make manifests, line by line
    for argv, out in _manifests_commands((copy / "Makefile").read_text()):
        done = _run(copy, argv, timeout=120)
        assert done.returncode == 0, f"python {' '.join(argv)}:\n{done.stderr}"
        if out:
            (copy / out).write_text(done.stdout)
    render_check = _run(copy, ["-m", "components.render", "--check"])
    assert render_check.returncode == 0, render_check.stdout + render_check.stderr

    after = _contents(copy)
    touched = {path for path, digest in after.items() if before.get(path) != digest}
    assert touched == files_of(walked(recipe_rows("pool-setting"))) | files_of(walked(recipe_rows("fault-code"),
                                                                                       "an SXid"))

    # the setting reached every derived form: the CRD schema, the Rego data, the docs table
    group, key = SETTING_PATH.split(".")
    crds = [d for d in yaml.safe_load_all((copy / "manifests/01-crds.yaml").read_text())
            if d and d["spec"]["names"]["kind"] == "GpuNodePool"]
    schema = crds[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {k: v for k, v in schema[group]["properties"][key].items() if k != "description"} == {
        "type": "integer", "default": SETTING_DEFAULT, "minimum": SETTING_MIN, "maximum": SETTING_MAX}
    rego = (copy / "policies/lib/pool_fields.rego").read_text()
    entry = rego.split(f'"{SETTING_PATH}": {{', 1)[1].split("}", 1)[0]
    assert f'"default": {SETTING_DEFAULT},' in entry and f'"maximum": {SETTING_MAX},' in entry
    assert f'"minimum": {SETTING_MIN},' in entry
    assert f"| `{SETTING_PATH}` | {SETTING_DEFAULT} | {SETTING_MIN} to {SETTING_MAX} |" in (
        copy / "docs/contract.md").read_text()
    # ... and the parser of the copy fills in its default; the detector's catalog knows the code
    known = _run(copy, ["-c", (
        "from autoclusters.pools.pool_config import pool_from_config\n"
        "from autoclusters.faults.catalog import load_catalog\n"
        "print(pool_from_config({'name': 'p'}).recipe_walk_seconds)\n"
        f"e = load_catalog().lookup('nvswitch', '{SXID}'); print(e.severity, e.action)\n")])
    assert known.stdout.split("\n")[:2] == [str(SETTING_DEFAULT), "fatal reset"], known.stderr

    suites = _run(copy, ["-m", "pytest", *SUITES, "-q", "-p", "no:cacheprovider", "-x"], timeout=300)
    assert suites.returncode == 0, suites.stdout[-4000:] + suites.stderr[-2000:]
    assert re.search(r"\d+ passed", suites.stdout), suites.stdout[-2000:]
