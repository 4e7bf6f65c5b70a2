"""pgwire-mock's codec: PostgreSQL logical replication and protocol 3.0 messages.

Pure and sans-IO: bytes in, message objects out, and back. Standard library only.
"""

from codec.errors import CodecError, DecodeError, EncodeError

__all__ = ["CodecError", "DecodeError", "EncodeError"]
