import java.nio.ByteBuffer;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.postgresql.PGConnection;
import org.postgresql.PGProperty;
import org.postgresql.replication.LogSequenceNumber;
import org.postgresql.replication.PGReplicationStream;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

/**
 * Streams a logical replication slot with pgjdbc's replication API, the way CDC tools built
 * on pgjdbc do, for the pgwire-mock conformance suite.
 *
 * <p>Arguments: {@code --host H --port P --user U --dbname D --slot S --publication PUB
 * --proto-version N [--start-lsn X/Y] [--messages N] [--until-lsn X/Y] [--until-keepalive X/Y]
 * [--idle-timeout SECONDS] [--status-interval SECONDS]}; the password comes from
 * {@code $PGPASSWORD}. It stops after N XLogData messages, after one starting at or after
 * {@code --until-lsn}, or once the server's keepalives reach {@code --until-keepalive} (nothing
 * before that position is left to send, as {@code pg_recvlogical --endpos} decides; pgjdbc
 * moves {@code getLastReceiveLSN()} to a keepalive's position when it is further).
 *
 * <p>Prints one line per XLogData on stdout, {@code <wal_start as X/Y> <payload hex>}. At the
 * end it acknowledges the last message's wal_start (setAppliedLSN, setFlushedLSN,
 * forceUpdateStatus), closes the stream and prints {@code acknowledged X/Y} on stderr. Errors:
 * {@code ERROR <SQLSTATE> <message>} on stderr and exit status 1.
 */
public final class PgjdbcReplication {
  private PgjdbcReplication() {}

  private static Map<String, String> parseArgs(String[] args) {
    Map<String, String> out = new HashMap<>();
    for (int i = 0; i < args.length; i += 2) {
      if (!args[i].startsWith("--") || i + 1 >= args.length) {
        usage("bad argument: " + args[i]);
      }
      out.put(args[i].substring(2), args[i + 1]);
    }
    for (String required : new String[] {"host", "port", "user", "dbname", "slot", "publication"}) {
      if (!out.containsKey(required)) {
        usage("missing --" + required);
      }
    }
    return out;
  }

  private static void usage(String why) {
    System.err.println("ERROR - " + why);
    System.exit(2);
  }

  private static String hex(ByteBuffer buffer) {
    StringBuilder sb = new StringBuilder(buffer.remaining() * 2);
    while (buffer.hasRemaining()) {
      sb.append(String.format("%02x", buffer.get() & 0xff));
    }
    return sb.toString();
  }

  public static void main(String[] argv) {
    Map<String, String> args = parseArgs(argv);
    try {
      run(args);
    } catch (SQLException e) {
      String state = e.getSQLState() == null ? "-" : e.getSQLState();
      String message = e.getMessage();
      if (e instanceof PSQLException) {
        ServerErrorMessage server = ((PSQLException) e).getServerErrorMessage();
        if (server != null && server.getMessage() != null) {
          message = server.getMessage();
        }
      }
      System.err.println("ERROR " + state + " " + message.replace('\n', ' '));
      System.exit(1);
    } catch (Exception e) {
      System.err.println("ERROR - " + String.valueOf(e).replace('\n', ' '));
      System.exit(1);
    }
  }

  private static void run(Map<String, String> args) throws Exception {
    String url =
        "jdbc:postgresql://" + args.get("host") + ":" + args.get("port") + "/" + args.get("dbname");
    Properties props = new Properties();
    PGProperty.USER.set(props, args.get("user"));
    String password = System.getenv("PGPASSWORD");
    if (password != null) {
      PGProperty.PASSWORD.set(props, password);
    }
    PGProperty.ASSUME_MIN_SERVER_VERSION.set(props, "9.4");
    PGProperty.REPLICATION.set(props, "database");
    PGProperty.PREFER_QUERY_MODE.set(props, "simple");

    int protoVersion = Integer.parseInt(args.getOrDefault("proto-version", "1"));
    int wanted = Integer.parseInt(args.getOrDefault("messages", "0"));
    LogSequenceNumber until =
        args.containsKey("until-lsn") ? LogSequenceNumber.valueOf(args.get("until-lsn")) : null;
    LogSequenceNumber untilKeepalive =
        args.containsKey("until-keepalive")
            ? LogSequenceNumber.valueOf(args.get("until-keepalive"))
            : null;
    long idleMillis = (long) (Double.parseDouble(args.getOrDefault("idle-timeout", "10")) * 1000);
    int statusSeconds = Integer.parseInt(args.getOrDefault("status-interval", "10"));

    try (Connection con = DriverManager.getConnection(url, props)) {
      PGConnection pg = con.unwrap(PGConnection.class);
      PGReplicationStream stream =
          pg.getReplicationAPI()
              .replicationStream()
              .logical()
              .withSlotName(args.get("slot"))
              .withStartPosition(LogSequenceNumber.valueOf(args.getOrDefault("start-lsn", "0/0")))
              .withSlotOption("proto_version", protoVersion)
              .withSlotOption("publication_names", args.get("publication"))
              .withStatusInterval(statusSeconds, TimeUnit.SECONDS)
              .start();
      int seen = 0;
      LogSequenceNumber last = null;
      long lastData = System.currentTimeMillis();
      while (true) {
        ByteBuffer msg = stream.readPending();
        if (msg == null) {
          if (untilKeepalive != null
              && Long.compareUnsigned(stream.getLastReceiveLSN().asLong(), untilKeepalive.asLong())
                  >= 0) {
            break;
          }
          if (System.currentTimeMillis() - lastData >= idleMillis) {
            if (wanted > 0 || until != null || untilKeepalive != null) {
              throw new IllegalStateException(
                  "idle for " + idleMillis + " ms after " + seen + " XLogData messages");
            }
            break;
          }
          TimeUnit.MILLISECONDS.sleep(5);
          continue;
        }
        lastData = System.currentTimeMillis();
        last = stream.getLastReceiveLSN();
        System.out.println(last.asString() + " " + hex(msg));
        seen++;
        if (wanted > 0 && seen >= wanted
            || until != null && Long.compareUnsigned(last.asLong(), until.asLong()) >= 0) {
          break;
        }
      }
      System.out.flush();
      if (last != null) {
        stream.setAppliedLSN(last);
        stream.setFlushedLSN(last);
        stream.forceUpdateStatus();
      }
      stream.close();
      System.err.println("acknowledged " + (last == null ? "0/0" : last.asString()));
    }
  }
}
