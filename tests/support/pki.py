"""Test certificates made with the openssl command line tool, for tests/security/ (gRPC TLS and
mutual TLS, HTTPS): tests/security/conftest.py makes them once per module (the ``pki`` fixture)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

OPENSSL = shutil.which("openssl")


EXTENSIONS = """
[server]
subjectAltName = DNS:localhost, IP:127.0.0.1
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
"""


def openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"openssl {' '.join(args)}: {done.stderr}"


def make_pki(d: Path) -> Path:
    """ca.pem/ca.key and other-ca.pem (an unrelated CA); server.pem/.key (SAN localhost,
    127.0.0.1) and client.pem/.key signed by ca; rogue.pem/.key signed by other-ca. EC P-256
    keys, valid for two days, made in a temporary directory and never kept."""
    (d / "ext.cnf").write_text(EXTENSIONS)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other-ca"):
        openssl(
            "req",
            "-x509",
            *ec,
            "-keyout",
            f"{ca}.key",
            "-out",
            f"{ca}.pem",
            "-days",
            "2",
            "-subj",
            f"/CN=fpgaserve test {ca}",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            cwd=d,
        )
    for name, ca, section in (("server", "ca", "server"), ("client", "ca", "client"), ("rogue", "other-ca", "client")):
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            f"{ca}.pem",
            "-CAkey",
            f"{ca}.key",
            "-set_serial",
            str(int.from_bytes(os.urandom(8), "big")),
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-extensions",
            section,
            "-out",
            f"{name}.pem",
            cwd=d,
        )
    return d
