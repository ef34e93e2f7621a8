"""What gets installed: one import name, ``ledgerq``, with everything it needs inside.

Every file has one path: the code lives where it is imported from
(``ledgerq/ledger/producer.py`` is ``ledgerq.ledger.producer``), and the product
card's top-level ``ledger/``, ``relay/`` and ``consumers/`` are links to those
packages. These tests check the package list against the folders on disk, the
links, build the wheel once and look inside it, and import the public API in a
fresh interpreter.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]

#: Repository folder -> the package it installs as.
FOLDERS = {"ledgerq": "ledgerq"}
#: The product card's top-level folders -> the package folder each one is.
CARD_FOLDERS = {
    "ledger": "ledgerq/ledger",
    "relay": "ledgerq/relay",
    "consumers": "ledgerq/consumers",
}
BROKER_CLIENTS = ("aio_pika", "aiormq", "pika", "pamqp")
#: Files that are not Python but must ship (read through importlib.resources).
DATA_FILES = (
    "ledgerq/ledger/queries.sql",
    "ledgerq/ledger/inspection.sql",
    "ledgerq/ledger/overview.sql",
    "ledgerq/demo/queries.sql",
    "ledgerq/py.typed",
    "ledgerq/dashboard/templates/base.html",
    "ledgerq/dashboard/templates/_filters.html",
    "ledgerq/dashboard/static/style.css",
    "ledgerq/dashboard/static/overview.js",
    "ledgerq/dashboard/static/vendor/uPlot.iife.min.js",
    "ledgerq/dashboard/static/vendor/uPlot.min.css",
    "ledgerq/dashboard/static/vendor/uPlot.LICENSE",
)


def packages_on_disk() -> dict[str, Path]:
    """Every folder with an ``__init__.py`` under ``ledgerq/``, by package name
    (symlinks not followed: a package reached twice is an error)."""
    found: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for here, dirs, files in os.walk(ROOT / folder, followlinks=False):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            if "__init__.py" in files:
                relative = Path(here).relative_to(ROOT / folder)
                name = ".".join([package, *relative.parts])
                assert name not in found, f"{name} is reached twice: {found[name]} and {here}"
                found[name] = Path(here)
    return found


def mapped_folder(package: str) -> Path:
    """Where ``[tool.setuptools.package-dir]`` says ``package`` lives."""
    mapping: dict[str, str] = SETUPTOOLS.get("package-dir", {})
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in mapping:
            return ROOT / mapping[prefix] / Path(*parts[cut:])
    return ROOT / mapping.get("", "") / Path(*parts)


# -- (a) the package list matches the folders --------------------------------------------


def test_every_package_folder_is_listed_in_pyproject() -> None:
    on_disk = set(packages_on_disk())
    listed = set(SETUPTOOLS["packages"])
    assert on_disk - listed == set(), "folders with __init__.py that would not be installed"
    assert listed - on_disk == set(), "packages listed in pyproject with no folder"


@pytest.mark.parametrize("package", sorted(SETUPTOOLS["packages"]))
def test_each_listed_package_maps_to_its_own_folder(package: str) -> None:
    folder = mapped_folder(package)
    assert (folder / "__init__.py").is_file(), f"{package} maps to {folder}, no package there"
    assert not folder.is_symlink() and not any(p.is_symlink() for p in folder.parents), (
        f"{package} maps through a symlink ({folder}): the real folder must be mapped"
    )
    assert packages_on_disk()[package] == folder


@pytest.mark.parametrize("folder", sorted(CARD_FOLDERS))
def test_the_card_folders_are_the_packages_themselves(folder: str) -> None:
    # One path per file: the top-level folder is a link to the package, so a
    # traceback, git, grep and mypy all name ledgerq/<folder>/..., and no file
    # is reachable under two package names.
    link = ROOT / folder
    assert link.is_symlink(), f"{folder}/ should link to {CARD_FOLDERS[folder]}/"
    assert link.resolve() == (ROOT / CARD_FOLDERS[folder]).resolve()
    inside = [p for p in (ROOT / "ledgerq").rglob("*") if p.is_symlink()]
    assert inside == [], f"links inside the package give files a second path: {inside}"


def test_no_folder_with_python_files_lacks_an_init() -> None:
    # A folder of modules without __init__.py would be silently left out of the wheel.
    missing = sorted(
        str(Path(here).relative_to(ROOT))
        for folder in FOLDERS
        for here, dirs, files in os.walk(ROOT / folder, followlinks=False)
        if "__pycache__" not in here
        and any(f.endswith(".py") for f in files)
        and "__init__.py" not in files
    )
    assert missing == []


# -- (b) the wheel -------------------------------------------------------------------------

_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    "bench-logs",
    "demo-logs",
    "bench-out",
)


def _can_build_without_isolation() -> bool:
    """Whether this environment's setuptools can make a wheel by itself: it must be
    as new as [build-system] requires, and it needs the ``wheel`` package below
    setuptools 70.1, which has bdist_wheel built in."""
    version = importlib.metadata.version("setuptools")
    numbers = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    [required] = [r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    minimum = tuple(int(p) for p in required.partition(">=")[2].split(".") if p.isdigit())
    if numbers < minimum:
        return False
    return importlib.util.find_spec("wheel") is not None or numbers >= (70, 1)


def build_wheel(source: Path, out: Path) -> Path:
    """``pip wheel`` the source tree, offline.

    Fastest first: without build isolation when this environment can build wheels
    (no index is consulted at all). Otherwise pip makes an isolated build
    environment (setuptools and wheel, per [build-system]) from the configured
    indexes; with no retries and a short timeout an unreachable remote index fails
    fast and a local one (a wheelhouse or a file:// index) serves the build."""
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out)]
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    if _can_build_without_isolation():
        command += ["--no-build-isolation", "--no-index"]
    else:
        env.update(PIP_RETRIES="0", PIP_DEFAULT_TIMEOUT="10")
    done = subprocess.run(
        [*command, str(source)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    [wheel] = out.glob("ledgerq-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once per session from a copy of the working tree (so no
    stale ``build/`` folder can leak into it, and the tree is left untouched)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(ROOT, source, symlinks=True, ignore=_NOT_SOURCE)
    return build_wheel(source, work / "dist")


@pytest.fixture(scope="module")
def names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


@pytest.fixture(scope="module")
def unpacked(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel unpacked: a pure-Python wheel's files are its installed layout."""
    target = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


def test_the_wheel_installs_only_ledgerq_and_its_metadata(names: list[str]) -> None:
    top = {name.split("/", 1)[0] for name in names}
    dist_info = {t for t in top if t.endswith(".dist-info")}
    assert len(dist_info) == 1 and next(iter(dist_info)).startswith("ledgerq-")
    assert top - dist_info == {"ledgerq"}
    for stray in ("ledger", "relay", "consumers"):
        assert not any(n == stray or n.startswith(f"{stray}/") for n in names), stray


@pytest.mark.parametrize("path", DATA_FILES)
def test_the_wheel_carries_its_data_files(names: list[str], path: str) -> None:
    assert path in names


def test_the_wheel_carries_the_migrations(names: list[str]) -> None:
    migrations = sorted((ROOT / "ledgerq" / "ledger" / "migrations").rglob("*.py"))
    assert any(p.parent.name == "versions" and p.name != "__init__.py" for p in migrations)
    for path in migrations:
        inside = path.relative_to(ROOT).as_posix()
        assert inside in names, f"{inside} is missing from the wheel"


def test_the_wheel_carries_every_module_on_disk(names: list[str]) -> None:
    for package, folder in packages_on_disk().items():
        for module in folder.glob("*.py"):
            inside = f"{package.replace('.', '/')}/{module.name}"
            assert inside in names, f"{inside} is missing from the wheel"


def test_the_wheel_declares_the_console_script(wheel: Path, names: list[str]) -> None:
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(entry_points).decode()
    assert "[console_scripts]" in text
    assert "ledgerq = ledgerq.cli:main" in text


def test_the_unpacked_wheel_finds_its_sql_and_migrations(unpacked: Path) -> None:
    script = (
        "import sys, ledgerq\n"
        "from importlib import resources\n"
        "from ledgerq.ledger.sql import Q, IQ\n"
        "from ledgerq.demo import Q as DQ\n"
        "import ledgerq.ledger.pg.migrate as m\n"
        "location = m.alembic_config('postgresql://x/y').get_main_option('script_location')\n"
        "assert (resources.files('ledgerq.ledger') / 'migrations' / 'env.py').is_file()\n"
        "print(ledgerq.__file__)\n"
        "print(location)\n"
        "print(bool(Q.finish.text and IQ.stats_live.text and DQ))\n"
    )
    done = run_python(script, pythonpath=unpacked)
    assert done.returncode == 0, done.stderr
    loaded_from, location, loaded = done.stdout.split("\n")[:3]
    assert Path(loaded_from).is_relative_to(unpacked)  # the wheel's copy, not the checkout
    assert Path(location).is_relative_to(unpacked) and Path(location).is_dir()
    assert loaded == "True"


# -- (c) the public API --------------------------------------------------------------------


def run_python(script: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=pythonpath or Path("/"),
        capture_output=True,
        text=True,
        timeout=60,
    )


PUBLIC_IMPORT = (
    "import sys\n"
    "import ledgerq\n"
    "from ledgerq import enqueue, task, aenqueue, enqueue_many, aenqueue_many\n"
    "for name in ledgerq.__all__:\n"
    "    getattr(ledgerq, name)\n"
    f"clients = {set(BROKER_CLIENTS)}\n"
    "loaded = sorted(m for m in sys.modules if m.split('.')[0] in clients)\n"
    "print(ledgerq.__file__)\n"
    "print(','.join(loaded))\n"
)


@pytest.fixture(params=["checkout", "wheel"])
def site(request: pytest.FixtureRequest) -> Path | None:
    """Where ledgerq is imported from: this checkout (editable), or the built wheel."""
    if request.param == "checkout":
        return None
    unpacked_wheel: Path = request.getfixturevalue("unpacked")
    return unpacked_wheel


def test_importing_the_public_api_loads_no_broker_client(site: Path | None) -> None:
    done = run_python(PUBLIC_IMPORT, pythonpath=site)

    assert done.returncode == 0, done.stderr
    loaded_from, loaded_clients = done.stdout.split("\n")[:2]
    expected_root = site if site is not None else ROOT
    assert Path(loaded_from).resolve().is_relative_to(expected_root.resolve())
    assert loaded_clients == "", f"importing ledgerq loaded {loaded_clients}"


def test_the_broker_check_would_see_a_broker_client() -> None:
    # The check above can fail: importing the worker does load aio-pika's adapter.
    script = PUBLIC_IMPORT.replace(
        "import ledgerq\n", "import ledgerq\nimport ledgerq.compose.worker\n"
    )
    done = run_python(script)
    assert done.returncode == 0, done.stderr
    assert "aio_pika" in done.stdout.split("\n")[1]
