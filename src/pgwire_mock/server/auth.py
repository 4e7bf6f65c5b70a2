"""Server-side password authentication: trust, cleartext, MD5 and SCRAM-SHA-256.

Sans-IO: an :class:`Exchange` is told what the client sent and answers with the next
Authentication request, or finishes, or raises :class:`AuthFailedError` carrying the FATAL
error PostgreSQL sends (``src/backend/libpq/auth.c``, ``auth-scram.c``). Facts kept:

* A wrong password, a wrong SCRAM proof and an unknown role all give the same
  ``28P01 password authentication failed for user "x"`` (the server does not reveal which
  roles exist; for SCRAM it runs a mock exchange with a made-up salt, as
  ``scram_mock_salt`` does).
* ``md5`` with a role whose secret is a SCRAM secret uses SCRAM instead
  (``CheckPWChallengeAuth``).
* The SCRAM server nonce is 18 random bytes in base64 (``SCRAM_RAW_NONCE_LEN``); the
  iteration count is the role's secret's (4096 by default).
* Channel binding (SCRAM-SHA-256-PLUS) is not offered, so a client over TLS that
  supports it sends the ``y`` GS2 flag, which is accepted.
* An empty cleartext or MD5 answer is ``28P01 empty password returned by client`` before
  the role is even looked at (``recv_password_packet``), and a role whose password is
  ``""`` has no password, as ``CREATE ROLE ... PASSWORD ''`` clears it. Checked on
  PostgreSQL 14-17.
* Passwords are compared as UTF-8 bytes, so any password works; SCRAM prepares a
  non-ASCII one with SASLprep on both sides, as ``pg_saslprep`` does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from codec.wire import (
    Authentication,
    AuthenticationCleartextPassword,
    AuthenticationMD5Password,
    AuthenticationSASL,
    AuthenticationSASLContinue,
    AuthenticationSASLFinal,
    PasswordMessage,
    SASLInitialResponse,
    SASLResponse,
)
from pgwire_mock.scram import (
    SCRAM_SHA_256,
    ScramSecret,
    hmac_sha256,
    parse_attributes,
    stored_key,
    xor,
)
from pgwire_mock.server.errors import ServerError

__all__ = [
    "AUTH_METHODS",
    "AuthFailedError",
    "AuthMethod",
    "Exchange",
    "User",
    "md5_secret",
    "start_exchange",
]

AuthMethod = Literal["trust", "password", "md5", "scram-sha-256"]
AUTH_METHODS: Final[tuple[AuthMethod, ...]] = ("trust", "password", "md5", "scram-sha-256")


def md5_secret(user: str, password: str) -> str:
    """What pg_authid keeps for an MD5 role: ``"md5" + md5(password || user)``."""
    return "md5" + hashlib.md5((password + user).encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True, slots=True)
class User:
    """A role the fake server knows. ``password`` is plain text, an ``md5…`` secret or a
    ``SCRAM-SHA-256$…`` secret, as pg_authid.rolpassword may hold; None means no password
    (only ``trust`` lets such a role in)."""

    name: str
    password: str | None = None

    def __post_init__(self) -> None:
        if self.password == "":
            # CREATE ROLE ... PASSWORD '' stores no password ("empty string is not a valid
            # password, clearing password"), so only trust lets such a role in.
            object.__setattr__(self, "password", None)

    def scram_secret(self, salt: bytes) -> ScramSecret | None:
        if self.password is None:
            return None
        parsed = ScramSecret.parse(self.password)
        if parsed is not None:
            return parsed
        if self._is_md5():
            return None
        return ScramSecret.from_password(self.password, salt)

    def md5_secret(self) -> str | None:
        if self.password is None or ScramSecret.parse(self.password) is not None:
            return None
        return self.password if self._is_md5() else md5_secret(self.name, self.password)

    def _is_md5(self) -> bool:
        pw = self.password or ""
        return (
            len(pw) == 35 and pw.startswith("md5") and all(c in "0123456789abcdef" for c in pw[3:])
        )


class AuthFailedError(Exception):
    """Authentication failed; ``error`` is the FATAL the client gets before the close."""

    def __init__(self, error: ServerError) -> None:
        super().__init__(error.message)
        self.error = error


def _password_failed(user: str) -> AuthFailedError:
    return AuthFailedError(
        ServerError("FATAL", "28P01", f'password authentication failed for user "{user}"')
    )


def _empty_password() -> AuthFailedError:
    # recv_password_packet() in src/backend/libpq/auth.c: an ERROR during authentication,
    # which PostgreSQL sends as FATAL.
    return AuthFailedError(ServerError("FATAL", "28P01", "empty password returned by client"))


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison of two passwords or hashes as UTF-8 bytes
    (hmac.compare_digest refuses str with non-ASCII characters)."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )


def _protocol_violation(message: str, detail: str | None = None) -> AuthFailedError:
    return AuthFailedError(ServerError("FATAL", "08P01", message, detail))


FrontendAuthMessage = PasswordMessage | SASLInitialResponse | SASLResponse


class Exchange:
    """One authentication exchange. :attr:`first` is the request to send; feed each
    client answer to :meth:`respond`, which returns the next request (None when done:
    AuthenticationOk follows)."""

    first: Authentication

    def respond(self, message: FrontendAuthMessage) -> Authentication | None:
        raise NotImplementedError


class _Cleartext(Exchange):
    def __init__(self, user: str, known: User | None) -> None:
        self.first = AuthenticationCleartextPassword()
        self._user = user
        self._known = known

    def respond(self, message: FrontendAuthMessage) -> Authentication | None:
        if not isinstance(message, PasswordMessage):
            raise _protocol_violation("expected password response")
        if not message.password:
            raise _empty_password()
        known = self._known
        if known is None or known.password is None:
            raise _password_failed(self._user)
        scram = ScramSecret.parse(known.password)
        if scram is not None:
            ok = _same(
                ScramSecret.from_password(message.password, scram.salt, scram.iterations).render(),
                scram.render(),
            )
        elif known.md5_secret() == known.password:  # only an md5 secret is stored
            ok = _same(md5_secret(self._user, message.password), known.password)
        else:
            ok = _same(message.password, known.password)
        if not ok:
            raise _password_failed(self._user)
        return None


class _Md5(Exchange):
    def __init__(self, user: str, secret: str | None, salt: bytes) -> None:
        self.first = AuthenticationMD5Password(salt)
        self._user = user
        self._secret = secret
        self._salt = salt

    def respond(self, message: FrontendAuthMessage) -> Authentication | None:
        if not isinstance(message, PasswordMessage):
            raise _protocol_violation("expected password response")
        if not message.password:
            raise _empty_password()
        if self._secret is None:
            raise _password_failed(self._user)
        expected = "md5" + hashlib.md5(self._secret[3:].encode("ascii") + self._salt).hexdigest()
        if not _same(message.password, expected):
            raise _password_failed(self._user)
        return None


class _Scram(Exchange):
    """SCRAM-SHA-256 from the server's side (``auth-scram.c``)."""

    def __init__(self, user: str, secret: ScramSecret | None, nonce: str, mock: bool) -> None:
        self.first = AuthenticationSASL((SCRAM_SHA_256,))
        self._user = user
        self._secret = secret
        self._server_nonce = nonce
        self._mock = mock  # unknown role or no usable secret: fail at the end
        self._client_first_bare = b""
        self._server_first = b""
        self._gs2_header = b""
        self._nonce = ""
        self._step = 0

    def respond(self, message: FrontendAuthMessage) -> Authentication | None:
        if self._step == 0:
            return self._client_first(message)
        return self._client_final(message)

    def _client_first(self, message: FrontendAuthMessage) -> Authentication:
        if not isinstance(message, SASLInitialResponse):
            raise _protocol_violation("expected SASL response")
        if message.mechanism != SCRAM_SHA_256:
            raise _protocol_violation("client selected an invalid SASL authentication mechanism")
        data = message.data or b""
        # gs2-header: cbind-flag "," [authzid] "," then client-first-message-bare.
        flag, sep1, rest = data.partition(b",")
        authzid, sep2, bare = rest.partition(b",")
        if not sep1 or not sep2 or flag not in (b"n", b"y"):
            if flag.startswith(b"p="):
                raise _protocol_violation(
                    "malformed SCRAM message",
                    "The client selected SCRAM-SHA-256 without channel binding, but the SCRAM "
                    "message includes channel binding data.",
                )
            raise _protocol_violation("malformed SCRAM message", "Unexpected channel-binding flag.")
        if authzid:
            raise _protocol_violation("client uses authorization identity, but it is not supported")
        attrs = parse_attributes(bare)
        if attrs is None or len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise _protocol_violation("malformed SCRAM message")
        # attrs[0] is the SCRAM user name: PostgreSQL ignores it (the startup packet's counts).
        client_nonce = attrs[1][1]
        if not client_nonce:
            raise _protocol_violation("malformed SCRAM message")
        self._gs2_header = flag + b"," + authzid + b","
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        assert self._secret is not None
        self._server_first = (
            f"r={self._nonce},s={base64.b64encode(self._secret.salt).decode()},"
            f"i={self._secret.iterations}"
        ).encode()
        self._step = 1
        return AuthenticationSASLContinue(self._server_first)

    def _client_final(self, message: FrontendAuthMessage) -> Authentication:
        if not isinstance(message, SASLResponse):
            raise _protocol_violation("expected SASL response")
        attrs = parse_attributes(message.data)
        if attrs is None or len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise _protocol_violation("malformed SCRAM message")
        if attrs[-1][0] != "p":
            raise _protocol_violation("malformed SCRAM message", "Proof missing.")
        if base64.b64encode(self._gs2_header).decode() != attrs[0][1]:
            raise _protocol_violation(
                "SCRAM channel binding check failed"
                if self._gs2_header.startswith(b"y")
                else "unexpected SCRAM channel-binding attribute in client-final-message"
            )
        if attrs[1][1] != self._nonce:
            raise _protocol_violation("malformed SCRAM message", "Nonce does not match.")
        try:
            proof = base64.b64decode(attrs[-1][1], validate=True)
        except ValueError:
            raise _protocol_violation("malformed SCRAM message") from None
        secret = self._secret
        assert secret is not None
        without_proof = message.data[: message.data.rindex(b",p=")]
        auth_message = self._client_first_bare + b"," + self._server_first + b"," + without_proof
        signature = hmac_sha256(secret.stored_key, auth_message)
        if self._mock or len(proof) != len(signature):
            raise _password_failed(self._user)
        if not hmac.compare_digest(stored_key(xor(proof, signature)), secret.stored_key):
            raise _password_failed(self._user)
        server_signature = hmac_sha256(secret.server_key, auth_message)
        self._step = 2
        return AuthenticationSASLFinal(b"v=" + base64.b64encode(server_signature))


def start_exchange(
    method: AuthMethod,
    user: str,
    users: Mapping[str, User],
    random_bytes: Callable[[int], bytes],
) -> Exchange | None:
    """The exchange for ``method``, or None for ``trust`` (AuthenticationOk at once)."""
    if method == "trust":
        return None
    known = users.get(user)
    if method == "password":
        return _Cleartext(user, known)
    if method == "md5" and known is not None and known.md5_secret() is not None:
        return _Md5(user, known.md5_secret(), random_bytes(4))
    # scram-sha-256, or md5 for a role that only has a SCRAM secret.
    salt = random_bytes(16)
    secret = known.scram_secret(salt) if known is not None else None
    nonce = base64.b64encode(random_bytes(18)).decode("ascii")
    if method == "md5" and known is not None and known.password is None:
        secret = None
    mock = secret is None
    if secret is None:
        secret = ScramSecret(4096, salt, b"\0" * 32, b"\0" * 32)
    return _Scram(user, secret, nonce, mock)
