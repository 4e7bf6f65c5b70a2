#!/usr/bin/env node
// Streams a logical replication slot with pg-logical-replication (LogicalReplicationService +
// PgoutputPlugin, on node-postgres) for the pgwire-mock conformance suite.
//
//   node replicate.js --host H --port P --user U --dbname D --slot S --publication PUB
//        --proto-version N [--start-lsn X/Y] [--messages N] [--until-lsn X/Y]
//        [--until-keepalive X/Y] [--idle-timeout SECONDS]
//
// It stops after N XLogData messages, after one starting at or after --until-lsn, or at the
// first keepalive ('heartbeat') whose position is at or past --until-keepalive (nothing before
// it is left to send, as pg_recvlogical --endpos decides).
// The password comes from $PGPASSWORD. One line per XLogData on stdout:
//   <wal_start as X/Y> <payload hex> <JSON of the library's decoded message>
// The library decodes pgoutput itself and only hands out the decoded form; the raw payload
// is caught on its way into PgoutputPlugin.parse. Every message printed is acknowledged with
// the library's acknowledge(lsn), which sends wal_start + 1 as write/flush/apply. At the end it
// prints "acknowledged X/Y" on stderr and exits 0. Each keepalive ('heartbeat') that comes
// before the first XLogData (and does not end the run) is reported on stderr as
// "keepalive <wal_end as X/Y>". Errors: "ERROR <SQLSTATE> <message>" on
// stderr, exit 1.
'use strict';

const { LogicalReplicationService, PgoutputPlugin } = require('pg-logical-replication');

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) usage(`bad argument: ${argv[i]}`);
    out[argv[i].slice(2)] = argv[i + 1];
  }
  for (const name of ['host', 'port', 'user', 'dbname', 'slot', 'publication']) {
    if (!(name in out)) usage(`missing --${name}`);
  }
  return out;
}

function usage(why) {
  process.stderr.write(`ERROR - ${why}\n`);
  process.exit(2);
}

function parseLsn(text) {
  const [hi, lo] = text.split('/');
  return (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`);
}

function formatLsn(value) {
  return `${(value >> 32n).toString(16).toUpperCase()}/${(value & 0xffffffffn)
    .toString(16)
    .toUpperCase()}`;
}

// JSON for the decoded messages: BigInt as text, bytes as hex, Dates as ISO text, and a
// relation inside a change as its identity only (its column parsers are functions).
function toJson(message) {
  return JSON.stringify(message, function replacer(key, value) {
    if (typeof value === 'bigint') return value.toString();
    if (value instanceof Uint8Array) return Buffer.from(value).toString('hex');
    if (value && value.type === 'Buffer' && Array.isArray(value.data)) {
      return Buffer.from(value.data).toString('hex');
    }
    if (key === 'relation' && value && typeof value === 'object' && this.tag !== 'relation') {
      return { relationOid: value.relationOid, schema: value.schema, name: value.name };
    }
    if (key === 'relations' && Array.isArray(value)) {
      return value.map((r) => ({ relationOid: r.relationOid, schema: r.schema, name: r.name }));
    }
    return value;
  });
}

function fail(err) {
  const code = err && err.code ? err.code : '-';
  const message = String((err && err.message) || err).replace(/\n/g, ' ');
  process.stderr.write(`ERROR ${code} ${message}\n`);
  process.exit(1);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const wanted = Number(args.messages || 0);
  const until = args['until-lsn'] ? parseLsn(args['until-lsn']) : null;
  const untilKeepalive = args['until-keepalive'] ? parseLsn(args['until-keepalive']) : null;
  const idleMs = Number(args['idle-timeout'] || 10) * 1000;

  const service = new LogicalReplicationService(
    {
      host: args.host,
      port: Number(args.port),
      user: args.user,
      database: args.dbname,
      password: process.env.PGPASSWORD,
    },
    // Acknowledge by hand: auto mode also acknowledges messages that arrive after the end
    // condition was met, before the connection is closed.
    { acknowledge: { auto: false, timeoutSeconds: 10 } },
  );
  const plugin = new PgoutputPlugin({
    protoVersion: Number(args['proto-version'] || 1),
    publicationNames: [args.publication],
  });
  let raw = null;
  const parse = plugin.parse.bind(plugin);
  plugin.parse = (buffer) => {
    raw = Buffer.from(buffer);
    return parse(buffer);
  };

  let seen = 0;
  let lastLsn = null;
  let finished = false;
  let settle;
  const done = new Promise((resolve, reject) => {
    settle = { resolve, reject };
  });
  let idleTimer = null;
  const armIdle = () => {
    clearTimeout(idleTimer);
    idleTimer = setTimeout(() => {
      if (wanted > 0 || until !== null || untilKeepalive !== null) {
        settle.reject(new Error(`idle for ${idleMs} ms after ${seen} XLogData messages`));
      } else {
        settle.resolve();
      }
    }, idleMs);
  };

  service.on('error', (err) => settle.reject(err));
  service.on('heartbeat', (lsn) => {
    if (finished) return;
    if (untilKeepalive !== null && parseLsn(lsn) >= untilKeepalive) {
      finished = true;
      settle.resolve();
    } else if (seen === 0) {
      process.stderr.write(`keepalive ${formatLsn(parseLsn(lsn))}\n`);
    }
  });
  service.on('data', (lsn, message) => {
    if (finished) return;
    process.stdout.write(`${lsn} ${raw.toString('hex')} ${toJson(message)}\n`);
    seen += 1;
    lastLsn = lsn;
    service.acknowledge(lsn);
    armIdle();
    if ((wanted > 0 && seen >= wanted) || (until !== null && parseLsn(lsn) >= until)) {
      finished = true;
      settle.resolve();
    }
  });

  armIdle();
  service
    .subscribe(plugin, args.slot, args['start-lsn'] || '0/00000000')
    .then(() => settle.reject(new Error('server ended the stream')))
    .catch((err) => settle.reject(err));
  try {
    await done;
  } finally {
    clearTimeout(idleTimer);
  }
  let acked = '0/0';
  if (lastLsn !== null) {
    // Already acknowledged in the handler; repeated so the last status update says it.
    await service.acknowledge(lastLsn);
    acked = formatLsn(parseLsn(lastLsn) + 1n);
  }
  // node-postgres ends a replication stream by destroying the socket (the START_REPLICATION
  // query never completes), and a reset can discard a status update the server has not
  // read yet: give it a moment to read the last one first.
  await new Promise((resolve) => setTimeout(resolve, 300));
  await service.stop();
  process.stderr.write(`acknowledged ${acked}\n`);
}

main().then(
  () => process.exit(0),
  (err) => fail(err),
);
