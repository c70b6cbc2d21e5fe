"""HTTPS on the HTTP/REST port (--http-use-ssl, fpgaserve's flags): tritonclient.http over TLS
verifying the server against the test CA, plain HTTP refused on that port, and unusable
certificate files ending the server at start with a line that names them. Certificates come
from the security tests' ``pki`` fixture (tests/security/conftest.py: openssl CLI, a temporary directory)."""

from __future__ import annotations

import http.client
import ssl
import subprocess

import numpy as np
import pytest
import tritonclient.http as httpclient

from support.server_process import CONFORMANCE_REPO, ServerProcess

pytestmark = pytest.mark.timeout(120)


class HttpsServer(ServerProcess):
    ca: str = ""

    def http_status(self, path: str) -> int:
        context = ssl.create_default_context(cafile=self.ca)
        conn = http.client.HTTPSConnection("localhost", self.http_port, timeout=2, context=context)
        try:
            conn.request("GET", path)
            return conn.getresponse().status
        finally:
            conn.close()


@pytest.mark.parametrize("processes", [1, 2])
def test_https_inference(pki, tmp_path, processes):
    args = [
        "--http-use-ssl=true",
        f"--http-server-cert={pki / 'server.pem'}",
        f"--http-server-key={pki / 'server.key'}",
        f"--frontend-processes={processes}",
    ]
    server = HttpsServer([CONFORMANCE_REPO], *args, log_path=tmp_path / "log")
    server.ca = str(pki / "ca.pem")
    with server:
        client = httpclient.InferenceServerClient(
            f"localhost:{server.http_port}", ssl=True, ssl_options={"ca_certs": str(pki / "ca.pem")}
        )
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        assert client.is_server_ready()
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), 2 * a)
        client.close()
        # plain HTTP on the HTTPS port gets no HTTP answer
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            conn.request("GET", "/v2/health/ready")
            conn.getresponse()
        conn.close()


@pytest.mark.parametrize(
    "extra, text",
    [
        (["--http-use-ssl=true"], "--http-use-ssl needs --http-server-cert"),
        (
            ["--http-use-ssl=true", "--http-server-cert=/nonexistent.pem", "--http-server-key=/nonexistent.key"],
            "/nonexistent.pem",
        ),
    ],
)
def test_https_bad_files_end_the_server(tmp_path, extra, text):
    s = ServerProcess([CONFORMANCE_REPO], *extra)
    r = subprocess.run(s.args, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert text in r.stdout + r.stderr
