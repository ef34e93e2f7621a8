"""Every method of every storage protocol has a conformance test: the protocols
are introspected (:mod:`ledgerq.ledger.protocol`, and the sharded ledger's
:class:`~ledgerq.ledger.split.ledger.OperatorLedger`), and each method must be called
(``<something>.<method>(``) in at least one test module of this folder. A new
storage method without a conformance test fails here, naming it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Protocol

from ledgerq.ledger import protocol
from ledgerq.ledger.split import ledger as sharded

HERE = Path(__file__).parent


def protocols() -> list[type]:
    """Every Protocol class the storage seam declares."""
    found: dict[str, type] = {}
    for module in (protocol, sharded):
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and obj.__module__ == module.__name__
                and Protocol in obj.__mro__[1:]
                and getattr(obj, "_is_protocol", False)
            ):
                found[name] = obj
    return list(found.values())


def storage_methods() -> dict[str, str]:
    """Each protocol method's name, and the protocol that declares it."""
    methods: dict[str, str] = {}
    for proto in protocols():
        for name, member in vars(proto).items():
            if not name.startswith("_") and inspect.isfunction(member):
                methods.setdefault(name, proto.__name__)
    return methods


def called_names(pattern: str = "test_*.py") -> set[str]:
    """Every attribute called in this folder's test modules (matching ``pattern``)."""
    called: set[str] = set()
    for path in HERE.glob(pattern):
        if path.name == Path(__file__).name:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                called.add(node.func.attr)
    return called


def test_the_introspection_finds_the_seam() -> None:
    names = {p.__name__ for p in protocols()}
    assert {"WorkerLedger", "RelayLedger", "HarnessLedger", "OperatorLedger", "TxLedger"} <= names
    assert {"claim", "publish_batch", "mark_published", "backdate", "act"} <= set(storage_methods())


def test_every_storage_protocol_method_has_a_conformance_test() -> None:
    called = called_names()  # (once: each parse of the folder takes a while)
    missing = {name: owner for name, owner in storage_methods().items() if name not in called}
    assert not missing, f"storage methods without a conformance test: {missing}"


def test_every_transaction_scoped_method_has_a_test_in_a_transaction() -> None:
    """The transaction-scoped part shares names with the pool's (River's ExecutorTx
    does too): its methods must be called in test_transaction*.py."""
    in_transaction = called_names("test_transaction*.py")
    missing = {
        f"{proto.__name__}.{name}"
        for proto in protocols()
        if proto.__name__.endswith("TxLedger")
        for name, member in vars(proto).items()
        if not name.startswith("_") and inspect.isfunction(member) and name not in in_transaction
    }
    assert not missing, f"transaction-scoped methods without a test: {sorted(missing)}"
