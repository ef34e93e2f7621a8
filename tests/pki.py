"""A throwaway public key infrastructure for the TLS tests, made with the
``openssl`` command line: a CA, a server certificate it signed for 127.0.0.1
and localhost, and another CA that signed nothing (the wrong one to trust)."""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(*args: str | Path, timeout: float = 60) -> None:
    subprocess.run([str(a) for a in args], check=True, capture_output=True, timeout=timeout)


@dataclass(frozen=True)
class Pki:
    ca: Path
    other_ca: Path
    server_cert: Path
    server_key: Path


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    run(
        "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN=ledgerq {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return cert, key


def make_pki(directory: Path) -> Pki:
    """The CA, the server certificate and key, and the other CA, in ``directory``."""
    ca, ca_key = make_ca(directory, "ca")
    other_ca, _ = make_ca(directory, "other-ca")
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    run(
        "openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=localhost",
    )  # fmt: skip
    extensions = directory / "server.ext"
    extensions.write_text(
        "subjectAltName = IP:127.0.0.1, DNS:localhost\n"
        "basicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature, keyEncipherment\n"
        "extendedKeyUsage = serverAuth\n"
        "authorityKeyIdentifier = keyid\n"
    )
    run(
        "openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-out", cert, "-days", "2", "-extfile", extensions,
    )  # fmt: skip
    for pem in (ca, other_ca, cert):
        pem.chmod(0o644)
    return Pki(ca=ca, other_ca=other_ca, server_cert=cert, server_key=key)
