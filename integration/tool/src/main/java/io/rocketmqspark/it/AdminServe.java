package io.rocketmqspark.it;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * The release's own mqadmin, kept running: each line on stdin is one mqadmin command line, run by
 * {@code MQAdminStartup.main0} as {@code mqadmin} would run it, one after another in this JVM
 * ({@link Served} has the protocol). It runs on the classpath of the release under test with the
 * tool jar in front of it, of which it uses only this class and Served, so every command is that
 * release's. Ends when stdin does.
 */
public final class AdminServe {
    private AdminServe() {}

    public static void main(String[] argv) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            int status = 0;
            try {
                MQAdminStartup.main0(Served.arguments(line), null);
            } catch (Exception e) {
                e.printStackTrace();
                status = 1;
            } catch (Error e) {
                // The JVM may be in no state for the next command: this one fails, and the server ends.
                e.printStackTrace();
                Served.end(1);
                System.exit(1);
            }
            Served.end(status);
        }
        System.exit(0);
    }
}
