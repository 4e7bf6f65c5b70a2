"""SCRAM-SHA-256 arithmetic shared by both ends (RFC 5802, RFC 7677).

Only the math lives here: salting, the keys, the signatures and attribute parsing. The
client's exchange is :mod:`pgwire_mock.client.auth`; the server's is
:mod:`pgwire_mock.server.auth`. PostgreSQL stores a role's secret as
``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`` (base64 parts,
``src/common/scram-common.c``, ``scram_build_secret``); :class:`ScramSecret` is that value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import stringprep
import unicodedata
from dataclasses import dataclass
from typing import Final

__all__ = [
    "SCRAM_SHA_256",
    "SCRAM_SHA_256_PLUS",
    "ScramSecret",
    "client_key",
    "hmac_sha256",
    "parse_attributes",
    "salted_password",
    "saslprep",
    "server_key",
    "stored_key",
    "xor",
]

SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_256_PLUS: Final = "SCRAM-SHA-256-PLUS"
DEFAULT_ITERATIONS: Final = 4096
"""``scram_iterations``' default (a GUC from PostgreSQL 16, fixed at 4096 before)."""


def saslprep(text: str) -> str | None:
    """RFC 4013 SASLprep of a stored string, or None if ``text`` is not allowed.

    Callers fall back to the raw password on None, as PostgreSQL does on both sides
    (src/common/saslprep.c: a password that fails SASLprep is used as it stands).
    """
    mapped = "".join(
        " " if stringprep.in_table_c12(ch) else ch for ch in text if not stringprep.in_table_b1(ch)
    )
    normalized = unicodedata.normalize("NFKC", mapped)
    if not normalized:
        return None
    prohibited = (
        stringprep.in_table_a1,
        stringprep.in_table_c12,
        stringprep.in_table_c21_c22,
        stringprep.in_table_c3,
        stringprep.in_table_c4,
        stringprep.in_table_c5,
        stringprep.in_table_c6,
        stringprep.in_table_c7,
        stringprep.in_table_c8,
        stringprep.in_table_c9,
    )
    if any(check(ch) for ch in normalized for check in prohibited):
        return None
    # RFC 3454 section 6: right-to-left text must not mix in left-to-right characters
    # and must start and end with a right-to-left one.
    if any(stringprep.in_table_d1(ch) for ch in normalized) and (
        any(stringprep.in_table_d2(ch) for ch in normalized)
        or not stringprep.in_table_d1(normalized[0])
        or not stringprep.in_table_d1(normalized[-1])
    ):
        return None
    return normalized


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, "sha256")


def salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i): PBKDF2-HMAC-SHA-256 with one output block."""
    # Bytes a client sent that are not UTF-8 arrive as lone surrogates (surrogateescape).
    data = password.encode("utf-8", "surrogateescape")
    return hashlib.pbkdf2_hmac("sha256", data, salt, iterations)


def client_key(salted: bytes) -> bytes:
    return hmac_sha256(salted, b"Client Key")


def server_key(salted: bytes) -> bytes:
    return hmac_sha256(salted, b"Server Key")


def stored_key(key: bytes) -> bytes:
    """H(ClientKey)."""
    return hashlib.sha256(key).digest()


def xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def parse_attributes(message: bytes) -> list[tuple[str, str]] | None:
    """``a=value`` pairs of a SCRAM message in order, or None when it is malformed."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        return None
    pairs: list[tuple[str, str]] = []
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or len(name) != 1:
            return None
        pairs.append((name, value))
    return pairs


@dataclass(frozen=True, slots=True)
class ScramSecret:
    """What the server keeps for a SCRAM role: salt, iterations, StoredKey, ServerKey."""

    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_password(
        cls, password: str, salt: bytes, iterations: int = DEFAULT_ITERATIONS
    ) -> ScramSecret:
        # The server prepares the password as the client does (pg_be_scram_build_secret).
        salted = salted_password(saslprep(password) or password, salt, iterations)
        return cls(iterations, salt, stored_key(client_key(salted)), server_key(salted))

    @classmethod
    def parse(cls, text: str) -> ScramSecret | None:
        """Parse ``SCRAM-SHA-256$i:salt$StoredKey:ServerKey`` (as in pg_authid), or None."""
        try:
            method, head, keys = text.split("$")
            iterations_text, salt_b64 = head.split(":")
            stored_b64, server_b64 = keys.split(":")
            if method != SCRAM_SHA_256:
                return None
            secret = cls(
                int(iterations_text),
                base64.b64decode(salt_b64, validate=True),
                base64.b64decode(stored_b64, validate=True),
                base64.b64decode(server_b64, validate=True),
            )
        except (ValueError, binascii.Error):
            return None
        if secret.iterations < 1 or len(secret.stored_key) != 32 or len(secret.server_key) != 32:
            return None
        return secret

    def render(self) -> str:
        b64 = base64.b64encode
        return (
            f"{SCRAM_SHA_256}${self.iterations}:{b64(self.salt).decode()}$"
            f"{b64(self.stored_key).decode()}:{b64(self.server_key).decode()}"
        )
