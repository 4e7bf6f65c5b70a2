// Command pgwire-mock-go-client streams a logical replication slot with jackc/pgconn, the
// connection library that github.com/jackc/pglogrepl is built on.
//
// pglogrepl itself is not packaged by Debian and cannot be fetched in this project's
// build environment, so this program does by hand what pglogrepl does: IDENTIFY_SYSTEM,
// START_REPLICATION over a simple Query, then CopyData messages whose XLogData ('w') and
// primary keepalive ('k') headers it parses, answering with standby status updates ('r').
// It acknowledges like pglogrepl's example program: write = flush = apply = wal_start of the
// last XLogData plus the length of its payload.
//
// It stops after -messages XLogData messages, after one starting at or after -until-lsn, or at
// a keepalive whose wal_end is at or past -until-keepalive (nothing before it is left to send,
// as pg_recvlogical --endpos decides).
//
// Output: one line per XLogData, "<wal_start as X/Y> <payload hex>", on stdout; then
// "acknowledged X/Y" on stderr. Each keepalive that comes before the first XLogData (and does
// not end the run) is reported on stderr as "keepalive <wal_end as X/Y>". Errors: "ERROR <SQLSTATE> <message>" on stderr, exit 1.
package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgproto3/v2"
)

// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01 00:00:00 UTC).
const pgEpochOffsetMicros = 946684800 * 1000000

type options struct {
	dsn            string
	host           string
	port           int
	user           string
	dbname         string
	slot           string
	publication    string
	protoVersion   int
	startLSN       string
	messages       int
	untilLSN       string
	untilKeepalive string
	idleTimeout    time.Duration
	statusInterval time.Duration
}

// fail prints the error the way the harness parses it and exits 1.
func fail(err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		fmt.Fprintf(os.Stderr, "ERROR %s %s\n", pgErr.Code, pgErr.Message)
	} else {
		fmt.Fprintf(os.Stderr, "ERROR - %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	}
	os.Exit(1)
}

func parseLSN(s string) (uint64, error) {
	var hi, lo uint32
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		return 0, fmt.Errorf("bad LSN %q: %w", s, err)
	}
	return uint64(hi)<<32 | uint64(lo), nil
}

func formatLSN(lsn uint64) string {
	return fmt.Sprintf("%X/%X", uint32(lsn>>32), uint32(lsn))
}

func pgNow() uint64 {
	return uint64(time.Now().UnixMicro() - pgEpochOffsetMicros)
}

func connString(o options) string {
	if o.dsn != "" {
		if strings.Contains(o.dsn, "://") {
			sep := "?"
			if strings.Contains(o.dsn, "?") {
				sep = "&"
			}
			return o.dsn + sep + url.Values{"replication": {"database"}}.Encode()
		}
		return o.dsn + " replication=database"
	}
	parts := []string{"replication=database"}
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"='"+strings.ReplaceAll(v, "'", "\\'")+"'")
		}
	}
	add("host", o.host)
	if o.port != 0 {
		add("port", fmt.Sprint(o.port))
	}
	add("user", o.user)
	add("dbname", o.dbname)
	return strings.Join(parts, " ")
}

// quoteIdent and quoteLiteral follow PostgreSQL's rules for replication commands.
func quoteIdent(s string) string   { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func sendStatus(ctx context.Context, conn *pgconn.PgConn, pos uint64, reply bool) error {
	buf := make([]byte, 34)
	buf[0] = 'r'
	binary.BigEndian.PutUint64(buf[1:], pos)  // written
	binary.BigEndian.PutUint64(buf[9:], pos)  // flushed
	binary.BigEndian.PutUint64(buf[17:], pos) // applied
	binary.BigEndian.PutUint64(buf[25:], pgNow())
	if reply {
		buf[33] = 1
	}
	return conn.SendBytes(ctx, (&pgproto3.CopyData{Data: buf}).Encode(nil))
}

// startReplication sends START_REPLICATION and waits for CopyBothResponse, or returns the
// server's error after reading up to ReadyForQuery (the connection stays usable).
func startReplication(ctx context.Context, conn *pgconn.PgConn, sql string) error {
	if err := conn.SendBytes(ctx, (&pgproto3.Query{String: sql}).Encode(nil)); err != nil {
		return err
	}
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.CopyBothResponse:
			return nil
		case *pgproto3.ErrorResponse:
			pgErr := pgconn.ErrorResponseToPgError(m)
			for {
				msg, err := conn.ReceiveMessage(ctx)
				if err != nil {
					return pgErr
				}
				if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
					return pgErr
				}
			}
		case *pgproto3.NoticeResponse, *pgproto3.ParameterStatus:
		default:
			return fmt.Errorf("unexpected %T in response to START_REPLICATION", msg)
		}
	}
}

// finish sends CopyDone and reads the server's CopyDone, CommandCompletes and ReadyForQuery.
func finish(ctx context.Context, conn *pgconn.PgConn) error {
	if err := conn.SendBytes(ctx, (&pgproto3.CopyDone{}).Encode(nil)); err != nil {
		return err
	}
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.ReadyForQuery:
			return nil
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		}
	}
}

func run(o options) error {
	ctx := context.Background()
	var until, untilKeepalive uint64
	if o.untilLSN != "" {
		var err error
		if until, err = parseLSN(o.untilLSN); err != nil {
			return err
		}
	}
	if o.untilKeepalive != "" {
		var err error
		if untilKeepalive, err = parseLSN(o.untilKeepalive); err != nil {
			return err
		}
	}
	start, err := parseLSN(o.startLSN)
	if err != nil {
		return err
	}
	connectCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := pgconn.Connect(connectCtx, connString(o))
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())

	if _, err := conn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll(); err != nil {
		return err
	}
	sql := fmt.Sprintf(
		"START_REPLICATION SLOT %s LOGICAL %s (proto_version '%d', publication_names %s)",
		quoteIdent(o.slot), formatLSN(start), o.protoVersion,
		quoteLiteral(quoteIdent(o.publication)),
	)
	if err := startReplication(ctx, conn, sql); err != nil {
		return err
	}

	var acked uint64
	seen := 0
	reached := false
	lastData := time.Now()
	nextStatus := time.Now().Add(o.statusInterval)
	for {
		if o.messages > 0 && seen >= o.messages || reached {
			break
		}
		if time.Since(lastData) >= o.idleTimeout {
			if o.messages > 0 || until != 0 || untilKeepalive != 0 {
				return fmt.Errorf("idle for %s after %d XLogData messages", o.idleTimeout, seen)
			}
			break
		}
		if time.Now().After(nextStatus) {
			if err := sendStatus(ctx, conn, acked, false); err != nil {
				return err
			}
			nextStatus = time.Now().Add(o.statusInterval)
		}
		recvCtx, cancel := context.WithDeadline(ctx, nextStatus)
		msg, err := conn.ReceiveMessage(recvCtx)
		cancel()
		if pgconn.Timeout(err) {
			continue
		}
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			data := m.Data
			switch {
			case len(data) >= 25 && data[0] == 'w':
				walStart := binary.BigEndian.Uint64(data[1:9])
				payload := data[25:]
				fmt.Printf("%s %s\n", formatLSN(walStart), hex.EncodeToString(payload))
				seen++
				lastData = time.Now()
				acked = walStart + uint64(len(payload))
				reached = until != 0 && walStart >= until
			case len(data) == 18 && data[0] == 'k':
				walEnd := binary.BigEndian.Uint64(data[1:9])
				if untilKeepalive != 0 && walEnd >= untilKeepalive {
					reached = true
				} else if seen == 0 {
					fmt.Fprintf(os.Stderr, "keepalive %s\n", formatLSN(walEnd))
				}
				if data[17] != 0 {
					if err := sendStatus(ctx, conn, acked, false); err != nil {
						return err
					}
					nextStatus = time.Now().Add(o.statusInterval)
				}
			default:
				return fmt.Errorf("unexpected CopyData %q", data[:1])
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		case *pgproto3.CopyDone, *pgproto3.CommandComplete:
			return errors.New("server ended the stream")
		}
	}
	if err := sendStatus(ctx, conn, acked, false); err != nil {
		return err
	}
	if err := finish(ctx, conn); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "acknowledged %s\n", formatLSN(acked))
	return nil
}

func main() {
	var o options
	flag.StringVar(&o.dsn, "dsn", "", "libpq connection string or URI (instead of -host ... -dbname)")
	flag.StringVar(&o.host, "host", "", "server host")
	flag.IntVar(&o.port, "port", 0, "server port")
	flag.StringVar(&o.user, "user", "", "user name (password: $PGPASSWORD)")
	flag.StringVar(&o.dbname, "dbname", "", "database name")
	flag.StringVar(&o.slot, "slot", "", "logical replication slot (required)")
	flag.StringVar(&o.publication, "publication", "", "publication name (required)")
	flag.IntVar(&o.protoVersion, "proto-version", 1, "pgoutput proto_version")
	flag.StringVar(&o.startLSN, "start-lsn", "0/0", "start position")
	flag.IntVar(&o.messages, "messages", 0, "stop after this many XLogData messages")
	flag.StringVar(&o.untilLSN, "until-lsn", "", "stop after an XLogData starting at or after this LSN")
	flag.StringVar(&o.untilKeepalive, "until-keepalive", "", "stop at a keepalive whose wal_end is at or after this LSN (pg_recvlogical --endpos)")
	flag.DurationVar(&o.idleTimeout, "idle-timeout", 10*time.Second, "give up after this long without XLogData")
	flag.DurationVar(&o.statusInterval, "status-interval", 10*time.Second, "standby status update interval")
	flag.Parse()
	if o.slot == "" || o.publication == "" {
		fmt.Fprintln(os.Stderr, "ERROR - -slot and -publication are required")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fail(err)
	}
}
