package io.rocketmqspark.it;

import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.body.ConsumerOffsetSerializeWrapper;
import org.apache.rocketmq.remoting.protocol.header.QueryConsumerOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.UpdateConsumerOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.QueueData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Test-data tool on the official RocketMQ Java client. It is the independent party in the
 * connector's tests: it creates topics, produces the messages the connector must read, and reads
 * back what the connector committed, so no assertion depends on the connector's own code.
 *
 * <p>Every command prints JSON lines on stdout; diagnostics go to stderr.
 */
public final class Tool {
    private static final long TIMEOUT_MS = 10_000;
    private static final long ROUTE_WAIT_MS = 30_000;
    private static final long ROUTE_POLL_MS = 200;
    private static final int MASTER_ID = 0;
    private static final int PERM_READ_WRITE = 6;
    private static final long POLL_GIVE_UP_NS = 120_000_000_000L;
    private static final String TOPIC_GROUP_SEPARATOR = "@";
    private static final String BROKER_VERSION_KEY = "brokerVersionDesc";
    private static final String V4_PREFIX = "V4_";
    private static final String SUBSCRIBE_ALL = "*";
    private static final String SERVE = "serve";

    private Tool() {}

    public static void main(String[] argv) throws Exception {
        if (argv.length == 1 && argv[0].equals(SERVE)) {
            serve();
            System.exit(0);
        }
        if (!run(argv)) {
            usage();
            System.exit(2);
        }
        System.exit(0);
    }

    /** Runs one command; false for a command the tool does not know. */
    private static boolean run(String[] argv) throws Exception {
        if (argv.length == 0) {
            return false;
        }
        Args args = new Args(Arrays.copyOfRange(argv, 1, argv.length));
        switch (argv[0]) {
            case "create-topic" -> createTopic(args);
            case "delete-topic" -> deleteTopic(args);
            case "produce" -> produce(args);
            case "offsets" -> offsets(args);
            case "set-offset" -> setOffset(args);
            case "consume" -> consume(args);
            case "push-consume" -> PushConsume.run(args);
            case "produce-bench" -> ProduceBench.run(args);
            default -> {
                return false;
            }
        }
        return true;
    }

    /**
     * Commands one per line on stdin, run one after another in this JVM ({@link Served} has the
     * protocol): a test run starts the JVM and loads the client once instead of once per command.
     * Ends when stdin does.
     */
    private static void serve() throws Exception {
        Served.loop(argv -> {
            if (run(argv)) {
                return true;
            }
            usage();
            return false;
        });
    }

    private static void usage() {
        System.err.println(String.join("\n",
            "usage: Tool <command> --ns host:port [options]",
            "  create-topic --topic T --queues N [--brokers broker-a,broker-b] [--attr +key=value]...",
            "  delete-topic --topic T",
            "  produce --topic T --count N [--body TEXT] [--body-size BYTES] [--random-body]",
            "          [--tags A,B] [--keys TEXT] [--prop k=v]... [--broker B [--queue Q]] [--each-queue]",
            "          [--batch K] [--compress ZLIB|LZ4|ZSTD] [--rate PER_SEC] [--quiet] [--print-body]",
            "          ({i} in --body, --keys and --prop values is replaced by the message index;",
            "           --broker alone: round robin over that broker's queues, no other broker;",
            "           --each-queue: round robin over every queue, a send retried on its own queue)",
            "  offsets --topic T --group G",
            "  set-offset --topic T --group G --broker B --queue Q --offset O",
            "  consume --topic T --count N [--group G] [--batch-size 32] [--print]",
            "  push-consume --topic T --group G --seconds S [--print --from-first]",
            "          (a push consumer online for S seconds; --print: each message it is given)",
            "  produce-bench --topic T --messages N [--mode sync|async|batch] [--threads 2] [--window 64]",
            "          [--batch-bytes 1048576] [--body-size 1024] [--warmup N --warmup-topic W]",
            "          (the producer's throughput and CPU, one JSON line; ProduceBench has the method)",
            "  common: [--access-key AK --secret-key SK]",
            "usage: Tool serve   (commands from stdin, one a line, arguments tab-separated; after each,",
            "                     a line #END 0 when it is done, #END 1 when it failed)"));
    }

    // ------------------------------------------------------------------ admin

    private static DefaultMQAdminExt admin(Args args) throws Exception {
        RPCHook hook = rpcHook(args);
        DefaultMQAdminExt admin = hook == null ? new DefaultMQAdminExt(TIMEOUT_MS)
            : new DefaultMQAdminExt(hook, TIMEOUT_MS);
        admin.setNamesrvAddr(args.required("ns"));
        admin.setInstanceName("it-admin-" + System.nanoTime());
        admin.setMqClientApiTimeout((int) TIMEOUT_MS);
        admin.start();
        return admin;
    }

    private static RPCHook rpcHook(Args args) {
        String ak = args.get("access-key", null);
        if (ak == null) {
            return null;
        }
        return new AclClientRPCHook(new SessionCredentials(ak, args.required("secret-key")));
    }

    /** Master address of every broker in the cluster, by broker name. */
    private static Map<String, String> masters(DefaultMQAdminExt admin) throws Exception {
        Map<String, String> out = new LinkedHashMap<>();
        for (BrokerData bd : admin.examineBrokerClusterInfo().getBrokerAddrTable().values()) {
            String addr = bd.getBrokerAddrs().get((long) MASTER_ID);
            if (addr != null) {
                out.put(bd.getBrokerName(), addr);
            }
        }
        return out;
    }

    private static void createTopic(Args args) throws Exception {
        String topic = args.required("topic");
        int queues = Integer.parseInt(args.required("queues"));
        DefaultMQAdminExt admin = admin(args);
        try {
            Map<String, String> masters = masters(admin);
            List<String> brokers = args.has("brokers")
                ? Arrays.asList(args.required("brokers").split(","))
                : new ArrayList<>(masters.keySet());
            for (String broker : brokers) {
                String addr = masters.get(broker);
                if (addr == null) {
                    throw new IllegalArgumentException("no broker named " + broker + " in " + masters.keySet());
                }
                TopicConfig config = new TopicConfig(topic, queues, queues, PERM_READ_WRITE);
                config.setAttributes(attributes(args.all("attr")));
                admin.createAndUpdateTopicConfig(addr, config);
            }
            // Brokers report new topics to the name server with their next registration;
            // wait until the route has every queue so the caller can produce at once.
            long deadline = System.currentTimeMillis() + ROUTE_WAIT_MS;
            while (true) {
                TopicRouteData route = tryRoute(admin, topic);
                if (route != null && routeHas(route, brokers, queues)) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("route of " + topic + " never showed " + brokers);
                }
                Thread.sleep(ROUTE_POLL_MS);
            }
            System.out.println("{\"topic\":" + Json.str(topic) + ",\"brokers\":" + Json.strList(brokers)
                + ",\"queues\":" + queues + "}");
        } finally {
            admin.shutdown();
        }
    }

    /** Topic attributes as mqadmin's {@code -a} takes them: {@code +queue.type=BatchCQ} adds one. */
    private static Map<String, String> attributes(List<String> pairs) {
        Map<String, String> out = new HashMap<>();
        for (String p : pairs) {
            int eq = p.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("--attr wants key=value, got " + p);
            }
            out.put(p.substring(0, eq), p.substring(eq + 1));
        }
        return out;
    }

    private static TopicRouteData tryRoute(DefaultMQAdminExt admin, String topic) {
        try {
            return admin.examineTopicRouteInfo(topic);
        } catch (Exception e) {
            return null;
        }
    }

    private static boolean routeHas(TopicRouteData route, List<String> brokers, int queues) {
        for (String broker : brokers) {
            boolean found = false;
            for (QueueData qd : route.getQueueDatas()) {
                if (qd.getBrokerName().equals(broker) && qd.getReadQueueNums() == queues) {
                    found = true;
                }
            }
            if (!found) {
                return false;
            }
        }
        return true;
    }

    private static void deleteTopic(Args args) throws Exception {
        String topic = args.required("topic");
        DefaultMQAdminExt admin = admin(args);
        try {
            Set<String> brokerAddrs = new TreeSet<>(masters(admin).values());
            admin.deleteTopicInBroker(brokerAddrs, topic);
            Set<String> nameServers = new TreeSet<>(Arrays.asList(args.required("ns").split(";")));
            admin.deleteTopicInNameServer(nameServers, topic);
            System.out.println("{\"deleted\":" + Json.str(topic) + "}");
        } finally {
            admin.shutdown();
        }
    }

    /**
     * Queue offsets stored for a group. {@code consumerOffset} comes from the broker's own offset
     * table (GET_ALL_CONSUMER_OFFSET), so "nothing stored" (null) is told apart from a stored 0 on
     * every release. {@code queriedOffset} is what QUERY_CONSUMER_OFFSET with
     * setZeroIfNotFound=false answers (null for QUERY_NOT_FOUND): a 4.9 broker ignores that flag
     * and answers 0 for a queue whose first message is still in memory.
     */
    private static void offsets(Args args) throws Exception {
        String topic = args.required("topic");
        String group = args.required("group");
        DefaultMQAdminExt admin = admin(args);
        try {
            MQClientAPIImpl api = admin.getDefaultMQAdminExtImpl().getMqClientInstance().getMQClientAPIImpl();
            TopicRouteData route = admin.examineTopicRouteInfo(topic);
            Map<String, String> addrs = new HashMap<>();
            for (BrokerData bd : route.getBrokerDatas()) {
                addrs.put(bd.getBrokerName(), bd.getBrokerAddrs().get((long) MASTER_ID));
            }
            for (QueueData qd : route.getQueueDatas()) {
                String addr = addrs.get(qd.getBrokerName());
                Map<Integer, Long> table = storedOffsets(api, addr, topic, group);
                for (int q = 0; q < qd.getReadQueueNums(); q++) {
                    MessageQueue mq = new MessageQueue(topic, qd.getBrokerName(), q);
                    Long stored = table.get(q);
                    long max = admin.maxOffset(mq);
                    long min = admin.minOffset(mq);
                    System.out.println("{\"topic\":" + Json.str(topic) + ",\"broker\":" + Json.str(qd.getBrokerName())
                        + ",\"queueId\":" + q + ",\"consumerOffset\":" + (stored == null ? "null" : stored.toString())
                        + ",\"queriedOffset\":" + queried(api, addr, topic, group, q)
                        + ",\"minOffset\":" + min + ",\"maxOffset\":" + max + "}");
                }
            }
        } finally {
            admin.shutdown();
        }
    }

    /** The group's entries of one broker's offset table for the topic, by queue id. */
    private static Map<Integer, Long> storedOffsets(MQClientAPIImpl api, String addr, String topic, String group)
        throws Exception {
        RemotingCommand response = api.getRemotingClient().invokeSync(
            addr, RemotingCommand.createRequestCommand(RequestCode.GET_ALL_CONSUMER_OFFSET, null), TIMEOUT_MS);
        if (response.getCode() == ResponseCode.SYSTEM_ERROR) {
            // A broker that has stored no offset at all says so with SYSTEM_ERROR.
            return Map.of();
        }
        if (response.getCode() != ResponseCode.SUCCESS) {
            throw new MQBrokerException(response.getCode(), response.getRemark(), addr);
        }
        ConsumerOffsetSerializeWrapper all = ConsumerOffsetSerializeWrapper.decode(
            response.getBody(), ConsumerOffsetSerializeWrapper.class);
        Map<Integer, Long> mine = all.getOffsetTable().get(topic + TOPIC_GROUP_SEPARATOR + group);
        return mine == null ? Map.of() : mine;
    }

    private static String queried(MQClientAPIImpl api, String addr, String topic, String group, int queue)
        throws Exception {
        QueryConsumerOffsetRequestHeader h = new QueryConsumerOffsetRequestHeader();
        h.setConsumerGroup(group);
        h.setTopic(topic);
        h.setQueueId(queue);
        h.setSetZeroIfNotFound(false);
        try {
            return Long.toString(api.queryConsumerOffset(addr, h, TIMEOUT_MS));
        } catch (MQBrokerException e) {
            if (e.getResponseCode() != ResponseCode.QUERY_NOT_FOUND) {
                throw e;
            }
            return "null";
        }
    }

    private static void setOffset(Args args) throws Exception {
        String topic = args.required("topic");
        String group = args.required("group");
        String broker = args.required("broker");
        int queue = Integer.parseInt(args.required("queue"));
        long offset = Long.parseLong(args.required("offset"));
        DefaultMQAdminExt admin = admin(args);
        try {
            String addr = masters(admin).get(broker);
            // UPDATE_CONSUMER_OFFSET is refused for a group the broker has never seen.
            SubscriptionGroupConfig sg = new SubscriptionGroupConfig();
            sg.setGroupName(group);
            admin.createAndUpdateSubscriptionGroupConfig(addr, sg);
            UpdateConsumerOffsetRequestHeader h = new UpdateConsumerOffsetRequestHeader();
            h.setConsumerGroup(group);
            h.setTopic(topic);
            h.setQueueId(queue);
            h.setCommitOffset(offset);
            admin.getDefaultMQAdminExtImpl().getMqClientInstance().getMQClientAPIImpl()
                .updateConsumerOffset(addr, h, TIMEOUT_MS);
            System.out.println("{\"topic\":" + Json.str(topic) + ",\"broker\":" + Json.str(broker) + ",\"queueId\":"
                + queue + ",\"consumerOffset\":" + offset + "}");
        } finally {
            admin.shutdown();
        }
    }

    // --------------------------------------------------------------- producer

    private static void produce(Args args) throws Exception {
        String topic = args.required("topic");
        int count = Integer.parseInt(args.required("count"));
        String bodyTemplate = args.get("body", "message {i}");
        int bodySize = Integer.parseInt(args.get("body-size", "0"));
        boolean randomBody = args.has("random-body");
        List<String> tags = args.has("tags") ? Arrays.asList(args.required("tags").split(",")) : List.of();
        String keysTemplate = args.get("keys", null);
        List<String> props = args.all("prop");
        int batch = Integer.parseInt(args.get("batch", "1"));
        double rate = Double.parseDouble(args.get("rate", "0"));
        boolean quiet = args.has("quiet");
        boolean printBody = args.has("print-body");
        MessageQueue fixedQueue = args.has("queue")
            ? new MessageQueue(topic, args.required("broker"), Integer.parseInt(args.required("queue")))
            : null;

        RPCHook hook = rpcHook(args);
        String group = args.get("group", "it-producer");
        DefaultMQProducer producer = hook == null ? new DefaultMQProducer(group) : new DefaultMQProducer(group, hook);
        producer.setNamesrvAddr(args.required("ns"));
        producer.setInstanceName("it-producer-" + System.nanoTime());
        producer.setSendMsgTimeout((int) TIMEOUT_MS);
        // Route look-ups get the same patience as sends: 3 s is tight on a loaded test machine.
        producer.setMqClientApiTimeout((int) TIMEOUT_MS);
        if (args.has("compress")) {
            producer.setCompressType(CompressionType.valueOf(args.required("compress")));
        }
        producer.start();
        // --broker without --queue: only that broker's queues, in turn, and no retry elsewhere, so
        // a message is never sent twice to two brokers while another broker is being failed.
        // --each-queue: every queue in turn, each send to its own queue: the producer's own choice
        // moves on to the next queue after a busy broker's refusal, which leaves one queue without
        // its batch and another with two, where a test wants the same count on every queue.
        boolean inTurn = fixedQueue == null && (args.has("broker") || args.has("each-queue"));
        List<MessageQueue> brokerQueues = inTurn
            ? producer.fetchPublishMessageQueues(topic).stream()
                .filter(q -> !args.has("broker") || q.getBrokerName().equals(args.get("broker", null))).toList()
            : List.of();
        if (inTurn && brokerQueues.isEmpty()) {
            throw new IllegalArgumentException("no queues of " + topic + " to send to"
                + (args.has("broker") ? " on broker " + args.get("broker", null) : ""));
        }
        Random random = new Random(count);
        long started = System.nanoTime();
        int sent = 0;
        Map<String, SendResult> lastPerBroker = new HashMap<>();
        Map<String, Integer> lastCount = new HashMap<>();
        try {
            while (sent < count) {
                int n = Math.min(batch, count - sent);
                List<Message> msgs = new ArrayList<>(n);
                for (int j = 0; j < n; j++) {
                    int i = sent + j;
                    Message m = new Message(topic, body(bodyTemplate, i, bodySize, randomBody, random));
                    if (!tags.isEmpty()) {
                        m.setTags(tags.get(i % tags.size()));
                    }
                    if (keysTemplate != null) {
                        m.setKeys(keysTemplate.replace("{i}", Integer.toString(i)));
                    }
                    for (String p : props) {
                        int eq = p.indexOf('=');
                        m.putUserProperty(p.substring(0, eq), p.substring(eq + 1).replace("{i}", Integer.toString(i)));
                    }
                    msgs.add(m);
                }
                MessageQueue target = brokerQueues.isEmpty()
                    ? fixedQueue : brokerQueues.get(sent / batch % brokerQueues.size());
                SendResult r = send(producer, msgs, target);
                if (!quiet) {
                    report(r, msgs, printBody);
                }
                lastPerBroker.put(r.getMessageQueue().getBrokerName(), r);
                lastCount.put(r.getMessageQueue().getBrokerName(), n);
                sent += n;
                pace(rate, sent, started);
            }
            Map<MessageQueue, Long> ends = new HashMap<>();
            lastPerBroker.forEach((b, r) -> ends.put(r.getMessageQueue(), r.getQueueOffset() + lastCount.get(b)));
            awaitDispatched(producer, ends);
        } finally {
            producer.shutdown();
        }
        double secs = (System.nanoTime() - started) / 1e9;
        System.err.printf("sent %d messages in %.2fs%n", sent, secs);
    }

    private static final long DISPATCH_WAIT_MS = 20_000;
    private static final long DISPATCH_POLL_MS = 50;

    /**
     * A send returns once the commit log holds the message; its queue entry is written a moment
     * later, and on a loaded machine a test reading max offsets at once saw hundreds missing. Wait
     * until each broker's last send shows in its queue: a broker writes queue entries in commit
     * log order, so the earlier sends show too. Best effort: a broker that no longer answers (a
     * fault test killed it) is not waited for.
     */
    private static void awaitDispatched(DefaultMQProducer producer, Map<MessageQueue, Long> ends)
        throws InterruptedException {
        long deadline = System.currentTimeMillis() + DISPATCH_WAIT_MS;
        for (Map.Entry<MessageQueue, Long> e : ends.entrySet()) {
            while (true) {
                long max;
                try {
                    max = producer.maxOffset(e.getKey());
                } catch (Exception gone) {
                    break;
                }
                if (max >= e.getValue()) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    System.err.printf("%s shows max offset %d, not yet %d%n", e.getKey(), max, e.getValue());
                    break;
                }
                Thread.sleep(DISPATCH_POLL_MS);
            }
        }
    }

    // A broker under load refuses a send it took too long to start (SYSTEM_BUSY, "broker busy,
    // start flow control"), before storing it: sent again after a pause, as a send to an explicit
    // queue is not retried by the client itself.
    private static final int BUSY_ATTEMPTS = 5;
    private static final long BUSY_PAUSE_MS = 500;

    private static SendResult send(DefaultMQProducer p, List<Message> msgs, MessageQueue q) throws Exception {
        for (int attempt = 1; ; attempt++) {
            try {
                if (msgs.size() == 1) {
                    return q == null ? p.send(msgs.get(0)) : p.send(msgs.get(0), q);
                }
                return q == null ? p.send(msgs) : p.send(msgs, q);
            } catch (MQBrokerException e) {
                if (e.getResponseCode() != ResponseCode.SYSTEM_BUSY || attempt >= BUSY_ATTEMPTS) {
                    throw e;
                }
                Thread.sleep(BUSY_PAUSE_MS);
            }
        }
    }

    private static void pace(double rate, int sent, long started) throws InterruptedException {
        if (rate <= 0) {
            return;
        }
        long due = started + (long) (sent / rate * 1e9);
        long wait = due - System.nanoTime();
        if (wait > 0) {
            Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
        }
    }

    private static byte[] body(String template, int i, int size, boolean random, Random rnd) {
        byte[] text = template.replace("{i}", Integer.toString(i)).getBytes(StandardCharsets.UTF_8);
        if (size <= text.length && !random) {
            return text;
        }
        byte[] out = new byte[Math.max(size, text.length)];
        System.arraycopy(text, 0, out, 0, text.length);
        if (random) {
            byte[] tail = new byte[out.length - text.length];
            rnd.nextBytes(tail);
            System.arraycopy(tail, 0, out, text.length, tail.length);
        } else {
            for (int k = text.length; k < out.length; k++) {
                out[k] = (byte) ('a' + (k % 26));
            }
        }
        return out;
    }

    /**
     * One JSON line per message; a batch send returns its ids comma-joined and its first offset. A
     * batch the broker keeps as one inner-batch record (a BatchCQ topic) returns only the batch's
     * own id: each message's id is then its UNIQ_KEY, and batchMsgId names the record.
     */
    private static void report(SendResult r, List<Message> msgs, boolean printBody) {
        String[] ids = r.getMsgId().split(",");
        boolean innerBatch = msgs.size() > 1 && ids.length == 1;
        String[] offsetIds = r.getOffsetMsgId() == null ? new String[0] : r.getOffsetMsgId().split(",");
        MessageQueue q = r.getMessageQueue();
        for (int j = 0; j < msgs.size(); j++) {
            Message m = msgs.get(j);
            StringBuilder sb = new StringBuilder(256);
            sb.append("{\"msgId\":").append(Json.str(innerBatch ? MessageClientIDSetter.getUniqID(m) : ids[j]));
            if (innerBatch) {
                sb.append(",\"batchMsgId\":").append(Json.str(ids[0]));
            }
            sb.append(",\"offsetMsgId\":").append(j < offsetIds.length ? Json.str(offsetIds[j]) : "null")
                .append(",\"status\":").append(Json.str(r.getSendStatus().name()))
                .append(",\"topic\":").append(Json.str(q.getTopic()))
                .append(",\"broker\":").append(Json.str(q.getBrokerName()))
                .append(",\"queueId\":").append(q.getQueueId())
                .append(",\"queueOffset\":").append(r.getQueueOffset() + j)
                .append(",\"tags\":").append(m.getTags() == null ? "null" : Json.str(m.getTags()))
                .append(",\"keys\":").append(m.getKeys() == null ? "null" : Json.str(m.getKeys()))
                .append(",\"properties\":").append(Json.map(m.getProperties()));
            if (printBody) {
                sb.append(",\"body\":").append(Json.str(Base64.getEncoder().encodeToString(m.getBody())));
            }
            System.out.println(sb.append('}'));
        }
    }

    // --------------------------------------------------------------- consumer

    /**
     * Every message of the topic, read from each queue's min offset with the official client. On
     * 5.x brokers that is the lite pull consumer (the benchmark baseline); it sends
     * LITE_PULL_MESSAGE, which 4.x brokers do not serve, so there the plain pull consumer reads,
     * with PULL_MESSAGE.
     */
    private static void consume(Args args) throws Exception {
        String topic = args.required("topic");
        long count = Long.parseLong(args.required("count"));
        String group = args.get("group", "it-lite-" + System.nanoTime());
        int batchSize = Integer.parseInt(args.get("batch-size", "32"));
        Reading reading = new Reading(count, args.has("print"));
        // The tests' reads (--print) pull each queue from its min offset, without a rebalance or a
        // seek that can race with the consumer's own first pulls; the lite pull consumer is the
        // benchmark's baseline.
        if (args.has("subscribe")) {
            consumeBySubscription(args, topic, group, batchSize, reading);
        } else if (args.has("print") || anyV4Broker(args)) {
            consumeByPull(args, topic, group, batchSize, reading);
        } else {
            consumeByLitePull(args, topic, group, batchSize, reading);
        }
        reading.summary();
    }

    private static boolean anyV4Broker(Args args) throws Exception {
        DefaultMQAdminExt admin = admin(args);
        try {
            for (String addr : masters(admin).values()) {
                String version = admin.fetchBrokerRuntimeStats(addr).getTable().get(BROKER_VERSION_KEY);
                if (version != null && version.startsWith(V4_PREFIX)) {
                    return true;
                }
            }
            return false;
        } finally {
            admin.shutdown();
        }
    }

    /**
     * As an application subscribes: the group's stored offsets, else the first offset, and commits
     * at the end. It needs Sub on the topic and the group only (no min offset or seek), which is
     * what the least-privilege tests compare the source with.
     */
    private static void consumeBySubscription(Args args, String topic, String group, int batchSize, Reading reading)
        throws Exception {
        DefaultLitePullConsumer c = litePullConsumer(args, group, batchSize, "it-subscriber-");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, SUBSCRIBE_ALL);
        c.start();
        try {
            while (!reading.done()) {
                reading.add(c.poll(TIMEOUT_MS));
            }
            c.commitSync();
        } finally {
            c.shutdown();
        }
    }

    /** A lite pull consumer of the group, signed if the args carry keys, committing only when told. */
    private static DefaultLitePullConsumer litePullConsumer(Args args, String group, int batchSize, String instance)
        throws Exception {
        RPCHook hook = rpcHook(args);
        DefaultLitePullConsumer c = hook == null ? new DefaultLitePullConsumer(group)
            : new DefaultLitePullConsumer(group, hook);
        c.setNamesrvAddr(args.required("ns"));
        c.setInstanceName(instance + System.nanoTime());
        c.setMqClientApiTimeout((int) TIMEOUT_MS);
        c.setAutoCommit(false);
        c.setPullBatchSize(batchSize);
        return c;
    }

    private static void consumeByLitePull(Args args, String topic, String group, int batchSize, Reading reading)
        throws Exception {
        DefaultLitePullConsumer c = litePullConsumer(args, group, batchSize, "it-consumer-");
        c.start();
        try {
            List<MessageQueue> queues = new ArrayList<>(c.fetchMessageQueues(topic));
            c.assign(queues);
            for (MessageQueue q : queues) {
                c.seekToBegin(q);
            }
            while (!reading.done()) {
                reading.add(c.poll(TIMEOUT_MS));
            }
        } finally {
            c.shutdown();
        }
    }

    @SuppressWarnings("deprecation")
    private static void consumeByPull(Args args, String topic, String group, int batchSize, Reading reading)
        throws Exception {
        RPCHook hook = rpcHook(args);
        DefaultMQPullConsumer c = hook == null ? new DefaultMQPullConsumer(group) : new DefaultMQPullConsumer(group, hook);
        c.setNamesrvAddr(args.required("ns"));
        c.setInstanceName("it-consumer-" + System.nanoTime());
        c.setMqClientApiTimeout((int) TIMEOUT_MS);
        c.start();
        try {
            Map<MessageQueue, Long> next = new HashMap<>();
            for (MessageQueue q : c.fetchSubscribeMessageQueues(topic)) {
                next.put(q, c.minOffset(q));
            }
            while (!reading.done()) {
                List<MessageExt> round = new ArrayList<>();
                for (Map.Entry<MessageQueue, Long> e : next.entrySet()) {
                    PullResult r = c.pull(e.getKey(), SUBSCRIBE_ALL, e.getValue(), batchSize, TIMEOUT_MS);
                    if (r.getPullStatus() == PullStatus.FOUND) {
                        round.addAll(r.getMsgFoundList());
                    }
                    e.setValue(r.getNextBeginOffset());
                }
                reading.add(round);
                if (round.isEmpty()) {
                    Thread.sleep(ROUTE_POLL_MS);
                }
            }
        } finally {
            c.shutdown();
        }
    }

    /**
     * Counts (and with --print, prints) what a consumer read, until the expected count arrived.
     * With --print a message is counted and printed once per queue position: the callers want
     * each stored message once, whatever a consumer delivers twice.
     */
    static final class Reading {
        private final long count;
        private final boolean print;
        private final Set<String> positions = new HashSet<>();
        private final long started = System.nanoTime();
        private long seen;
        private long bytes;

        Reading(long count, boolean print) {
            this.count = count;
            this.print = print;
        }

        boolean done() {
            return seen >= count;
        }

        void add(List<MessageExt> batch) {
            if (batch.isEmpty() && System.nanoTime() - started > POLL_GIVE_UP_NS) {
                throw new IllegalStateException("only " + seen + " of " + count + " messages arrived");
            }
            for (MessageExt m : batch) {
                if (print && !positions.add(m.getBrokerName() + "/" + m.getQueueId() + "/" + m.getQueueOffset())) {
                    continue;
                }
                seen++;
                bytes += m.getBody().length;
                if (print) {
                    printMessage(m);
                }
            }
        }

        void summary() {
            double secs = (System.nanoTime() - started) / 1e9;
            String line = "{\"messages\":" + seen + ",\"bytes\":" + bytes + ",\"seconds\":" + secs
                + ",\"messagesPerSecond\":" + (seen / secs) + "}";
            // With --print, stdout carries one line per message only.
            (print ? System.err : System.out).println(line);
        }
    }

    static void printMessage(MessageExt m) {
        System.out.println("{\"msgId\":" + Json.str(m.getMsgId())
            + ",\"offsetMsgId\":" + Json.strOrNull(m instanceof MessageClientExt ce ? ce.getOffsetMsgId() : m.getMsgId())
            + ",\"topic\":" + Json.str(m.getTopic())
            + ",\"broker\":" + Json.str(m.getBrokerName())
            + ",\"queueId\":" + m.getQueueId()
            + ",\"queueOffset\":" + m.getQueueOffset()
            + ",\"tags\":" + (m.getTags() == null ? "null" : Json.str(m.getTags()))
            + ",\"keys\":" + (m.getKeys() == null ? "null" : Json.str(m.getKeys()))
            + ",\"storeTimestamp\":" + m.getStoreTimestamp()
            + ",\"bornTimestamp\":" + m.getBornTimestamp()
            + ",\"bornHost\":" + Json.str(hostPort(m.getBornHost()))
            + ",\"storeHost\":" + Json.str(hostPort(m.getStoreHost()))
            + ",\"commitLogOffset\":" + m.getCommitLogOffset()
            + ",\"sysFlag\":" + m.getSysFlag()
            + ",\"flag\":" + m.getFlag()
            + ",\"reconsumeTimes\":" + m.getReconsumeTimes()
            + ",\"preparedTransactionOffset\":" + m.getPreparedTransactionOffset()
            + ",\"properties\":" + Json.map(m.getProperties())
            + ",\"body\":" + Json.str(Base64.getEncoder().encodeToString(m.getBody())) + "}");
    }

    /** {@code ip:port} of a message's born or store host, as the decoder renders it. */
    private static String hostPort(SocketAddress address) {
        InetSocketAddress inet = (InetSocketAddress) address;
        return inet.getAddress().getHostAddress() + ":" + inet.getPort();
    }

    // ---------------------------------------------------------------- helpers

    /** {@code --name value} pairs; a flag without a value maps to "true"; repeated names accumulate. */
    static final class Args {
        private final Map<String, List<String>> values = new HashMap<>();

        Args(String[] argv) {
            for (int k = 0; k < argv.length; k++) {
                if (!argv[k].startsWith("--")) {
                    throw new IllegalArgumentException("unexpected argument " + argv[k]);
                }
                String name = argv[k].substring(2);
                String value = "true";
                if (k + 1 < argv.length && !argv[k + 1].startsWith("--")) {
                    value = argv[++k];
                }
                values.computeIfAbsent(name, x -> new ArrayList<>()).add(value);
            }
        }

        boolean has(String name) {
            return values.containsKey(name);
        }

        String get(String name, String dflt) {
            List<String> v = values.get(name);
            return v == null ? dflt : v.get(v.size() - 1);
        }

        String required(String name) {
            String v = get(name, null);
            if (v == null) {
                throw new IllegalArgumentException("missing --" + name);
            }
            return v;
        }

        List<String> all(String name) {
            return values.getOrDefault(name, List.of());
        }
    }

    /** Just enough JSON writing for the tool's output, so it depends on no JSON library. */
    static final class Json {
        private Json() {}

        static String str(String s) {
            StringBuilder sb = new StringBuilder(s.length() + 2).append('"');
            for (int k = 0; k < s.length(); k++) {
                char ch = s.charAt(k);
                switch (ch) {
                    case '"' -> sb.append("\\\"");
                    case '\\' -> sb.append("\\\\");
                    case '\n' -> sb.append("\\n");
                    case '\r' -> sb.append("\\r");
                    case '\t' -> sb.append("\\t");
                    default -> {
                        if (ch < 0x20) {
                            sb.append(String.format("\\u%04x", (int) ch));
                        } else {
                            sb.append(ch);
                        }
                    }
                }
            }
            return sb.append('"').toString();
        }

        /** A JSON string, or null (an inner-batch message has no offsetMsgId of its own). */
        static String strOrNull(String s) {
            return s == null ? "null" : str(s);
        }

        static String strList(List<String> xs) {
            List<String> quoted = new ArrayList<>();
            for (String x : xs) {
                quoted.add(str(x));
            }
            return "[" + String.join(",", quoted) + "]";
        }

        static String map(Map<String, String> m) {
            List<String> parts = new ArrayList<>();
            for (Map.Entry<String, String> e : new java.util.TreeMap<>(m).entrySet()) {
                parts.add(str(e.getKey()) + ":" + str(e.getValue()));
            }
            return "{" + String.join(",", parts) + "}";
        }
    }
}
