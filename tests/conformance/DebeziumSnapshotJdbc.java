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
        print(rs, null, 0, false);
    }

    // keep: print only the rows whose column keyColumn (a type name) is in it (null: every
    // row); masked: "?" for each non-null value (a transaction ID differs between servers).
    static void print(ResultSet rs, java.util.Set<String> keep, int keyColumn, boolean masked)
            throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        System.out.println(described(rs));
        StringBuilder cols = new StringBuilder("COLS");
        for (int i = 1; i <= md.getColumnCount(); i++) {
            // getColumnTypeName is left out: it makes pgjdbc read pg_attribute about the
            // result's columns (isAutoIncrement), which Debezium's snapshot does not do.
            cols.append(' ').append(md.getColumnLabel(i)).append(':').append(md.getColumnType(i));
        }
        System.out.println(cols);
        List<String> lines = new ArrayList<>();
        while (rs.next()) {
            if (keep != null && !keep.contains(rs.getString(keyColumn))) {
                continue;
            }
            StringBuilder row = new StringBuilder("ROW");
            for (int i = 1; i <= md.getColumnCount(); i++) {
                String value = rs.getString(i);
                row.append(' ').append(masked && value != null ? "?" : show(value));
            }
            lines.add(row.toString());
        }
        if (keep != null && keyColumn == 2) {
            // SQL_TYPES has no ORDER BY: the rows come in pg_type's heap order.
            java.util.Collections.sort(lines);
        }
        for (String line : lines) {
            System.out.println(line);
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
            // Debezium's TypeRegistry (connector start): the whole pg_type twice, then single
            // lookups. Of the whole-table reads only the rows of the captured tables' column
            // types are printed: the fake models those types, not all ~600 of pg_type.
            java.util.Set<String> types = new java.util.HashSet<>();
            for (String table : tables) {
                try (ResultSet rs = md.getColumns(catalog, schema, table, null)) {
                    while (rs.next()) {
                        types.add(rs.getString(6));
                    }
                }
            }
            types.add("int4");
            types.add("_int4");
            String sqlTypes = "SELECT t.oid AS oid, t.typname AS name, n.nspname AS schema_name, t.typelem AS element, t.typbasetype AS parentoid, t.typtypmod as modifiers, t.typcategory as category, e.values as enum_values "
                    + "FROM pg_catalog.pg_type t "
                    + "JOIN pg_catalog.pg_namespace n ON (t.typnamespace = n.oid) "
                    + "LEFT JOIN (SELECT t.enumtypid as id, array_agg(t.enumlabel) as values FROM pg_catalog.pg_enum t GROUP BY id) e ON (t.oid = e.id) "
                    + "WHERE n.nspname != 'pg_toast'";
            String typeDetails = "SELECT DISTINCT ON (typname) typname, typinput='array_in'::regproc, typtype, sp.r, pg_type.oid "
                    + "  FROM pg_catalog.pg_type "
                    + "  LEFT "
                    + "  JOIN (select ns.oid as nspoid, ns.nspname, r.r "
                    + "          from pg_namespace as ns "
                    + "          join ( select s.r, (current_schemas(false))[s.r] as nspname "
                    + "                   from generate_series(1, array_upper(current_schemas(false), 1)) as s(r) ) as r "
                    + "         using ( nspname ) "
                    + "       ) as sp "
                    + "    ON sp.nspoid = typnamespace "
                    + " ORDER BY typname, sp.r, pg_type.oid;";
            step(conn, "TypeRegistry prime", () -> {
                try (Statement st = conn.createStatement()) {
                    print(st.executeQuery(sqlTypes), types, 2, false);
                }
            });
            step(conn, "SqlTypeMapper", () -> {
                try (Statement st = conn.createStatement()) {
                    print(st.executeQuery(typeDetails), types, 1, false);
                }
            });
            step(conn, "TypeRegistry name lookup", () -> {
                try (PreparedStatement ps = conn.prepareStatement(sqlTypes + " AND t.typname = ?")) {
                    ps.setString(1, "jsonb");
                    print(ps.executeQuery());
                }
            });
            step(conn, "TypeRegistry OID lookup", () -> {
                try (PreparedStatement ps = conn.prepareStatement(sqlTypes + " AND t.oid = ?")) {
                    ps.setInt(1, 2950);
                    print(ps.executeQuery());
                }
            });
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
            step(conn, "currentTransactionId", () -> {
                try (Statement st = conn.createStatement()) {
                    print(st.executeQuery("select (case pg_is_in_recovery() when 't' then '0'::xid8 else pg_current_xact_id() end) AS pg_current_txid"), null, 0, true);
                }
            });
            step(conn, "commit", () -> {
                conn.commit();
                System.out.println("OK");
            });
        }
    }
}
