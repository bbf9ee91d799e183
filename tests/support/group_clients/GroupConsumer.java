import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * The Java client's (kafka-clients) group consumer of the tests: subscribes to TOPIC in
 * GROUP with a rebalance listener, writes one JSON line per event to stdout (assigned,
 * revoked, record, committed; wall time "t" in seconds) and commits synchronously after
 * the records of each poll are written. SIGTERM closes the consumer (it leaves the group).
 *
 * Usage: java GroupConsumer BOOTSTRAP GROUP TOPIC
 */
public final class GroupConsumer implements ConsumerRebalanceListener {
    private static final PrintStream OUT = new PrintStream(System.out, false);

    private final String topic;
    private final KafkaConsumer<String, String> consumer;
    private final Map<Integer, Long> processed = new HashMap<>();
    private final Map<Integer, Long> committed = new HashMap<>();

    private GroupConsumer(String bootstrap, String group, String topic) {
        Properties properties = new Properties();
        properties.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        properties.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        properties.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
        properties.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        properties.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        properties.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "1000");
        properties.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        properties.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                       StringDeserializer.class.getName());
        properties.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                       StringDeserializer.class.getName());
        this.topic = topic;
        this.consumer = new KafkaConsumer<>(properties);
    }

    private static synchronized void emit(String event, String fields) {
        double now = System.currentTimeMillis() / 1000.0;
        OUT.print("{\"event\":\"" + event + "\"," + fields + ",\"t\":"
                  + String.format(Locale.ROOT, "%.3f", now) + "}\n");
        OUT.flush();
    }

    private static String quote(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    private static List<Integer> numbers(Collection<TopicPartition> partitions) {
        List<Integer> numbers = new ArrayList<>();
        for (TopicPartition partition : partitions) {
            numbers.add(partition.partition());
        }
        numbers.sort(null);
        return numbers;
    }

    private static String partitionList(List<Integer> numbers) {
        StringBuilder out = new StringBuilder("\"partitions\":[");
        for (int i = 0; i < numbers.size(); i++) {
            out.append(i > 0 ? "," : "").append(numbers.get(i));
        }
        return out.append(']').toString();
    }

    private void commit(Collection<Integer> partitions) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        Map<Integer, Long> pending = new TreeMap<>();
        for (Integer partition : partitions) {
            Long next = processed.get(partition);
            if (next != null && !next.equals(committed.get(partition))) {
                offsets.put(new TopicPartition(topic, partition), new OffsetAndMetadata(next));
                pending.put(partition, next);
            }
        }
        if (offsets.isEmpty()) {
            return;
        }
        try {
            consumer.commitSync(offsets);
        } catch (WakeupException e) {
            throw e;
        } catch (KafkaException e) {
            System.err.println("commit failed: " + e);
            return;
        }
        committed.putAll(pending);
        StringBuilder fields = new StringBuilder("\"offsets\":{");
        String separator = "";
        for (Map.Entry<Integer, Long> entry : pending.entrySet()) {
            fields.append(separator).append('"').append(entry.getKey()).append("\":")
                  .append(entry.getValue());
            separator = ",";
        }
        emit("committed", fields.append('}').toString());
    }

    private void forget(List<Integer> partitions) {
        for (Integer partition : partitions) {
            processed.remove(partition);
            committed.remove(partition);
        }
    }

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        List<Integer> revoked = numbers(partitions);
        commit(revoked);
        forget(revoked);
        emit("revoked", partitionList(revoked));
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> partitions) {
        List<Integer> lost = numbers(partitions);
        forget(lost);
        emit("revoked", partitionList(lost));
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
        emit("assigned", partitionList(numbers(partitions)));
    }

    private void run(CountDownLatch closed) {
        try {
            consumer.subscribe(List.of(topic), this);
            while (true) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(500))) {
                    String value = record.value() == null ? "" : record.value();
                    emit("record", "\"partition\":" + record.partition() + ",\"offset\":"
                         + record.offset() + ",\"value\":" + quote(value));
                    processed.put(record.partition(), record.offset() + 1);
                }
                commit(new ArrayList<>(processed.keySet()));
            }
        } catch (WakeupException e) {
            // SIGTERM: the shutdown hook woke the poll loop up
        } finally {
            consumer.close(Duration.ofSeconds(10));
            closed.countDown();
        }
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 3) {
            System.err.println("usage: GroupConsumer BOOTSTRAP GROUP TOPIC");
            System.exit(2);
        }
        GroupConsumer groupConsumer = new GroupConsumer(args[0], args[1], args[2]);
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            groupConsumer.consumer.wakeup();
            try {
                closed.await(15, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        groupConsumer.run(closed);
    }
}
