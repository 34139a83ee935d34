"""A local OAuth 2.0 identity provider for the OAUTHBEARER tests: the client-credentials token endpoint that
librdkafka posts to (``sasl.oauthbearer.method=oidc``) and the JWKS the broker's
``OAuthBearerValidatorCallbackHandler`` checks each token's signature against. Loopback, an ephemeral port.

What librdkafka 2.x sends and needs, and what Kafka 4.x checks:

- ``POST /token``: ``grant_type=client_credentials`` (and ``scope``) as a form, the client's id and secret
  in an HTTP Basic header. 200 answers ``application/json`` with ``access_token``, a wrong client 401
  ``{"error": "invalid_client"}`` (librdkafka reports an error body word for word).
- The token is a JWT signed RS256 with a 2048-bit key made at start (the broker refuses shorter ones), with
  ``sub`` (the principal) and ``exp``, which librdkafka reads, and ``iss`` and ``aud``, which a Kafka 4.4
  broker with a JWKS URL insists on.
- ``GET /jwks``: the public key. The broker fetches it while it starts, so the provider must run first.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

AUDIENCE = "kafka"
_KID = "microbatch-test"


class OidcProvider:
    """The identity provider of one client. ``start()`` serves on ``127.0.0.1`` from a daemon thread;
    ``tokens_issued`` counts the tokens handed out. ``client_secret`` may change while it runs (a
    rotated secret): the next request is checked against the new one."""

    def __init__(self, client_id: str, client_secret: str, subject: str, lifetime_s: int = 3600) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.subject = subject
        self.lifetime_s = lifetime_s
        self.tokens_issued = 0
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def token_url(self) -> str:
        return f"{self.issuer}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/jwks"

    def start(self) -> OidcProvider:
        threading.Thread(target=self._server.serve_forever, args=(0.1,), daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def token(self, authorization: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """What ``POST /token`` answers: (status, JSON body)."""
        presented = base64.b64decode(authorization.removeprefix("Basic ")).decode() if authorization else ""
        if presented != f"{self.client_id}:{self.client_secret}":
            return HTTPStatus.UNAUTHORIZED, {"error": "invalid_client", "error_description": "bad client"}
        if form.get("grant_type") != "client_credentials":
            return HTTPStatus.BAD_REQUEST, {"error": "unsupported_grant_type"}
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": self.subject, "aud": AUDIENCE, "iat": now}
        claims |= {"exp": now + self.lifetime_s, "scope": form.get("scope", "")}
        self.tokens_issued += 1  # one handler thread at a time in practice: librdkafka asks serially
        access = jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": _KID})
        return HTTPStatus.OK, {"access_token": access, "token_type": "Bearer", "expires_in": self.lifetime_s}

    def jwks(self) -> dict[str, Any]:
        key = RSAAlgorithm.to_jwk(self._key.public_key(), as_dict=True)
        return {"keys": [key | {"kid": _KID, "use": "sig", "alg": "RS256"}]}


def _handler(provider: OidcProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            form = {name: values[0] for name, values in parse_qs(body).items()}
            if self.path == "/token":
                self._send(*provider.token(self.headers.get("Authorization", ""), form))
            else:
                self._send(HTTPStatus.NOT_FOUND, {"error": "not_found"})

        def do_GET(self) -> None:
            if self.path == "/jwks":
                self._send(HTTPStatus.OK, provider.jwks())
            else:
                self._send(HTTPStatus.NOT_FOUND, {"error": "not_found"})

        def _send(self, status: int, answer: dict[str, Any]) -> None:
            body = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: librdkafka's own lines say what it asked."""

    return Handler
