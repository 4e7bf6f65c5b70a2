"""Client-side password authentication: MD5 and SCRAM-SHA-256 (RFC 5802, RFC 7677).

Pure functions and a small SCRAM state object, standard library only. Channel binding
(SCRAM-SHA-256-PLUS) needs the TLS certificate, so it waits for TLS support; without TLS
the GS2 header is ``n,,`` ("client does not support channel binding"), as libpq sends it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Final

from pgwire_mock import scram
from pgwire_mock.client.errors import AuthenticationError
from pgwire_mock.scram import saslprep

SCRAM_SHA_256: Final = scram.SCRAM_SHA_256
# "n,,": no channel binding, no authzid. Its base64 is the "c=biws" of every exchange.
_GS2_HEADER: Final = b"n,,"


def md5_password(user: str, password: str, salt: bytes) -> str:
    """The PasswordMessage text for AuthenticationMD5Password: ``"md5" + hex``.

    PostgreSQL stores md5(password || user) and the client proves it knows that by
    hashing it again with the per-connection salt (src/common/md5_common.c, libpq's
    fe-auth.c pg_password_sendauth).
    """
    inner = hashlib.md5((password + user).encode()).hexdigest()
    return "md5" + hashlib.md5(inner.encode("ascii") + salt).hexdigest()


def random_nonce() -> str:
    """A printable client nonce (18 random bytes, base64: no commas, as RFC 5802 wants)."""
    return base64.b64encode(secrets.token_bytes(18)).decode("ascii")


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: bytes, what: str) -> dict[str, str]:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError as err:
        raise AuthenticationError(f"SCRAM {what} is not UTF-8") from err
    attributes: dict[str, str] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or len(name) != 1:
            raise AuthenticationError(f"malformed SCRAM {what}: {text!r}")
        attributes.setdefault(name, value)
    return attributes


class ScramSha256:
    """One SCRAM-SHA-256 exchange from the client side.

    PostgreSQL ignores the SCRAM user name (it uses the startup packet's), so libpq sends
    an empty one; ``username`` exists for RFC test vectors. ``nonce`` is injectable for
    the same reason; by default it is random.
    """

    __slots__ = (
        "_auth_message",
        "_client_first_bare",
        "_expected_server_signature",
        "_nonce",
        "_password",
    )

    def __init__(self, password: str, *, username: str = "", nonce: str | None = None) -> None:
        self._password = saslprep(password) or password
        self._nonce = random_nonce() if nonce is None else nonce
        if not self._nonce or "," in self._nonce:
            raise ValueError("a SCRAM nonce must be non-empty printable text without commas")
        self._client_first_bare = f"n={_saslname(username)},r={self._nonce}".encode()
        self._auth_message: bytes | None = None
        self._expected_server_signature: bytes | None = None

    def client_first_message(self) -> bytes:
        """The data of SASLInitialResponse."""
        return _GS2_HEADER + self._client_first_bare

    def client_final_message(self, server_first: bytes) -> bytes:
        """The data of the SASLResponse answering AuthenticationSASLContinue."""
        attrs = _attributes(server_first, "server-first-message")
        if "m" in attrs:
            raise AuthenticationError("SCRAM server requires an unsupported extension (m=)")
        try:
            combined, salt_b64, iterations_text = attrs["r"], attrs["s"], attrs["i"]
        except KeyError as err:
            raise AuthenticationError(f"SCRAM server-first-message lacks {err}") from err
        if not combined.startswith(self._nonce) or len(combined) == len(self._nonce):
            raise AuthenticationError("SCRAM server nonce does not extend the client nonce")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
            iterations = int(iterations_text)
        except ValueError as err:
            raise AuthenticationError(f"malformed SCRAM salt or iteration count: {err}") from err
        if iterations < 1 or not salt:
            raise AuthenticationError("SCRAM iteration count and salt must not be empty")
        salted = scram.salted_password(self._password, salt, iterations)
        client_key = scram.client_key(salted)
        stored_key = scram.stored_key(client_key)
        without_proof = b"c=" + base64.b64encode(_GS2_HEADER) + b",r=" + combined.encode()
        auth_message = self._client_first_bare + b"," + server_first + b"," + without_proof
        signature = scram.hmac_sha256(stored_key, auth_message)
        proof = scram.xor(client_key, signature)
        self._auth_message = auth_message
        self._expected_server_signature = scram.hmac_sha256(scram.server_key(salted), auth_message)
        return without_proof + b",p=" + base64.b64encode(proof)

    def verify_server_final(self, server_final: bytes) -> None:
        """Check AuthenticationSASLFinal: the server must prove it knows the password too."""
        if self._expected_server_signature is None:
            raise AuthenticationError("SCRAM server-final-message before server-first-message")
        attrs = _attributes(server_final, "server-final-message")
        if "e" in attrs:
            raise AuthenticationError(f"SCRAM authentication failed: {attrs['e']}")
        try:
            signature = base64.b64decode(attrs.get("v", ""), validate=True)
        except ValueError as err:
            raise AuthenticationError("malformed SCRAM server signature") from err
        if not hmac.compare_digest(signature, self._expected_server_signature):
            raise AuthenticationError("SCRAM server signature does not match: wrong server")
