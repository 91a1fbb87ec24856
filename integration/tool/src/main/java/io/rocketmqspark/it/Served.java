package io.rocketmqspark.it;

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

    private Served() {}

    static String[] arguments(String line) {
        return line.split(SEPARATOR, -1);
    }

    static void end(int status) {
        System.err.print("\n" + END + status + "\n");
        System.err.flush();
        System.out.print("\n" + END + status + "\n");
        System.out.flush();
    }
}
