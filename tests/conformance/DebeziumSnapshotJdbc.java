// What a Debezium PostgreSQL snapshot asks through pgjdbc, in Debezium's order, printed as
// the client sees it. Run by tests/conformance/test_debezium_snapshot_jdbc.py with Java's
// single-file source launcher against real PostgreSQL and against pgwire-mock.
//
// Arguments: URL SCHEMA SNAPSHOT TABLE... (SNAPSHOT "-" = no exported snapshot to import).
// Output: one line per observation, "STEP <what>", then "FIELDS" (the RowDescription:
// type OID/typmod/length@table OID.column number; pgjdbc's own for the result sets it
// builds, getColumns'), "COLS" (labels and JDBC types), "ROW", "ERROR <sqlstate> <message>"
// or "OK" lines. Values are printed with Java escapes for control characters.
//
// The steps follow Debezium's PostgresSnapshotChangeEventSource and JdbcConnection
// (debezium-connector-postgres, debezium-connector-common): the snapshot transaction
// (autocommit off, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; \nSET TRANSACTION
// SNAPSHOT '…';"), getAllTableIds (getTables with TABLE and PARTITIONED TABLE),
// readTableStructure's readSchema for the schema (getTables with VIEW, MATERIALIZED VIEW and
// TABLE, getColumns of the schema, getPrimaryKeys, getIndexInfo(unique, approximate) when
// there is no primary key), PostgresConnection.readReplicaIdentityInfo, then "SELECT <quoted columns> FROM
// <quoted table>" per table, and the commit.
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

public class DebeziumSnapshotJdbc {
    static String show(String s) {
        if (s == null) {
            return "NULL";
        }
        StringBuilder b = new StringBuilder("'");
        for (char c : s.toCharArray()) {
            if (c == '\n') {
                b.append("\\n");
            } else if (c == '\t') {
                b.append("\\t");
            } else if (c == '\\') {
                b.append("\\\\");
            } else if (c == '\'') {
                b.append("\\'");
            } else {
                b.append(c);
            }
        }
        return b.append("'").toString();
    }

    // The RowDescription behind a result set (pgjdbc keeps it in PgResultSet.fields): type
    // OID, typmod, length, table OID and column number of each field.
    static String described(ResultSet rs) throws SQLException {
        try {
            java.lang.reflect.Field f = org.postgresql.jdbc.PgResultSet.class.getDeclaredField("fields");
            f.setAccessible(true);
            StringBuilder b = new StringBuilder("FIELDS");
            for (org.postgresql.core.Field field : (org.postgresql.core.Field[]) f.get(rs.unwrap(org.postgresql.jdbc.PgResultSet.class))) {
                b.append(' ').append(field.getOID()).append('/').append(field.getMod()).append('/')
                        .append(field.getLength()).append('@').append(field.getTableOid()).append('.')
                        .append(field.getPositionInTable());
            }
            return b.toString();
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    static void print(ResultSet rs) throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        System.out.println(described(rs));
        StringBuilder cols = new StringBuilder("COLS");
        for (int i = 1; i <= md.getColumnCount(); i++) {
            // getColumnTypeName is left out: it makes pgjdbc read pg_attribute about the
            // result's columns (isAutoIncrement), which Debezium's snapshot does not do.
            cols.append(' ').append(md.getColumnLabel(i)).append(':').append(md.getColumnType(i));
        }
        System.out.println(cols);
        while (rs.next()) {
            StringBuilder row = new StringBuilder("ROW");
            for (int i = 1; i <= md.getColumnCount(); i++) {
                row.append(' ').append(show(rs.getString(i)));
            }
            System.out.println(row);
        }
        rs.close();
    }

    interface Step {
        void run() throws SQLException;
    }

    static void step(Connection conn, String what, Step body) throws SQLException {
        System.out.println("STEP " + what);
        try {
            body.run();
        } catch (SQLException e) {
            System.out.println("ERROR " + e.getSQLState() + " " + show(e.getMessage()));
            if (!conn.getAutoCommit()) {
                conn.rollback();
            }
        }
    }

    static String quoted(String name) {
        return "\"" + name.replace("\"", "\"\"") + "\"";
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        String schema = args[1];
        String snapshot = args[2];
        List<String> tables = new ArrayList<>();
        for (int i = 3; i < args.length; i++) {
            tables.add(args[i]);
        }
        try (Connection conn = DriverManager.getConnection(url)) {
            conn.setAutoCommit(false);
            try (Statement st = conn.createStatement()) {
                String begin = snapshot.equals("-")
                        ? "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;"
                        : "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; \nSET TRANSACTION SNAPSHOT '"
                                + snapshot + "';";
                step(conn, "transaction", () -> {
                    st.execute(begin);
                    System.out.println("OK");
                });
            }
            DatabaseMetaData md = conn.getMetaData();
            String catalog = conn.getCatalog();
            step(conn, "getAllTableIds", () -> print(md.getTables(catalog, null, "%",
                    new String[]{"TABLE", "PARTITIONED TABLE"})));
            step(conn, "readSchema getTables", () -> print(md.getTables(catalog, schema, null,
                    new String[]{"VIEW", "MATERIALIZED VIEW", "TABLE"})));
            step(conn, "readSchema getColumns", () -> print(md.getColumns(catalog, schema, null, null)));
            for (String table : tables) {
                step(conn, "getColumns " + table, () -> print(md.getColumns(catalog, schema, table, null)));
                boolean[] keyed = {false};
                step(conn, "getPrimaryKeys " + table, () -> {
                    ResultSet rs = md.getPrimaryKeys(catalog, schema, table);
                    keyed[0] = rs.isBeforeFirst();
                    print(rs);
                });
                if (!keyed[0]) { // readPrimaryKeyOrUniqueIndexNames
                    step(conn, "getIndexInfo " + table, () -> print(md.getIndexInfo(catalog, schema, table, true, true)));
                }
                step(conn, "readReplicaIdentityInfo " + table, () -> {
                    try (PreparedStatement ps = conn.prepareStatement(
                            "SELECT relreplident FROM pg_catalog.pg_class c "
                                    + "LEFT JOIN pg_catalog.pg_namespace n ON c.relnamespace=n.oid "
                                    + "WHERE n.nspname=? and c.relname=?")) {
                        ps.setString(1, schema);
                        ps.setString(2, table);
                        print(ps.executeQuery());
                    }
                });
            }
            for (String table : tables) {
                List<String> columns = new ArrayList<>();
                try (ResultSet rs = md.getColumns(catalog, schema, table, null)) {
                    while (rs.next()) {
                        columns.add(quoted(rs.getString(4)));
                    }
                } catch (SQLException e) {
                    columns.add("*");
                }
                String select = "SELECT " + String.join(", ", columns) + " FROM " + quoted(schema) + "."
                        + quoted(table);
                step(conn, "snapshot " + table, () -> {
                    try (Statement st = conn.createStatement()) {
                        st.setFetchSize(10240);
                        print(st.executeQuery(select));
                    }
                });
            }
            step(conn, "commit", () -> {
                conn.commit();
                System.out.println("OK");
            });
        }
    }
}
