package io.rocketmqspark.it;

import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The official producer's throughput, the yardstick of the sink's benchmark: {@code --threads}
 * threads each send their share of {@code --messages} bodies of {@code --body-size} random bytes,
 * in one of three modes,
 *
 * <ul>
 *   <li>{@code sync}: one message per {@code send}, waiting for each answer;
 *   <li>{@code async}: one message per {@code send} with a callback, at most {@code --window}
 *       sends in flight per thread (a Semaphore);
 *   <li>{@code batch}: {@code send(List)} of as many messages as fit in {@code --batch-bytes}
 *       (the sink's {@code batchMaxBytes}), waiting for each answer;
 *   <li>{@code transaction}: a {@code TransactionMQProducer} per thread, one
 *       {@code sendMessageInTransaction} at a time (a half, waited for, then a local transaction
 *       that commits, then the client's one-way END_TRANSACTION); timed until the topic's queues
 *       hold every message, since a one-way END is not answered.
 * </ul>
 *
 * <p>Each thread has its own {@code DefaultMQProducer} (its own instance name, so its own client
 * instance and connections), as each of the sink's tasks has its own. The time runs from the first
 * send to the last answer; the CPU is the JVM's own over the same span. A failed send is counted,
 * never retried by hand, and makes the command fail after it printed its line:
 * {@code {"mode":..,"threads":..,"messages":..,"failed":..,"notOk":..,"seconds":..,"cpuSeconds":..}}.
 */
final class ProduceBench {
    private static final int SEND_TIMEOUT_MS = 10_000;
    private static final double NS_PER_S = 1e9;
    // Bodies a thread cycles through: distinct enough, and built before the clock starts.
    private static final int BODY_POOL = 64;
    // A message's bytes in a batch besides its body: the fixed fields (MessageDecoder.encodeMessages)
    // and the properties the client gives it (its unique id), rounded up.
    private static final int BATCH_RECORD_FIXED = 22;
    private static final int BATCH_PROPERTIES_ESTIMATE = 64;
    private static final long DRAIN_TIMEOUT_S = 600;
    private static final String TRANSACTION = "transaction";
    private static final long VISIBLE_POLL_MS = 50;

    private ProduceBench() {}

    static void run(Tool.Args args) throws Exception {
        String topic = args.required("topic");
        String mode = args.get("mode", "sync");
        if (!List.of("sync", "async", "batch", TRANSACTION).contains(mode)) {
            throw new IllegalArgumentException("--mode wants sync, async, batch or transaction, not " + mode);
        }
        int threads = Integer.parseInt(args.get("threads", "2"));
        long messages = Long.parseLong(args.required("messages"));
        int bodySize = Integer.parseInt(args.get("body-size", "1024"));
        int window = Integer.parseInt(args.get("window", "64"));
        int batchBytes = Integer.parseInt(args.get("batch-bytes", Integer.toString(1024 * 1024)));
        int perBatch = Math.max(1, batchBytes / (BATCH_RECORD_FIXED + bodySize + BATCH_PROPERTIES_ESTIMATE));
        long warmup = Long.parseLong(args.get("warmup", "0"));

        List<DefaultMQProducer> producers = new ArrayList<>();
        try {
            for (int t = 0; t < threads; t++) {
                DefaultMQProducer p = mode.equals(TRANSACTION)
                    ? committing(args.get("group", "bench-producer"))
                    : new DefaultMQProducer(args.get("group", "bench-producer"));
                p.setNamesrvAddr(args.required("ns"));
                p.setInstanceName("bench-producer-" + t + "-" + System.nanoTime());
                p.setSendMsgTimeout(SEND_TIMEOUT_MS);
                p.start();
                producers.add(p);
            }
            if (warmup > 0) {
                // JIT and routes warmed on another topic, so the timed span sees a warm client.
                String warmTopic = args.required("warmup-topic");
                Result w = timed(producers, warmTopic, mode, warmup, bodySize, window, perBatch);
                if (w.failed > 0) {
                    throw new IllegalStateException(w.failed + " warm-up sends failed");
                }
            }
            Result r = timed(producers, topic, mode, messages, bodySize, window, perBatch);
            System.out.println("{\"mode\":" + Tool.Json.str(mode) + ",\"threads\":" + threads
                + ",\"window\":" + (mode.equals("async") ? window : 1)
                + ",\"messagesPerBatch\":" + (mode.equals("batch") ? perBatch : 1)
                + ",\"messages\":" + r.acked + ",\"failed\":" + r.failed + ",\"notOk\":" + r.notOk
                + ",\"seconds\":" + r.seconds + ",\"cpuSeconds\":" + r.cpuSeconds + "}");
            if (r.failed > 0 || r.acked != messages) {
                throw new IllegalStateException(r.failed + " sends failed; " + r.acked + " of " + messages + " acked");
            }
        } finally {
            for (DefaultMQProducer p : producers) {
                p.shutdown();
            }
        }
    }

    /** A transactional producer whose local transaction and check-backs always commit. */
    private static TransactionMQProducer committing(String group) {
        TransactionMQProducer p = new TransactionMQProducer(group);
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return LocalTransactionState.COMMIT_MESSAGE;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        return p;
    }

    /** The messages the topic's queues hold: max offsets summed. */
    private static long stored(DefaultMQProducer p, String topic) throws Exception {
        long sum = 0;
        for (MessageQueue mq : p.fetchPublishMessageQueues(topic)) {
            sum += p.maxOffset(mq);
        }
        return sum;
    }

    private record Result(long acked, long failed, long notOk, double seconds, double cpuSeconds) {}

    /** Every thread sends its share; the span from the first send to the last answer. */
    private static Result timed(List<DefaultMQProducer> producers, String topic, String mode, long messages,
        int bodySize, int window, int perBatch) throws Exception {
        Counters c = new Counters();
        List<Thread> workers = new ArrayList<>();
        int threads = producers.size();
        for (int t = 0; t < threads; t++) {
            long share = messages / threads + (t < messages % threads ? 1 : 0);
            byte[][] bodies = bodies(bodySize, t);
            DefaultMQProducer p = producers.get(t);
            workers.add(new Thread(() -> {
                try {
                    switch (mode) {
                        case "sync" -> sendSync(p, topic, share, bodies, c);
                        case "async" -> sendAsync(p, topic, share, bodies, window, c);
                        case TRANSACTION -> sendInTransactions((TransactionMQProducer) p, topic, share, bodies, c);
                        default -> sendBatches(p, topic, share, bodies, perBatch, c);
                    }
                } catch (Exception e) {
                    c.error(e);
                }
            }, "bench-sender-" + t));
        }
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        boolean untilVisible = mode.equals(TRANSACTION);
        long before = untilVisible ? stored(producers.get(0), topic) : 0;
        long cpuStart = os.getProcessCpuTime();
        long started = System.nanoTime();
        for (Thread w : workers) {
            w.start();
        }
        for (Thread w : workers) {
            w.join();
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(DRAIN_TIMEOUT_S);
        while (untilVisible && stored(producers.get(0), topic) - before < c.acked.get()) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("committed messages still not visible after " + DRAIN_TIMEOUT_S + " s");
            }
            Thread.sleep(VISIBLE_POLL_MS);
        }
        double seconds = (System.nanoTime() - started) / NS_PER_S;
        double cpu = (os.getProcessCpuTime() - cpuStart) / NS_PER_S;
        return new Result(c.acked.get(), c.failed.get(), c.notOk.get(), seconds, cpu);
    }

    private static byte[][] bodies(int size, int seed) {
        Random random = new Random(seed);
        byte[][] out = new byte[BODY_POOL][size];
        for (byte[] b : out) {
            random.nextBytes(b);
        }
        return out;
    }

    private static void sendSync(DefaultMQProducer p, String topic, long count, byte[][] bodies, Counters c) {
        for (long i = 0; i < count; i++) {
            try {
                c.answered(p.send(new Message(topic, bodies[(int) (i % BODY_POOL)])), 1);
            } catch (Exception e) {
                c.error(e);
            }
        }
    }

    private static void sendInTransactions(TransactionMQProducer p, String topic, long count, byte[][] bodies,
        Counters c) {
        for (long i = 0; i < count; i++) {
            try {
                TransactionSendResult r = p.sendMessageInTransaction(new Message(topic, bodies[(int) (i % BODY_POOL)]), null);
                if (r.getLocalTransactionState() != LocalTransactionState.COMMIT_MESSAGE) {
                    throw new IllegalStateException("a half was not committed: " + r);
                }
                c.answered(r, 1);
            } catch (Exception e) {
                c.error(e);
            }
        }
    }

    private static void sendAsync(DefaultMQProducer p, String topic, long count, byte[][] bodies, int window,
        Counters c) throws InterruptedException {
        Semaphore inFlight = new Semaphore(window);
        for (long i = 0; i < count; i++) {
            inFlight.acquire();
            SendCallback callback = new SendCallback() {
                @Override
                public void onSuccess(SendResult result) {
                    c.answered(result, 1);
                    inFlight.release();
                }

                @Override
                public void onException(Throwable e) {
                    c.error(e);
                    inFlight.release();
                }
            };
            try {
                p.send(new Message(topic, bodies[(int) (i % BODY_POOL)]), callback);
            } catch (Exception e) {
                c.error(e);
                inFlight.release();
            }
        }
        // The last answers: every permit back means nothing is in flight.
        if (!inFlight.tryAcquire(window, DRAIN_TIMEOUT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("sends still unanswered after " + DRAIN_TIMEOUT_S + " s");
        }
    }

    private static void sendBatches(DefaultMQProducer p, String topic, long count, byte[][] bodies, int perBatch,
        Counters c) {
        long sent = 0;
        while (sent < count) {
            int n = (int) Math.min(perBatch, count - sent);
            List<Message> batch = new ArrayList<>(n);
            for (int j = 0; j < n; j++) {
                batch.add(new Message(topic, bodies[(int) ((sent + j) % BODY_POOL)]));
            }
            try {
                c.answered(p.send(batch), n);
            } catch (Exception e) {
                c.error(e);
                c.failed.addAndGet(n - 1);
            }
            sent += n;
        }
    }

    /** What the brokers answered, over every thread. */
    private static final class Counters {
        final AtomicLong acked = new AtomicLong();
        final AtomicLong failed = new AtomicLong();
        final AtomicLong notOk = new AtomicLong();
        private final AtomicLong reported = new AtomicLong();
        private static final int ERRORS_SHOWN = 5;

        void answered(SendResult r, int n) {
            acked.addAndGet(n);
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                notOk.addAndGet(n);  // stored, but not flushed or replicated in time
            }
        }

        void error(Throwable e) {
            failed.incrementAndGet();
            if (reported.incrementAndGet() <= ERRORS_SHOWN) {
                System.err.println("send failed: " + e);
            }
        }
    }
}
