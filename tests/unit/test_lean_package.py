"""A lean package: plotting is an extra, the licence ships, the sdist carries tests
and docs, the lock carries no machine's paths, and the image installs from the lock."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
LOCK = (ROOT / "requirements.lock").read_text(encoding="utf-8")
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "*-logs"
)


def name_of(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def test_plotting_is_an_extra_not_a_runtime_dependency() -> None:
    runtime = {name_of(r) for r in PROJECT["dependencies"]}
    assert runtime.isdisjoint({"matplotlib", "numpy", "pillow"})
    extras = PROJECT["optional-dependencies"]
    assert [name_of(r) for r in extras["bench"]] == ["matplotlib"]
    # The dev extra (what the lock is compiled from) carries the bench extra's packages.
    assert {name_of(r) for r in extras["bench"]} <= {name_of(r) for r in extras["dev"]}


def test_every_runtime_dependency_is_documented_with_its_reason() -> None:
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    section = reference.split("## Runtime dependencies", 1)[1].split("\n## ", 1)[0]
    rows = {
        name_of(line.split("|")[1].strip(" `")): line
        for line in section.splitlines()
        if line.startswith("| `")
    }
    for requirement in PROJECT["dependencies"]:
        assert name_of(requirement) in rows, f"{requirement} is not in the table"
    assert "matplotlib" in section  # and the extra is explained


def test_the_licence_is_mit_and_declared_as_spdx() -> None:
    licence = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert licence.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in licence
    assert PROJECT["license"] == "MIT"
    assert PROJECT["license-files"] == ["LICENSE"]


def test_the_lock_pins_every_dependency_and_no_machine_path() -> None:
    pinned = {line.split("==")[0].lower() for line in LOCK.splitlines() if "==" in line}
    for requirement in PROJECT["dependencies"] + PROJECT["optional-dependencies"]["bench"]:
        assert name_of(requirement) in pinned, requirement
    for line in LOCK.splitlines():
        assert not line.startswith(("-", "--")), line
        assert "file:" not in line and "/opt/" not in line, line
    assert "ledgerq @" not in LOCK  # no self-reference pinned as a path


def test_the_image_installs_from_the_lock_and_copies_what_the_build_reads() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    assert "pip install --constraint requirements.lock ." in dockerfile
    allowed = {
        line[1:].rstrip("/")
        for line in (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    copied = {
        source.rstrip("/")
        for line in dockerfile.splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for source in line.split()[1:-1]
    }
    assert {"requirements.lock", "LICENSE", "README.md", "pyproject.toml"} <= copied
    assert copied <= allowed, f"copied but kept out of the build context: {copied - allowed}"
    assert "matplotlib" not in dockerfile.lower().split("# ----")[-1]  # no plotting config


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist, built by the PEP 517 hook of a setuptools that [build-system] allows."""
    work = tmp_path_factory.mktemp("sdist")
    backend = work / "backend"
    requires = PYPROJECT["build-system"]["requires"]
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_RETRIES="0")
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(backend), *requires],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    # From a copy: building writes an .egg-info folder next to pyproject.toml.
    source = work / "src"
    shutil.copytree(ROOT, source, symlinks=True, ignore=NOT_SOURCE)
    out = work / "dist"
    out.mkdir()
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))",
            str(out),
        ],
        cwd=source,
        env=dict(os.environ, PYTHONPATH=str(backend)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return out / built.stdout.strip().splitlines()[-1]


def test_the_sdist_carries_tests_docs_licence_and_the_real_package_folders(sdist: Path) -> None:
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        metadata = archive.extractfile(f"{sdist.name[: -len('.tar.gz')]}/PKG-INFO")
        assert metadata is not None
        info = metadata.read().decode()
    for path in (
        "LICENSE",
        "requirements.lock",
        "docs/reference.md",
        "tests/conftest.py",
        "tests/integration/test_misconfiguration.py",
        "ledgerq/ledger/queries.sql",
        "ledgerq/ledger/migrations/env.py",
        "ledgerq/relay/service.py",
        "ledgerq/consumers/worker.py",
        "ledgerq/py.typed",
    ):
        assert path in names, f"{path} is missing from the sdist"
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    assert "License-Expression: MIT" in info
    assert 'Requires-Dist: matplotlib>=3.8; extra == "bench"' in info
    assert not re.search(r"^Requires-Dist: matplotlib[^;]*$", info, re.MULTILINE)


OPTIONAL_CLIENTS = ("opentelemetry", "prometheus_client")
LOADED = (
    "import sys\n"
    "{setup}\n"
    f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {OPTIONAL_CLIENTS})))\n"
)


def _loaded_after(setup: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", LOADED.format(setup=setup)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_otel_and_metrics_are_extras_a_producer_never_loads() -> None:
    extras = PROJECT["optional-dependencies"]
    assert sorted(name_of(r) for r in extras["otel"]) == ["opentelemetry-api", "opentelemetry-sdk"]
    assert {name_of(r) for r in PROJECT["dependencies"]}.isdisjoint({"opentelemetry-api"})
    # A producer, enqueue's parameters included, and every command's wiring: neither
    # OpenTelemetry nor prometheus-client is imported (metrics load with a port only).
    producer = (
        "import ledgerq\n"
        "from ledgerq.ledger.specs import TaskSpec, rows_document\n"
        "rows_document([TaskSpec('k', {'a': 1})])\n"
        "import ledgerq.compose, ledgerq.cli"
    )
    assert _loaded_after(producer) == ""


def test_the_optional_clients_check_would_see_them() -> None:
    # The check above can fail: a process that imported OpenTelemetry has it loaded,
    # and the metrics module loads prometheus-client.
    assert "opentelemetry.trace" in _loaded_after("import opentelemetry.trace")
    assert "prometheus_client" in _loaded_after("import ledgerq.metrics")
