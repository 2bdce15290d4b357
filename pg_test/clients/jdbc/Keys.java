// JDBC and idgen (docs/clients.md): the extension, the table with DEFAULT snowflake_next() and
// uuid_v7(), rows inserted one by one and in a batch, the keys the database made read back with
// getGeneratedKeys(). Prints one JSON line. Debian's driver (libpostgresql-jdbc-java).
//   java -cp .:/usr/share/java/postgresql.jar Keys <port> <database>
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

public class Keys {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/" + args[1] + "?user=postgres";
        try (Connection conn = DriverManager.getConnection(url)) {
            try (Statement s = conn.createStatement()) {
                s.execute("CREATE EXTENSION IF NOT EXISTS idgen");  // the functions the DEFAULTs call
                s.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_next(),"
                        + " ref uuid NOT NULL DEFAULT uuid_v7(), customer text NOT NULL)");
            }
            String insert = "INSERT INTO orders (customer) VALUES (?)";
            // one row: name the generated columns, and the driver adds RETURNING id, ref
            long id;
            String ref;
            try (PreparedStatement ps = conn.prepareStatement(insert, new String[] {"id", "ref"})) {
                ps.setString(1, "ada");
                ps.executeUpdate();
                try (ResultSet keys = ps.getGeneratedKeys()) {
                    keys.next();
                    id = keys.getLong("id");
                    ref = keys.getObject("ref").toString();
                }
            }
            // a batch: every row's key
            List<Long> batch = new ArrayList<>();
            try (PreparedStatement ps = conn.prepareStatement(insert, new String[] {"id"})) {
                for (int i = 0; i < 1000; i++) {
                    ps.setString(1, "c" + i);
                    ps.addBatch();
                }
                ps.executeBatch();
                try (ResultSet keys = ps.getGeneratedKeys()) {
                    while (keys.next()) {
                        batch.add(keys.getLong(1));
                    }
                }
            }
            System.out.println("{\"one\": [" + id + "], \"ref\": \"" + ref + "\", \"batch\": " + batch
                    + ", \"driver\": \"" + conn.getMetaData().getDriverVersion() + "\"}");
        }
    }
}
