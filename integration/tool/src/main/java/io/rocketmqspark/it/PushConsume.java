package io.rocketmqspark.it;

import java.util.List;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A push consumer of the official client that stays online in a group for a while: the kind of
 * member a stream must not disturb. It allocates queues as the default strategy does, and prints
 * each allocation with the members it was computed over, so a test sees whether anyone else was
 * counted.
 *
 * <p>Prints {@code {"event":"started","clientId":...}} once registered with the brokers, one
 * {@code {"event":"allocate",...}} line per rebalance of a topic, and {@code {"event":"stopped"}}.
 * With {@code --print}, also each message as it is delivered (the consume command's line, which has
 * no "event"): a consumer tailing a topic, to show what an application would have been given while
 * it happened. {@code --from-first} starts a new group at the first offset instead of the last.
 */
final class PushConsume {
    private static final long MS_PER_SECOND = 1000;

    private PushConsume() {}

    static void run(Tool.Args args) throws Exception {
        String topic = args.required("topic");
        long seconds = Long.parseLong(args.required("seconds"));
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args.required("group"));
        consumer.setNamesrvAddr(args.required("ns"));
        consumer.setInstanceName("it-push-" + System.nanoTime());
        consumer.setConsumeFromWhere(args.has("from-first")
            ? ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET : ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        boolean printMessages = args.has("print");
        consumer.subscribe(topic, "*");
        consumer.setAllocateMessageQueueStrategy(new Reporting(new AllocateMessageQueueAveragely()));
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            if (printMessages) {
                synchronized (PushConsume.class) {
                    messages.forEach(Tool::printMessage);
                    System.out.flush();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();  // returns after the first heartbeat to every broker of the topic
        print("{\"event\":\"started\",\"clientId\":" + Tool.Json.str(consumer.buildMQClientId()) + "}");
        try {
            Thread.sleep(seconds * MS_PER_SECOND);
        } finally {
            consumer.shutdown();
        }
        print("{\"event\":\"stopped\"}");
    }

    private static void print(String line) {
        synchronized (PushConsume.class) {
            System.out.println(line);
            System.out.flush();
        }
    }

    /** The default allocation, reported: which members it counted, and what it gave this one. */
    private record Reporting(AllocateMessageQueueStrategy inner) implements AllocateMessageQueueStrategy {
        @Override
        public List<MessageQueue> allocate(String group, String currentCid, List<MessageQueue> all, List<String> cids) {
            List<MessageQueue> mine = inner.allocate(group, currentCid, all, cids);
            String topic = all.isEmpty() ? "" : all.get(0).getTopic();
            print("{\"event\":\"allocate\",\"topic\":" + Tool.Json.str(topic) + ",\"consumers\":"
                + Tool.Json.strList(cids) + ",\"queues\":" + all.size() + ",\"assigned\":" + mine.size() + "}");
            return mine;
        }

        @Override
        public String getName() {
            return inner.getName();
        }
    }
}
