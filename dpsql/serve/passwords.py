"""Password verifiers and the server side of SCRAM-SHA-256 (RFC 5802, RFC 7677).

The configuration never holds a password, only its verifier in PostgreSQL's own format
(``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>``, base64), made by
``dpsql hash-password``. A verifier lets the server check a client's proof without being able to
log in as the analyst: the proof needs ``ClientKey``, and the verifier holds only its hash.

>>> verifier = hash_password("correct horse", iterations=4096)
>>> verifier.startswith("SCRAM-SHA-256$4096:")
True
>>> ScramVerifier.parse(verifier).iterations
4096
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from dpsql.errors import ProgrammingError

MECHANISM = "SCRAM-SHA-256"
DEFAULT_ITERATIONS = 4096  # PostgreSQL's default (scram_iterations)
_VERIFIER = re.compile(r"^SCRAM-SHA-256\$(\d+):([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+):([A-Za-z0-9+/=]+)$")


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


@dataclass(frozen=True)
class ScramVerifier:
    """What the server stores for one password."""

    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    @classmethod
    def parse(cls, text: str) -> ScramVerifier:
        match = _VERIFIER.match(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise ProgrammingError(
                "a password must be a SCRAM-SHA-256 verifier as printed by `dpsql hash-password` "
                "(SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>); plain-text passwords are refused"
            )
        iterations = int(match.group(1))
        if iterations < 1:
            raise ProgrammingError("a SCRAM verifier needs at least one iteration")
        salt, stored, server = (base64.b64decode(match.group(i)) for i in (2, 3, 4))
        if len(stored) != 32 or len(server) != 32:
            raise ProgrammingError("a SCRAM-SHA-256 verifier holds 32-byte keys; regenerate it with `dpsql hash-password`")
        return cls(iterations, salt, stored, server)

    @classmethod
    def of_password(cls, password: str, salt: bytes, iterations: int) -> ScramVerifier:
        salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
        client_key = _hmac(salted, b"Client Key")
        return cls(iterations, salt, hashlib.sha256(client_key).digest(), _hmac(salted, b"Server Key"))

    def text(self) -> str:
        encode = lambda raw: base64.b64encode(raw).decode("ascii")  # noqa: E731
        return f"{MECHANISM}${self.iterations}:{encode(self.salt)}${encode(self.stored_key)}:{encode(self.server_key)}"


def hash_password(password: str, iterations: int = DEFAULT_ITERATIONS) -> str:
    """The verifier of ``password`` with a fresh random salt (what ``dpsql hash-password`` prints)."""
    if not isinstance(password, str) or not password:
        raise ProgrammingError("the password must be a non-empty string")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 4096:
        raise ProgrammingError(f"iterations must be an integer of at least 4096, got {iterations!r}")
    return ScramVerifier.of_password(password, secrets.token_bytes(16), iterations).text()


class ScramExchange:
    """One server-side SCRAM-SHA-256 exchange without channel binding.

    ``first(client_first)`` returns the server-first message; ``final(client_final)`` returns the
    server-final message when the proof is right and None otherwise. Any malformed message also
    gives None: the caller refuses the login either way, with no hint of which it was.
    """

    def __init__(self, verifier: ScramVerifier, server_nonce: str | None = None) -> None:
        self.verifier = verifier
        self._server_nonce = server_nonce  # None: fresh from OS entropy (given only to check RFC 7677's example)
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def first(self, client_first: str) -> str | None:
        header, _, bare = _split_gs2(client_first)
        if header is None:
            return None
        attributes = _attributes(bare)
        client_nonce = attributes.get("r")
        if not client_nonce:
            return None
        self._client_first_bare = bare
        self._nonce = client_nonce + (self._server_nonce or base64.b64encode(secrets.token_bytes(18)).decode("ascii"))
        salt = base64.b64encode(self.verifier.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={self.verifier.iterations}"
        return self._server_first

    def final(self, client_final: str) -> str | None:
        without_proof, separator, proof_part = client_final.rpartition(",p=")
        if not separator or not self._server_first:
            return None
        attributes = _attributes(without_proof)
        if attributes.get("r") != self._nonce or attributes.get("c") not in ("biws", "eSws"):  # "n,," or "y,,"
            return None
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            return None
        if len(proof) != 32:
            return None
        message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("utf-8")
        signature = _hmac(self.verifier.stored_key, message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.verifier.stored_key):
            return None
        return "v=" + base64.b64encode(_hmac(self.verifier.server_key, message)).decode("ascii")


def _split_gs2(client_first: str) -> tuple[str | None, str, str]:
    """(gs2 header, ',', client-first-bare); the header is None unless it asks for no channel binding."""
    parts = client_first.split(",", 2)
    if len(parts) != 3 or parts[0] not in ("n", "y") or parts[1]:
        return None, "", ""
    return parts[0], ",", parts[2]


def _attributes(message: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in message.split(","):
        key, equals, value = item.partition("=")
        if equals and len(key) == 1:
            found.setdefault(key, value)
    return found


def decoy_verifier(username: str, secret: bytes) -> ScramVerifier:
    """A verifier no password matches, stable per user name, for names the server does not know: the
    exchange then looks the same as for a real analyst (same salt on every try), so a client cannot
    tell unknown names from wrong passwords."""
    salt = _hmac(secret, b"salt:" + username.encode("utf-8"))[:16]
    return ScramVerifier(DEFAULT_ITERATIONS, salt, _hmac(secret, b"stored:" + salt), _hmac(secret, b"server:" + salt))
