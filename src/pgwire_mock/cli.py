"""The ``pgwire-mock`` command line.

Every failure the user can cause (a missing file, malformed input, a bad option) ends
in one readable line on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import IO, NoReturn

from codec import CodecError
from codec.values import LSN
from pgwire_mock import __version__
from pgwire_mock.cli_common import CommandError
from pgwire_mock.describe import StreamDescriber
from pgwire_mock.recvlogical import TAGS as RECVLOGICAL_TAGS
from pgwire_mock.recvlogical import read_recvlogical
from pgwire_mock.streamfile import StreamFileError, read_stream

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _open_input(name: str) -> tuple[IO[bytes], str]:
    if name == "-":
        return sys.stdin.buffer, "<stdin>"
    try:
        return Path(name).open("rb"), name
    except OSError as err:
        raise CommandError(f"cannot read {name}: {err.strerror}") from None


def _entries(source: IO[bytes], name: str) -> Iterator[tuple[int | None, bytes]]:
    """(position, payload) of each message; pg_recvlogical's files carry no positions."""
    first = source.peek(1)[:1] if hasattr(source, "peek") else b""
    if first and first[0] in RECVLOGICAL_TAGS:
        for payload in read_recvlogical(source, name):
            yield None, payload
    else:
        for entry in read_stream(source, name):
            yield entry.lsn, entry.payload


def cmd_decode(args: argparse.Namespace) -> int:
    source, name = _open_input(args.file)
    describer = StreamDescriber()
    out = sys.stdout
    count = 0
    with source:
        try:
            for lsn, payload in _entries(source, name):
                count += 1
                message = describer.decode(payload)
                position = None if lsn is None else str(LSN(lsn))
                if args.json:
                    record = {"lsn": position, **describer.json(message)}
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
                else:
                    out.write(f"{position or '-'} {describer.text(message)}\n")
        except StreamFileError as err:
            raise CommandError(str(err)) from None
        except CodecError as err:
            raise CommandError(f"{name}: message {count}: {err}") from None
        except BrokenPipeError:
            raise  # stdout's reader went away: main() ends quietly
        except OSError as err:  # e.g. a directory, or an I/O error mid-file
            raise CommandError(f"cannot read {name}: {err.strerror}") from None
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pgwire-mock",
        description="PostgreSQL logical replication from both sides: decode, capture and "
        "check pgoutput streams.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    decode = commands.add_parser(
        "decode",
        help="print a captured pgoutput stream, one line per message",
        description="Decode a pgoutput stream file (JSON Lines from 'capture' or 'record', "
        "the raw CopyData bytes a walsender sends, or what 'pg_recvlogical -P pgoutput "
        "-f FILE' writes) and print one line per message in test_decoding's style, or "
        "JSON lines with --json. Each line starts with the message's WAL position; "
        "pg_recvlogical's files hold none, so theirs start with '-' (null in JSON).",
    )
    decode.add_argument("file", metavar="FILE", help="stream file, or - for standard input")
    decode.add_argument("--json", action="store_true", help="print one JSON object per message")
    decode.set_defaults(run=cmd_decode)

    from pgwire_mock.serve import add_serve_command  # noqa: PLC0415 - keeps decode's start fast

    add_serve_command(commands)

    from pgwire_mock.record import add_record_command  # noqa: PLC0415 - as above

    add_record_command(commands)

    # Commands from packages that build on this one (conformance: capture, conformance)
    # register themselves, so pgwire_mock never imports them.
    for entry_point in sorted(entry_points(group="pgwire_mock.commands"), key=lambda e: e.name):
        entry_point.load()(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
    except CommandError as err:
        print(f"pgwire-mock {args.command}: {err}", file=sys.stderr)
        return EXIT_FAILURE
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): not an error worth a traceback.
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
