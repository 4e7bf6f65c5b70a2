"""``pgwire-mock synth``: write a synthetic stream as a recording ``serve`` can replay.

Registered through the ``pgwire_mock.commands`` entry point
(``synth = "pgwire_mock.synth.cli:add_command"``), so pgwire_mock.cli never imports it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from codec import CodecError
from codec.values import encode_text
from pgwire_mock.cli_common import CommandError, check_output
from pgwire_mock.synth.generator import Shard, StreamItem, Synth, SynthError
from pgwire_mock.synth.output import snapshot_lines, write_expected, write_recording
from pgwire_mock.synth.spec import SpecError, load_spec
from pgwire_mock.synth.state import StateDelta

__all__ = ["Progress", "add_command", "run_synth"]


def add_command(commands: Any) -> None:
    """Register ``pgwire-mock synth`` (called through the pgwire_mock.commands entry point)."""
    parser = commands.add_parser(
        "synth",
        help="generate a synthetic pgoutput stream from a spec",
        description="Generate a deterministic pgoutput change stream from a declarative "
        "spec (YAML or JSON) and write it as a JSON Lines recording that 'serve' can "
        "stream. Shard K/N of a run, concatenated in order with the other shards, is "
        "the single-process stream byte for byte. A spec whose tables have initial_rows "
        "(or with snapshot: true) starts the recording (shard 0) with the tables' "
        "snapshot, as 'pgwire-mock record --snapshot' writes one: 'serve' answers a "
        "subscriber's COPY with it, and the Spark source reads it as the initial state.",
    )
    parser.add_argument("--spec", required=True, type=Path, help="spec file (YAML or JSON)")
    parser.add_argument("--seed", required=True, type=int, help="seed (any integer)")
    parser.add_argument(
        "--changes", required=True, type=int, help="committed changes to generate (whole run)"
    )
    parser.add_argument("--out", required=True, help="recording to write (- for stdout)")
    parser.add_argument("--shard", default="0/1", help="write only shard K of N (0-based)")
    parser.add_argument(
        "--expected",
        type=Path,
        help="also write the expected final state, snapshot rows included (a mergeable "
        "delta with --shard)",
    )
    parser.set_defaults(run=run_synth)


class Progress:
    """One line on stderr: rewritten in place on a terminal, periodic lines otherwise."""

    def __init__(self, total: int, stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.total = total
        self.start = time.monotonic()
        self.last = 0.0
        self.every = 0.2 if self.tty else 10.0

    def update(self, blocks: int, events: int, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < self.every:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        pct = 100.0 * blocks / self.total if self.total else 100.0
        line = (
            f"synth: {pct:5.1f}% ({blocks}/{self.total} blocks), {events} events, "
            f"{events / elapsed:,.0f} events/s, {elapsed:.1f} s"
        )
        if self.tty:
            self.stream.write("\r" + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def run_synth(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.spec)
        shard = Shard.parse(args.shard)
        synth = Synth(spec, args.seed, args.changes)
    except (SpecError, SynthError) as err:
        raise CommandError(str(err)) from None
    check_output(args.out, "--out")
    if args.expected is not None:
        check_output(args.expected, "--expected")
    blocks = synth.shard_blocks(shard)
    first = shard.index == 0  # the shard that starts the stream: the snapshot is its
    delta = None
    if args.expected is not None:
        delta = synth.initial_delta() if first else StateDelta()
    progress = Progress(len(blocks))
    counted = [0, 0]  # blocks, events

    def events() -> Iterator[StreamItem]:
        for block in blocks:
            items = synth.block(block, delta)
            yield from items
            counted[0] += 1
            counted[1] += len(items)
            progress.update(counted[0], counted[1])

    try:
        with _open_output(args.out) as out:
            snapshot = snapshot_lines(synth) if first and spec.snapshot else ()
            write_recording(out, synth.meta(shard), events(), snapshot=snapshot)
        progress.update(counted[0], counted[1], final=True)
        if delta is not None:
            with _open_output(str(args.expected)) as out:
                if shard.count == 1:
                    write_expected(out, synth.expected_state(delta))
                else:
                    _write_delta(out, synth, shard, delta)
    except BrokenPipeError:
        raise  # the reader went away (`| head`): pgwire_mock.cli.main ends quietly
    except OSError as err:
        raise CommandError(f"cannot write {err.filename or 'output'}: {err.strerror}") from None
    except CodecError as err:  # pragma: no cover - the generator only encodes valid values
        raise CommandError(f"encoding failed: {err}") from None
    return 0


def _open_output(name: str) -> IO[str]:
    if name == "-":
        # A second handle on stdout, so that leaving ``with`` does not close sys.stdout.
        return open(sys.stdout.fileno(), "w", encoding="utf-8", closefd=False)
    return Path(name).open("w", encoding="utf-8")


def _write_delta(out: IO[str], synth: Synth, shard: Shard, delta: StateDelta) -> None:
    """A shard's delta: per table, whether it truncated, rows written, keys deleted.
    Applying the shards' files in order to empty tables gives the final state."""
    out.write(json.dumps({"meta": {**synth.meta(shard), "kind": "state-delta"}}) + "\n")
    for t in synth.tables:
        d = delta.tables.get(t.name)
        if d is None:
            continue
        key_oid = t.spec.columns[t.spec.key_index].type.oid
        if d.truncated:
            out.write(json.dumps({"table": t.name, "truncated": True}) + "\n")
        for kid in sorted(d.deleted):
            key = encode_text(key_oid, t.key.value(kid))
            out.write(json.dumps({"table": t.name, "deleted": key}) + "\n")
        names = [c.name for c in t.spec.columns]
        oids = [c.type.oid for c in t.spec.columns]
        for kid in sorted(d.rows):
            row = {
                n: None if v is None else encode_text(o, v)
                for n, o, v in zip(names, oids, d.rows[kid], strict=True)
            }
            out.write(json.dumps({"table": t.name, "row": row}, ensure_ascii=False) + "\n")
