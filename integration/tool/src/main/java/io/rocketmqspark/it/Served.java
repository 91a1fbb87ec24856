package io.rocketmqspark.it;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

/**
 * The line protocol of a JVM that serves commands ({@code Tool serve}, {@code AdminServe}): a
 * command a line on stdin, its arguments separated by tabs; after its output, a newline and
 * {@code #END 0} (done) or {@code #END 1} (failed, its error on stderr), on stderr first, then on
 * stdout. The newline puts the end on a line of its own even after output that does not end its
 * last line; the reader takes it off again. Only the JDK here: AdminServe runs this on a release's
 * own classpath.
 */
final class Served {
    private static final String SEPARATOR = "\t";
    private static final String END = "#END ";

    /** One command: true when it ran, false when it failed (its error already on stderr). */
    interface Command {
        boolean run(String[] argv) throws Exception;
    }

    private Served() {}

    /**
     * Runs the commands on stdin one after another until stdin ends, each followed by its end
     * line. An Error ends the server after its end line: the JVM may be in no state for the next.
     */
    static void loop(Command command) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            int status = 0;
            try {
                if (!command.run(line.split(SEPARATOR, -1))) {
                    status = 1;
                }
            } catch (Exception e) {
                e.printStackTrace();
                status = 1;
            } catch (Error e) {
                e.printStackTrace();
                end(1);
                System.exit(1);
            }
            end(status);
        }
    }

    private static void end(int status) {
        System.err.print("\n" + END + status + "\n");
        System.err.flush();
        System.out.print("\n" + END + status + "\n");
        System.out.flush();
    }
}
