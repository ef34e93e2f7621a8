"""The deploy/ files cannot be run here (no Docker engine), so they are parsed and
checked against the real CLI: every command they run must exist with its options,
and every ``--app`` module they name must import."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import pytest
import yaml

from ledgerq.cli import cli
from ledgerq.core.config import Settings
from ledgerq.core.settings_table import SETTINGS
from ledgerq.metrics import RelayMetrics, WorkerMetrics, new_registry

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
FILES = sorted(
    [DEPLOY / "compose.yaml", *(DEPLOY / "k8s").glob("*.yaml"), *(DEPLOY / "prometheus").glob("*")]
)


def _documents(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _ledgerq_commands(node: Any) -> list[list[str]]:
    """Every argument list in the tree that is handed to the ``ledgerq`` entrypoint."""
    found: list[list[str]] = []
    if isinstance(node, dict):
        if node.get("image") == "ledgerq:latest" and isinstance(node.get("command"), list):
            found.append([str(a) for a in node["command"]])
        if "args" in node and str(node.get("image", "")).startswith("ledgerq"):
            found.append([str(a) for a in node["args"]])
        for value in node.values():
            found.extend(_ledgerq_commands(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_ledgerq_commands(value))
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_deploy_file_parses(path: Path) -> None:
    assert _documents(path), f"{path} is empty"


def test_every_deployed_command_exists_with_its_options() -> None:
    commands = [c for path in FILES for d in _documents(path) for c in _ledgerq_commands(d)]
    names = {c[0] for c in commands if c}
    assert {"migrate", "relay", "worker", "reconcile"} <= names, names
    for argv in commands:
        command = cli.get_command(click.Context(cli), argv[0])
        assert isinstance(command, click.Command), f"no such command: ledgerq {argv[0]}"
        known = {opt for p in command.params for opt in p.opts}
        for arg in argv[1:]:
            if arg.startswith("--"):
                assert arg.split("=")[0] in known, f"ledgerq {argv[0]} has no option {arg}"


def _app_modules(argv: list[str]) -> list[str]:
    """The modules an argument list hands to ``--app`` (``--app M`` or ``--app=M``)."""
    found = []
    for i, arg in enumerate(argv):
        if arg == "--app" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith("--app="):
            found.append(arg.partition("=")[2])
    return found


def test_every_deployed_app_module_imports() -> None:
    commands = [c for path in FILES for d in _documents(path) for c in _ledgerq_commands(d)]
    apps = sorted({m for argv in commands for m in _app_modules(argv)})
    assert apps, "no deployed command runs a worker with --app"
    for module in apps:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            pytest.fail(f"deploy/ runs --app {module!r}, which does not import: {exc}")


def _containers(path: Path) -> list[dict[str, Any]]:
    [deployment] = _documents(path)
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    return containers


@pytest.mark.parametrize("name", ["relay-deployment.yaml", "worker-deployment.yaml"])
def test_relay_and_workers_are_probed_on_their_metrics_port(name: str) -> None:
    [container] = _containers(DEPLOY / "k8s" / name)
    args = [str(a) for a in container["args"]]
    port = int(args[args.index("--metrics-port") + 1])
    assert {"name": "metrics", "containerPort": port} in container["ports"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_the_scrape_config_keeps_the_pods_metrics_port() -> None:
    [config] = _documents(DEPLOY / "prometheus" / "scrape.yaml")
    [job] = config["scrape_configs"]
    keeps = {
        r["source_labels"][0]: r["regex"]
        for r in job["relabel_configs"]
        if r.get("action") == "keep"
    }
    assert keeps["__meta_kubernetes_pod_container_port_name"] == "metrics"
    assert keeps["__meta_kubernetes_pod_label_app_kubernetes_io_name"] == "ledgerq"
    assert job["metrics_path"] == "/metrics"


def _exported_names() -> set[str]:
    registry = new_registry()
    RelayMetrics(registry)
    WorkerMetrics(registry)
    names = set()
    for family in registry.collect():
        names.add(family.name)
        kind = family.type
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
        names.update(family.name + s for s in suffixes.get(kind, []))
    return names


def test_the_grafana_dashboard_queries_only_metrics_ledgerq_exports() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "ledgerq.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {m for e in exprs for m in re.findall(r"\b(?:ledgerq|process)_[a-z_]+", e)}
    assert any(m.startswith("ledgerq_") for m in used)
    assert used <= _exported_names(), used - _exported_names()


#: The Kubernetes versions the manifests are validated against: the oldest one we
#: document support for, and the newest the validator ships schemas for.
K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("path", sorted((DEPLOY / "k8s").glob("*.yaml")), ids=lambda p: p.name)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(path: Path, version: str) -> None:
    for document in _documents(path):
        if document["kind"] == "Kustomization":  # kustomize's own file, not an API object
            continue
        try:  # strict: an unknown (misspelled) field fails too
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{path.name} ({document['kind']}) on Kubernetes {version}: {exc.message}")


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    [kustomization] = _documents(DEPLOY / "k8s" / "kustomization.yaml")
    on_disk = {p.name for p in (DEPLOY / "k8s").glob("*.yaml")}
    assert set(kustomization["resources"]) == on_disk - {
        "kustomization.yaml",
        "secret.example.yaml",
    }


def test_the_disruption_budget_covers_the_worker_pods() -> None:
    [budget] = _documents(DEPLOY / "k8s" / "worker-pdb.yaml")
    [deployment] = _documents(DEPLOY / "k8s" / "worker-deployment.yaml")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert budget["spec"]["maxUnavailable"] == 1 < deployment["spec"]["replicas"]


def test_the_configmap_holds_valid_settings_with_quorum_queues() -> None:
    [configmap] = _documents(DEPLOY / "k8s" / "configmap.yaml")
    settings = Settings.from_env(configmap["data"])  # every value parses
    assert settings.queue_type == "quorum"
    assert {s.env for s in SETTINGS} >= set(configmap["data"])


def test_the_compose_cluster_profile_names_the_nodes_its_config_joins() -> None:
    [compose] = _documents(DEPLOY / "compose.yaml")
    services = compose["services"]
    nodes = ["rabbitmq", "rabbitmq-1", "rabbitmq-2"]
    assert [services[n]["hostname"] for n in nodes] == nodes
    assert all(services[n].get("profiles") == ["cluster"] for n in nodes[1:])
    cookies = {services[n]["environment"]["RABBITMQ_ERLANG_COOKIE"] for n in nodes}
    assert len(cookies) == 1, "the nodes of one cluster share one Erlang cookie"
    config = (DEPLOY / "rabbitmq" / "cluster.conf").read_text()
    listed = re.findall(r"classic_config\.nodes\.\d+ = rabbit@(\S+)", config)
    assert listed == nodes
    # The URL list the file's comment tells people to set parses, one URL per node.
    [example] = re.findall(r"LEDGERQ_AMQP_URL=(\S+)", (DEPLOY / "compose.yaml").read_text())
    assert [u.split("@")[1].split(":")[0] for u in Settings(amqp_url=example).amqp_urls] == nodes


def test_the_image_is_slim_and_runs_as_a_non_root_user() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    [base] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile, re.MULTILINE)
    assert base.endswith("-slim"), base
    final_stage = dockerfile.rsplit("\nFROM ", 1)[1]
    [user] = re.findall(r"^USER (\S+)$", final_stage, re.MULTILINE)
    assert user.split(":")[0] not in ("root", "0"), user
