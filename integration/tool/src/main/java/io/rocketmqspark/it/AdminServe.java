package io.rocketmqspark.it;

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
        Served.loop(line -> {
            MQAdminStartup.main0(line, null);
            return true;
        });
        System.exit(0);
    }
}
