"""The requirement sets: ``requirements.in`` (runtime) and
``requirements-dev.in`` (tests, lint), locked by pip-tools (scripts/lock.sh)
into ``requirements.txt`` and ``requirements-dev.txt``; torch stays out of
both locks (scripts/setup.sh installs its CPU pin first and constrains the
locks with it)."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("ragsync", "connectors", "transforms", "beam_pipelines", "control_plane", "cli")
TORCH_PIN = re.compile(r'^TORCH="torch==([^"]+)"$', re.M)


def _inputs(name: str) -> dict[str, Requirement]:
    """The requirements of a ``.in`` file by canonical name (options such as
    ``-c`` and comments skipped)."""
    out = {}
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            out[canonicalize_name(req.name)] = req
    return out


def _lock(name: str) -> dict[str, Version]:
    """``name==version`` pins of a lock file by canonical name.

    Raises:
        AssertionError: a requirement line that is not an exact pin.
    """
    out = {}
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line.strip())
        assert m, f"{name}: not an exact pin: {line!r}"
        out[canonicalize_name(m.group(1))] = Version(m.group(2))
    return out


def _third_party_imports(paths: list[Path], local: set[str]) -> dict[str, set[str]]:
    """Top-level third-party modules imported anywhere in ``paths`` (lazy
    imports included) -> the files importing them."""
    std = set(sys.stdlib_module_names) | {"__future__"}
    found: dict[str, set[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for top in (n.split(".")[0] for n in names):
                if top not in std and top not in local:
                    found.setdefault(top, set()).add(
                        str(path.relative_to(ROOT)) if ROOT in path.parents else path.name
                    )
    return found


def _unrequired(imports: dict[str, set[str]], allowed: set[str]) -> dict[str, list[str]]:
    """Modules whose installed distribution is not in ``allowed`` (canonical
    names), or that no installed distribution provides: module -> files."""
    dists = packages_distributions()
    return {
        module: sorted(files)
        for module, files in imports.items()
        if not {canonicalize_name(d) for d in dists.get(module, [])} & allowed
    }


def _torch_pin() -> str:
    m = TORCH_PIN.search((ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8"))
    assert m, 'scripts/setup.sh has no TORCH="torch==..." line'
    return m.group(1)


def test_every_product_import_is_a_direct_runtime_requirement() -> None:
    paths = [p for package in PRODUCT for p in sorted((ROOT / package).rglob("*.py"))]
    imports = _third_party_imports(paths, set(PRODUCT))
    assert {"apache_beam", "pymilvus", "tantivy", "sqlalchemy", "torch"} <= set(imports)
    assert _unrequired(imports, set(_inputs("requirements.in")) | {"torch"}) == {}


def test_every_test_import_is_locked() -> None:
    paths = sorted((ROOT / "tests").glob("*.py"))
    local = {*PRODUCT, "tests", *(p.stem for p in paths)}
    imports = _third_party_imports(paths, local)
    locked = set(_lock("requirements.txt")) | set(_lock("requirements-dev.txt")) | {"torch"}
    assert {"pytest", "hypothesis", "moto"} <= set(imports)
    assert _unrequired(imports, locked) == {}


def test_the_import_check_finds_an_unrequired_module(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy\nfrom yaml import safe_load\n\ndef f():\n    import no_such_module_xyz\n")
    imports = _third_party_imports([bad], set())
    assert sorted(imports) == ["no_such_module_xyz", "numpy", "yaml"]
    assert sorted(_unrequired(imports, {"numpy"})) == ["no_such_module_xyz", "yaml"]


def test_torch_stays_out_of_the_locks_and_setup_installs_its_pin_first() -> None:
    assert _torch_pin() == "2.13.0"
    for lock in ("requirements.txt", "requirements-dev.txt"):
        assert "torch" not in _lock(lock)
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    torch_at = setup.index('pip install -q "$TORCH"')
    locks_at = setup.index("-r requirements.txt -r requirements-dev.txt")
    assert torch_at < locks_at
    assert '-c "$torch_pin"' in setup[locks_at : setup.index("\n", locks_at)]
    dockerfile = (ROOT / "templates" / "dataflow" / "Dockerfile").read_text(encoding="utf-8")
    docker = "\n".join(line for line in dockerfile.splitlines() if not line.startswith("#"))
    assert f'pip install --no-cache-dir "torch=={_torch_pin()}"' in docker
    assert "-r requirements.txt" in docker and "requirements-dev" not in docker


def test_the_dataflow_image_copies_every_product_package() -> None:
    """The image installs the project from its copied folders: a package left
    out (cli/ when it moved there) would be missing from the launcher."""
    dockerfile = (ROOT / "templates" / "dataflow" / "Dockerfile").read_text(encoding="utf-8")
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert [p for p in PRODUCT if f"COPY {p} {p}\n" not in dockerfile] == []
    assert [p for p in PRODUCT if f'"{p}*"' not in setup] == []


def test_the_inputs_and_the_locks_agree() -> None:
    """Every input is pinned in its lock at a version it allows (the dev lock
    may rely on the runtime lock for shared packages), the two locks never pin
    one package at two versions, and each lock names exactly its file's
    inputs as direct requirements."""
    runtime, dev = _lock("requirements.txt"), _lock("requirements-dev.txt")
    for in_file, lock in (("requirements.in", runtime), ("requirements-dev.in", {**runtime, **dev})):
        for name, req in _inputs(in_file).items():
            assert name in lock, f"{name} of {in_file} is not locked"
            assert req.specifier.contains(lock[name], prereleases=True), (
                name,
                str(req.specifier),
                lock[name],
            )
    assert {n: (runtime[n], dev[n]) for n in set(runtime) & set(dev) if runtime[n] != dev[n]} == {}
    for in_file, lock_file in (
        ("requirements.in", "requirements.txt"),
        ("requirements-dev.in", "requirements-dev.txt"),
    ):
        text = (ROOT / lock_file).read_text(encoding="utf-8")
        direct = set()
        for block in re.split(r"\n(?=[A-Za-z0-9])", text):
            if f"-r {in_file}" in block:
                direct.add(canonicalize_name(block.split("==", 1)[0].strip()))
        assert direct == set(_inputs(in_file)), lock_file


def test_the_readme_names_the_beam_extras_the_runtime_installs() -> None:
    """The README said Beam's ``[gcp]`` extra was "not in the local
    requirements" while ``requirements.in`` installs it (and the tests run
    ``gs://`` on a local GCS server): every extra of apache-beam the runtime
    requirements install is not said to be missing."""
    extras = sorted(_inputs("requirements.in")["apache-beam"].extras)
    assert "gcp" in extras and "aws" in extras
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    for extra in extras:
        said = re.findall(rf"apache-beam\[{extra}\]`? \(([^)]*)\)", readme)
        assert not [s for s in said if "not in" in s], (extra, said)


def test_the_design_cards_replaced_packages_are_listed_and_not_required() -> None:
    """``docs/design-card.md`` names each package of the design card that
    ragsync replaces (first column); none of them is a requirement, and each
    package it says is used instead is one."""
    text = (ROOT / "docs" / "design-card.md").read_text(encoding="utf-8")
    replaced = re.findall(r"^\| `([A-Za-z0-9_.-]+)` \|", text.split("## ")[0], re.M)
    assert {"pytesseract", "tensorflow-text"} <= set(replaced)
    required = set(_inputs("requirements.in")) | set(_inputs("requirements-dev.in"))
    assert not {canonicalize_name(p) for p in replaced} & required
    used = re.findall(r"^\| [^|`]+ \| ((?:`[^`]+`(?:, )?)+)", text, re.M)
    named = {canonicalize_name(p.split("[")[0]) for row in used for p in re.findall(r"`([^`]+)`", row)}
    assert named and named <= set(_inputs("requirements.in")), named - set(_inputs("requirements.in"))
