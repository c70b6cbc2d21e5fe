"""The security tests (hostile clients and models, fuzzers, shared memory abuse, TLS and access
control): their certificates, made once per module with the openssl command line tool."""

from __future__ import annotations

import pytest

from support.pki import OPENSSL, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """ca.pem/ca.key and other-ca.pem (an unrelated CA); server.pem/.key (SAN localhost,
    127.0.0.1) and client.pem/.key signed by ca; rogue.pem/.key signed by other-ca. EC P-256
    keys, valid for two days, made in a temporary directory and never kept."""
    if OPENSSL is None:
        pytest.skip("the openssl command line tool is not installed (needed to make test certificates)")
    return make_pki(tmp_path_factory.mktemp("pki"))
