import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.common.errors.IllegalGenerationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownMemberIdException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Apache Kafka Java client (kafka-clients) as a child process of the harness
 * (workloads.kafka.java): JSON lines on stdin and stdout, one reply per request,
 * {"id": n, "result": ...} or {"id": n, "error": "...", "events": [...]}.
 *
 * `KchaosClient queue`: the queue workload's client process, a producer and an assign-mode
 * consumer (requests setup, send, poll, assign, end-offsets, committed, close), and a
 * transactional producer made at the first `txn` request (one transaction each).
 * `KchaosClient member`: a subscribe-mode group member, the protocol of
 * workloads.groups.consumer (requests subscribe, poll, commit, close; rebalance callbacks
 * as events on CLOCK_MONOTONIC, which System.nanoTime reads on Linux).
 * `KchaosClient transfer`: a transfer worker, the protocol of workloads.transfer.child
 * (requests subscribe, transfer, close): a read_committed group member and a
 * transactional producer, one consume-transform-produce transaction per transfer.
 *
 * The first line is the configuration. A failed send reports the error's Kafka protocol
 * name where it has one, else the exception's class, and whether the record certainly
 * never left this process ("sent": false: the producer gave up waiting for the topic's
 * metadata); the harness classifies it (workloads.kafka.errors).
 */
public final class KchaosClient {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final PrintStream OUT =
        new PrintStream(System.out, false, StandardCharsets.UTF_8);

    private KchaosClient() {
    }

    public static void main(String[] args) throws Exception {
        for (Class<?> loaded : List.of(KafkaProducer.class, KafkaConsumer.class, Admin.class)) {
            Class.forName(loaded.getName());
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        JsonNode config = JSON.readTree(in.readLine());
        Handler handler = switch (args[0]) {
            case "member" -> new Member(config, "read_uncommitted");
            case "transfer" -> new Transfer(config);
            default -> new Queue(config);
        };
        String line;
        while ((line = in.readLine()) != null) {
            JsonNode request = JSON.readTree(line);
            String op = request.get("op").asText();
            ObjectNode reply = JSON.createObjectNode();
            reply.set("id", request.get("id"));
            try {
                reply.set("result", handler.handle(op, request));
            } catch (Exception error) {
                reply.put("error", describe(error));
            }
            reply.set("events", handler.events());
            OUT.print(JSON.writeValueAsString(reply) + "\n");
            OUT.flush();
            if ("close".equals(op)) {
                OUT.flush();
                Runtime.getRuntime().halt(0);
            }
        }
        OUT.flush();
        handler.abandoned();
        Runtime.getRuntime().halt(0);
    }

    interface Handler {
        JsonNode handle(String op, JsonNode request) throws Exception;

        ArrayNode events();

        /** The harness closed stdin without a close request: finish as a zombie would. */
        default void abandoned() {
        }
    }

    static String describe(Throwable error) {
        Throwable cause = error instanceof ExecutionException && error.getCause() != null
            ? error.getCause() : error;
        return cause.getClass().getSimpleName() + ": " + cause.getMessage();
    }

    /** The Kafka protocol name of an error, else its class's simple name. */
    static String errorName(Throwable error) {
        Errors code = Errors.forException(error);
        if (code != Errors.UNKNOWN_SERVER_ERROR) {
            return code.name();
        }
        return error.getClass().getSimpleName();
    }

    static Properties common(JsonNode config) {
        Properties properties = new Properties();
        List<String> servers = new ArrayList<>();
        config.get("bootstrap_servers").forEach(server -> servers.add(server.asText()));
        properties.put("bootstrap.servers", String.join(",", servers));
        properties.put("reconnect.backoff.max.ms", "1000");
        properties.put("metadata.max.age.ms", "5000");
        return properties;
    }

    /** A transactional producer's properties: idempotent, acks=all, each request, delivery
     * and blocking call bounded by `timeoutMs` (plus the linger for a delivery). */
    static Properties transactionalProperties(JsonNode config, String id,
                                              int transactionTimeoutMs, int timeoutMs,
                                              int lingerMs) {
        Properties properties = common(config);
        properties.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
        properties.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        properties.put(ProducerConfig.ACKS_CONFIG, "all");
        properties.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG,
                       Integer.toString(transactionTimeoutMs));
        properties.put(ProducerConfig.LINGER_MS_CONFIG, Integer.toString(lingerMs));
        properties.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, Integer.toString(timeoutMs));
        properties.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG,
                       Integer.toString(timeoutMs + lingerMs));
        properties.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, Integer.toString(timeoutMs));
        properties.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "100");
        properties.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        properties.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return properties;
    }

    static Map<Integer, JsonNode> partitionKeys(JsonNode config) {
        Map<Integer, JsonNode> keys = new HashMap<>();
        for (JsonNode pair : config.get("partition_keys")) {
            keys.put(pair.get(0).asInt(), pair.get(1));
        }
        return keys;
    }

    static ArrayNode pair(JsonNode first, JsonNode second) {
        ArrayNode pair = JSON.createArrayNode();
        pair.add(first);
        pair.add(second);
        return pair;
    }

    /** [offset, value]: the value as a number when it is one (the workloads' sends), else
     * as text (a transfer's outputs, `value:attempt`). */
    static ArrayNode read(ConsumerRecord<String, String> record) {
        ArrayNode read = JSON.createArrayNode();
        read.add(record.offset());
        try {
            read.add(Long.parseLong(record.value()));
        } catch (NumberFormatException text) {
            read.add(record.value());
        }
        return read;
    }

    /** Records of one poll by partition: [[partition, [[offset, value], ...]], ...]. */
    static ArrayNode reads(ConsumerRecords<String, String> records) {
        Map<Integer, ArrayNode> byPartition = new TreeMap<>();
        for (ConsumerRecord<String, String> record : records) {
            byPartition.computeIfAbsent(record.partition(), p -> JSON.createArrayNode())
                .add(read(record));
        }
        ArrayNode out = JSON.createArrayNode();
        byPartition.forEach((partition, pairs) -> out.add(pair(JSON.valueToTree(partition), pairs)));
        return out;
    }

    /** Records of one poll of several topics: [[topic, partition, [[offset, value], ...]]]. */
    static ArrayNode topicReads(ConsumerRecords<String, String> records) {
        Map<TopicPartition, ArrayNode> byPartition = new HashMap<>();
        List<TopicPartition> order = new ArrayList<>();
        for (ConsumerRecord<String, String> record : records) {
            TopicPartition partition = new TopicPartition(record.topic(), record.partition());
            byPartition.computeIfAbsent(partition, p -> {
                order.add(p);
                return JSON.createArrayNode();
            }).add(read(record));
        }
        ArrayNode out = JSON.createArrayNode();
        for (TopicPartition partition : order) {
            ArrayNode entry = JSON.createArrayNode();
            entry.add(partition.topic());
            entry.add(partition.partition());
            entry.add(byPartition.get(partition));
            out.add(entry);
        }
        return out;
    }

    /** The queue workload's client process. */
    static final class Queue implements Handler {
        private final JsonNode config;
        private final String topic;
        private final long opTimeoutMs;
        private final KafkaProducer<String, String> producer;
        private KafkaConsumer<String, String> consumer;
        private KafkaProducer<String, String> txnProducer;

        Queue(JsonNode config) {
            this.config = config;
            this.topic = config.get("topic").asText();
            this.opTimeoutMs = config.get("op_timeout_ms").asLong();
            Properties properties = common(config);
            int requestTimeout = (int) Math.max(1000, opTimeoutMs * 8 / 10);
            int linger = config.get("linger_ms").asInt();
            properties.put(ProducerConfig.ACKS_CONFIG, config.get("acks").asText());
            properties.put(ProducerConfig.RETRIES_CONFIG, config.get("retries").asText());
            properties.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG,
                           config.get("idempotence").asText());
            properties.put(ProducerConfig.LINGER_MS_CONFIG, Integer.toString(linger));
            properties.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, Integer.toString(requestTimeout));
            properties.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG,
                           Integer.toString(requestTimeout + linger));
            properties.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, Integer.toString(requestTimeout));
            properties.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "100");
            if (!config.get("idempotence").asBoolean()) {
                properties.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "1");
            }
            properties.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            properties.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            this.producer = new KafkaProducer<>(properties);
        }

        @Override
        public ArrayNode events() {
            return JSON.createArrayNode();
        }

        @Override
        public JsonNode handle(String op, JsonNode request) throws Exception {
            switch (op) {
                case "setup":
                    return setup();
                case "send":
                    return send(request.get("records"));
                case "poll":
                    return poll(request.get("timeout_ms").asLong());
                case "assign":
                    return assign(request.get("partitions"));
                case "end-offsets":
                    return endOffsets(request.get("partitions"));
                case "committed":
                    return committed(request.get("group").asText(), request.get("partitions"));
                case "txn":
                    return txn(request);
                case "close":
                    producer.close(Duration.ZERO);
                    dropTransactional();
                    if (consumer != null) {
                        consumer.close(Duration.ZERO);
                    }
                    return null;
                default:
                    throw new IllegalArgumentException("unknown request " + op);
            }
        }

        /** The transactional producer of `id`, made and initialised at its first use. */
        private KafkaProducer<String, String> transactional(String id, long budgetMs) {
            if (txnProducer != null) {
                return txnProducer;
            }
            KafkaProducer<String, String> made = new KafkaProducer<>(transactionalProperties(
                config, id, config.get("transaction_timeout_ms").asInt(),
                (int) Math.max(1000, budgetMs), config.get("linger_ms").asInt()));
            try {
                made.initTransactions();
            } catch (RuntimeException error) {
                made.close(Duration.ZERO);
                throw error;
            }
            txnProducer = made;
            return made;
        }

        private void dropTransactional() {
            if (txnProducer != null) {
                txnProducer.close(Duration.ZERO);
                txnProducer = null;
            }
        }

        /**
         * One transaction: its sends and polls in order, then commit, or abort when asked or
         * when an abortable error came up. The type says what became of it: ok (committed),
         * fail (certainly not: aborted, or never begun), info (unknown: a fatal error such
         * as being fenced, a commit or abort that timed out). A transaction that did not
         * commit puts the consumer back where it was before, so its polls are forgotten.
         */
        private JsonNode txn(JsonNode request) {
            long budgetMs = request.get("budget_ms").asLong();
            ObjectNode out = JSON.createObjectNode();
            ArrayNode results = JSON.createArrayNode();
            out.set("results", results);
            KafkaProducer<String, String> txn;
            try {
                txn = transactional(request.get("transactional_id").asText(), budgetMs);
                txn.beginTransaction();
            } catch (RuntimeException error) {
                dropTransactional();
                return ended(out, "fail", "init or begin: " + errorName(error));
            }
            KafkaConsumer<String, String> consumer = consumer();
            Map<TopicPartition, Long> before = new HashMap<>();
            for (TopicPartition partition : consumer.assignment()) {
                before.put(partition, consumer.position(partition));
            }
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            String type;
            String why = null;
            try {
                for (JsonNode micro : request.get("micro")) {
                    if ("send".equals(micro.get(0).asText())) {
                        sent.add(txn.send(new ProducerRecord<>(
                            micro.get(1).asText(), micro.get(2).asInt(),
                            micro.get(3).asText(), micro.get(4).asText())));
                        results.add(JSON.createObjectNode());
                    } else {
                        ObjectNode polled = JSON.createObjectNode();
                        polled.set("reads", topicReads(consumer.poll(
                            Duration.ofMillis(micro.get(1).asLong()))));
                        results.add(polled);
                    }
                }
                if (request.get("abort").asBoolean()) {
                    txn.abortTransaction();
                    type = "fail";
                    why = "aborted on purpose";
                } else {
                    txn.commitTransaction();
                    type = "ok";
                }
            } catch (ProducerFencedException | OutOfOrderSequenceException
                     | AuthorizationException | UnsupportedVersionException
                     | TimeoutException error) {
                dropTransactional();
                type = "info";
                why = errorName(error);
            } catch (RuntimeException error) {
                why = errorName(error);
                try {
                    txn.abortTransaction();
                    type = "fail";
                } catch (RuntimeException abortError) {
                    dropTransactional();
                    type = "info";
                    why = why + "; abort: " + errorName(abortError);
                }
            }
            int at = 0;
            for (JsonNode result : results) {
                if (result.has("reads")) {
                    continue;
                }
                Future<RecordMetadata> future = sent.get(at++);
                if (future.isDone()) {
                    try {
                        ((ObjectNode) result).put("offset", future.get().offset());
                    } catch (InterruptedException | ExecutionException failed) {
                        ((ObjectNode) result).putNull("offset");
                    }
                } else {
                    ((ObjectNode) result).putNull("offset");
                }
            }
            if (!"ok".equals(type)) {
                before.forEach(consumer::seek);
            }
            return ended(out, type, why);
        }

        private static JsonNode ended(ObjectNode out, String type, String why) {
            out.put("type", type);
            if (why == null) {
                out.putNull("error");
            } else {
                out.put("error", why);
            }
            return out;
        }

        private Admin admin() {
            Properties properties = common(config);
            properties.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG,
                           Long.toString(Math.max(1000, opTimeoutMs)));
            properties.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG,
                           Long.toString(Math.max(1000, opTimeoutMs)));
            return Admin.create(properties);
        }

        /** Create the topics and wait until each partition has a leader. */
        private JsonNode setup() throws Exception {
            short replication = (short) config.get("replication_factor").asInt();
            Map<String, Integer> counts = new TreeMap<>();
            config.get("topics").fields().forEachRemaining(
                entry -> counts.put(entry.getKey(), entry.getValue().asInt()));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            try (Admin admin = admin()) {
                List<NewTopic> topics = new ArrayList<>();
                counts.forEach((name, count) -> topics.add(new NewTopic(name, count, replication)));
                for (Map.Entry<String, KafkaFuture<Void>> created
                         : admin.createTopics(topics).values().entrySet()) {
                    try {
                        created.getValue().get();
                    } catch (ExecutionException error) {
                        if (!(error.getCause() instanceof TopicExistsException)) {
                            throw error;
                        }
                    }
                }
                while (true) {
                    try {
                        Map<String, TopicDescription> described =
                            admin.describeTopics(counts.keySet()).allTopicNames().get();
                        boolean ready = true;
                        for (TopicDescription description : described.values()) {
                            for (TopicPartitionInfo partition : description.partitions()) {
                                ready &= partition.leader() != null;
                            }
                            ready &= description.partitions().size()
                                >= counts.get(description.name());
                        }
                        if (ready) {
                            return null;
                        }
                    } catch (ExecutionException error) {
                        if (System.nanoTime() > deadline) {
                            throw error;
                        }
                    }
                    if (System.nanoTime() > deadline) {
                        throw new TimeoutException("topics without leaders after 60 s");
                    }
                    Thread.sleep(200);
                }
            }
        }

        /** Each record's offset, or its error, or {"pending": true} after the op timeout. */
        private JsonNode send(JsonNode records) throws InterruptedException {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            List<Exception> thrown = new ArrayList<>();
            for (JsonNode record : records) {
                try {
                    futures.add(producer.send(new ProducerRecord<>(
                        record.get(0).asText(), record.get(1).asInt(),
                        record.get(2).asText(), record.get(3).asText())));
                    thrown.add(null);
                } catch (Exception error) {
                    futures.add(null);
                    thrown.add(error);
                }
            }
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(opTimeoutMs * 9 / 10);
            ArrayNode out = JSON.createArrayNode();
            for (int i = 0; i < futures.size(); i++) {
                ObjectNode delivery = JSON.createObjectNode();
                Future<RecordMetadata> future = futures.get(i);
                Throwable error = thrown.get(i);
                if (future != null) {
                    try {
                        long left = Math.max(0, deadline - System.nanoTime());
                        RecordMetadata metadata = future.get(left, TimeUnit.NANOSECONDS);
                        delivery.put("offset", metadata.hasOffset() ? metadata.offset() : -1);
                    } catch (java.util.concurrent.TimeoutException pending) {
                        delivery.put("pending", true);
                    } catch (ExecutionException failed) {
                        error = failed.getCause();
                    }
                }
                if (error != null) {
                    delivery.put("error", errorName(error));
                    delivery.put("exception", error.getClass().getSimpleName());
                    delivery.put("sent", !neverSent(error));
                }
                out.add(delivery);
            }
            return out;
        }

        /** The producer gave up before the record could leave: it never had the topic's
         * metadata (max.block.ms), or the client refused the record itself. */
        private static boolean neverSent(Throwable error) {
            String message = String.valueOf(error.getMessage());
            return error instanceof TimeoutException && message.contains("not present in metadata");
        }

        private KafkaConsumer<String, String> consumer() {
            if (consumer == null) {
                Properties properties = common(config);
                properties.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
                properties.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
                properties.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
                properties.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG,
                               config.get("isolation_level").asText());
                properties.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG,
                               config.get("max_poll_records").asText());
                properties.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                               StringDeserializer.class.getName());
                properties.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                               StringDeserializer.class.getName());
                consumer = new KafkaConsumer<>(properties);
            }
            return consumer;
        }

        private JsonNode poll(long timeoutMs) {
            return topicReads(consumer().poll(Duration.ofMillis(timeoutMs)));
        }

        /** Assign [[topic, partition, start or null (the beginning)], ...]. */
        private JsonNode assign(JsonNode partitions) {
            KafkaConsumer<String, String> consumer = consumer();
            List<TopicPartition> assigned = new ArrayList<>();
            List<TopicPartition> fromStart = new ArrayList<>();
            Map<TopicPartition, Long> starts = new HashMap<>();
            for (JsonNode entry : partitions) {
                TopicPartition partition =
                    new TopicPartition(entry.get(0).asText(), entry.get(1).asInt());
                assigned.add(partition);
                if (entry.get(2).isNull()) {
                    fromStart.add(partition);
                } else {
                    starts.put(partition, entry.get(2).asLong());
                }
            }
            consumer.assign(assigned);
            if (!fromStart.isEmpty()) {
                consumer.seekToBeginning(fromStart);
            }
            starts.forEach(consumer::seek);
            return null;
        }

        private List<TopicPartition> partitions(JsonNode numbers) {
            List<TopicPartition> partitions = new ArrayList<>();
            numbers.forEach(number -> partitions.add(new TopicPartition(topic, number.asInt())));
            return partitions;
        }

        /** Each partition's end offset, read_uncommitted: its high watermark. */
        private JsonNode endOffsets(JsonNode numbers) {
            Properties properties = common(config);
            properties.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
            properties.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            properties.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            properties.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            try (KafkaConsumer<String, String> reader = new KafkaConsumer<>(properties)) {
                Map<TopicPartition, Long> ends =
                    reader.endOffsets(partitions(numbers), Duration.ofMillis(opTimeoutMs));
                ArrayNode out = JSON.createArrayNode();
                ends.forEach((partition, end) ->
                    out.add(pair(JSON.valueToTree(partition.partition()), JSON.valueToTree(end))));
                return out;
            }
        }

        /** The group's committed (next) offset of each partition, null where it has none;
         * stable: the broker holds the answer while a transaction with offsets of the group
         * is open (the Admin retries until its timeout). */
        private JsonNode committed(String group, JsonNode numbers) throws Exception {
            try (Admin admin = admin()) {
                Map<TopicPartition, OffsetAndMetadata> found = admin
                    .listConsumerGroupOffsets(group,
                                              new ListConsumerGroupOffsetsOptions().requireStable(true))
                    .partitionsToOffsetAndMetadata()
                    .get(opTimeoutMs, TimeUnit.MILLISECONDS);
                ArrayNode out = JSON.createArrayNode();
                for (TopicPartition partition : partitions(numbers)) {
                    OffsetAndMetadata offset = found.get(partition);
                    out.add(pair(JSON.valueToTree(partition.partition()),
                                 offset == null ? JSON.nullNode() : JSON.valueToTree(offset.offset())));
                }
                return out;
            }
        }
    }

    /** A subscribe-mode group member. */
    static final class Member implements Handler, ConsumerRebalanceListener {
        private final String topic;
        private final String commitMode;
        private final long pollTimeoutMs;
        private final long opTimeoutMs;
        private final Map<Integer, JsonNode> keys;
        private final Map<String, Integer> partitionOfKey = new HashMap<>();
        private final KafkaConsumer<String, String> consumer;
        private ArrayNode events = JSON.createArrayNode();

        Member(JsonNode config, String isolationLevel) {
            this.topic = config.get("topic").asText();
            this.commitMode = config.get("commit").asText();
            this.pollTimeoutMs = (long) (config.get("poll_timeout").asDouble() * 1000);
            this.opTimeoutMs = (long) (config.get("op_timeout").asDouble() * 1000);
            this.keys = partitionKeys(config);
            keys.forEach((partition, key) -> partitionOfKey.put(key.asText(), partition));
            int session = config.get("session_timeout_ms").asInt();
            Properties properties = common(config);
            properties.put(ConsumerConfig.GROUP_ID_CONFIG, config.get("group").asText());
            properties.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG,
                           Boolean.toString("auto".equals(commitMode)));
            properties.put(ConsumerConfig.AUTO_COMMIT_INTERVAL_MS_CONFIG, "1000");
            properties.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            properties.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
            properties.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolationLevel);
            properties.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG,
                           config.get("max_poll_records").asText());
            JsonNode protocol = config.get("group_protocol");
            if (protocol != null && "consumer".equals(protocol.asText())) {
                properties.put("group.protocol", "consumer");
            } else {
                properties.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Integer.toString(session));
                properties.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG,
                               Integer.toString(Math.max(100, session / 3)));
            }
            properties.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG,
                           Integer.toString(Math.max(2 * session, 10_000)));
            properties.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG,
                           Long.toString(Math.max(session + 1000, opTimeoutMs)));
            properties.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                           StringDeserializer.class.getName());
            properties.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                           StringDeserializer.class.getName());
            this.consumer = new KafkaConsumer<>(properties);
        }

        @Override
        public synchronized ArrayNode events() {
            ArrayNode taken = events;
            events = JSON.createArrayNode();
            return taken;
        }

        private synchronized void record(Collection<TopicPartition> assigned,
                                         Collection<TopicPartition> revoked, boolean lost) {
            ArrayNode assignedKeys = keysOf(assigned);
            ArrayNode revokedKeys = keysOf(revoked);
            if (assignedKeys.isEmpty() && revokedKeys.isEmpty()) {
                return;
            }
            ObjectNode event = JSON.createObjectNode();
            event.put("time", System.nanoTime());
            int generation = consumer.groupMetadata().generationId();
            String member = consumer.groupMetadata().memberId();
            if (generation >= 0) {
                event.put("generation", generation);
            } else {
                event.putNull("generation");
            }
            if (member == null || member.isEmpty()) {
                event.putNull("member");
            } else {
                event.put("member", member);
            }
            event.set("assigned", assignedKeys);
            event.set("revoked", revokedKeys);
            event.put("lost", lost);
            events.add(event);
        }

        private ArrayNode keysOf(Collection<TopicPartition> partitions) {
            List<Integer> numbers = new ArrayList<>();
            for (TopicPartition partition : partitions) {
                if (partition.topic().equals(topic) && keys.containsKey(partition.partition())) {
                    numbers.add(partition.partition());
                }
            }
            Collections.sort(numbers);
            ArrayNode out = JSON.createArrayNode();
            numbers.forEach(number -> out.add(keys.get(number)));
            return out;
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            record(partitions, Set.of(), false);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            record(Set.of(), partitions, false);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            record(Set.of(), partitions, true);
        }

        @Override
        public JsonNode handle(String op, JsonNode request) {
            switch (op) {
                case "subscribe":
                    consumer.subscribe(List.of(topic), this);
                    return null;
                case "poll":
                    return poll();
                case "commit":
                    return commit(request.get("offsets"));
                case "close":
                    consumer.close(Duration.ofMillis(opTimeoutMs));
                    return null;
                default:
                    throw new IllegalArgumentException("unknown request " + op);
            }
        }

        /** One poll; in before-process mode, commit what it fetched first (and answer the
         * records as unprocessed when that commit is not ok). */
        private JsonNode poll() {
            ArrayNode reads = JSON.createArrayNode();
            ArrayNode offsets = JSON.createArrayNode();
            keyed(reads(consumer.poll(Duration.ofMillis(pollTimeoutMs))), reads, offsets);
            ObjectNode result = JSON.createObjectNode();
            result.set("reads", reads);
            result.set("errors", JSON.createArrayNode());
            if (!"before-process".equals(commitMode) || reads.isEmpty()) {
                return result;
            }
            ObjectNode commit = commit(offsets);
            commit.set("offsets", offsets);
            commit.put("time", System.nanoTime());
            result.set("commit", commit);
            if (!"ok".equals(commit.get("type").asText())) {
                ArrayNode unprocessed = JSON.createArrayNode();
                for (JsonNode entry : reads) {
                    ArrayNode numbers = JSON.createArrayNode();
                    entry.get(1).forEach(read -> numbers.add(read.get(0)));
                    unprocessed.add(pair(entry.get(0), numbers));
                }
                result.set("reads", JSON.createArrayNode());
                result.set("unprocessed", unprocessed);
            }
            return result;
        }

        /** One poll's records by partition (`reads(records)`) into `reads`, [[key, [[offset,
         * value], ...]], ...], and each key's next offset into `offsets`, [[key, next], ...]. */
        private void keyed(ArrayNode byPartition, ArrayNode reads, ArrayNode offsets) {
            for (JsonNode entry : byPartition) {
                JsonNode key = keys.get(entry.get(0).asInt());
                JsonNode pairs = entry.get(1);
                reads.add(pair(key, pairs));
                long last = pairs.get(pairs.size() - 1).get(0).asLong();
                offsets.add(pair(key, JSON.valueToTree(last + 1)));
            }
        }

        /** Commit [[key, next offset], ...] synchronously: ok, fail when the group refused
         * it (nothing was written), info otherwise. */
        private ObjectNode commit(JsonNode offsets) {
            Map<TopicPartition, OffsetAndMetadata> commits = new HashMap<>();
            for (JsonNode entry : offsets) {
                int partition = partitionOfKey.get(entry.get(0).asText());
                commits.put(new TopicPartition(topic, partition),
                            new OffsetAndMetadata(entry.get(1).asLong()));
            }
            ObjectNode result = JSON.createObjectNode();
            try {
                consumer.commitSync(commits, Duration.ofMillis(opTimeoutMs));
                result.put("type", "ok");
                result.putNull("error");
            } catch (CommitFailedException | RebalanceInProgressException
                     | IllegalGenerationException | UnknownMemberIdException
                     | FencedInstanceIdException rejected) {
                result.put("type", "fail");
                result.put("error", rejected.getClass().getSimpleName());
            } catch (RuntimeException error) {
                result.put("type", "info");
                result.put("error", error.getClass().getSimpleName());
            }
            return result;
        }
    }

    /**
     * A transfer worker: a read_committed group member (without auto commit) and a
     * transactional producer. A transfer polls once; when it read records, one transaction
     * sends one output record per input record (value `input:attempt`, to the output
     * partition of the input's key), sends the input offsets after them to the
     * transaction with the consumer's group metadata (KIP-447), and commits, or aborts when
     * asked or after an abortable error. After an abort the consumer seeks back to the
     * first offset it read of each key, so the next transfer reads the records again.
     * Type: ok (committed), fail (certainly not), info (fenced or another fatal error, or
     * a commit or abort that timed out: unknown). Abandoned with a transaction whose end
     * timed out, the worker keeps retrying that end for a while, as a zombie.
     */
    static final class Transfer implements Handler {
        private static final long ZOMBIE_MS = 30_000;
        private final Member member;
        private final String outputTopic;
        private final Map<Integer, JsonNode> outputKeys = new HashMap<>();
        private final Map<Integer, Integer> outputPartitions = new HashMap<>();
        private final long opTimeoutMs;
        private final KafkaProducer<String, String> producer;
        private String pending;

        Transfer(JsonNode config) {
            JsonNode memberConfig = config.get("member");
            this.member = new Member(memberConfig, "read_committed");
            this.outputTopic = config.get("output_topic").asText();
            this.opTimeoutMs = (long) (memberConfig.get("op_timeout").asDouble() * 1000);
            for (JsonNode entry : config.get("outputs")) {
                int input = member.partitionOfKey.get(entry.get(0).asText());
                outputKeys.put(input, entry.get(1));
                outputPartitions.put(input, entry.get(2).asInt());
            }
            JsonNode settings = config.get("producer");
            this.producer = new KafkaProducer<>(transactionalProperties(
                memberConfig, settings.get("transactional_id").asText(),
                settings.get("transaction_timeout_ms").asInt(),
                (int) Math.max(1000, opTimeoutMs * 3 / 10), settings.get("linger_ms").asInt()));
        }

        @Override
        public ArrayNode events() {
            return member.events();
        }

        @Override
        public JsonNode handle(String op, JsonNode request) {
            switch (op) {
                case "subscribe":
                    member.consumer.subscribe(List.of(member.topic), member);
                    initTransactions();
                    return null;
                case "transfer":
                    return transfer(request.get("abort").asBoolean(), request.get("attempt").asLong());
                case "close":
                    member.consumer.close(Duration.ofMillis(opTimeoutMs));
                    return null;
                default:
                    throw new IllegalArgumentException("unknown request " + op);
            }
        }

        /** InitProducerId (fencing the id's earlier producers), again after timeouts (the
         * transaction coordinator still loading, the id's last transaction still ending)
         * while 80% of the op timeout lasts. */
        private void initTransactions() {
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(opTimeoutMs * 8 / 10);
            while (true) {
                try {
                    producer.initTransactions();
                    return;
                } catch (TimeoutException error) {
                    if (System.nanoTime() > deadline) {
                        throw error;
                    }
                }
            }
        }

        private JsonNode transfer(boolean abort, long attempt) {
            ConsumerRecords<String, String> records =
                member.consumer.poll(Duration.ofMillis(member.pollTimeoutMs));
            ObjectNode result = JSON.createObjectNode();
            ArrayNode reads = JSON.createArrayNode();
            ArrayNode outputs = JSON.createArrayNode();
            ArrayNode offsets = JSON.createArrayNode();
            result.set("reads", reads);
            result.set("outputs", outputs);
            result.set("offsets", offsets);
            result.set("errors", JSON.createArrayNode());
            member.keyed(reads(records), reads, offsets);
            Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
            Map<TopicPartition, Long> first = new HashMap<>();
            for (int i = 0; i < reads.size(); i++) {
                TopicPartition input = new TopicPartition(
                    member.topic, member.partitionOfKey.get(reads.get(i).get(0).asText()));
                next.put(input, new OffsetAndMetadata(offsets.get(i).get(1).asLong()));
                first.put(input, reads.get(i).get(1).get(0).get(0).asLong());
            }
            if (records.isEmpty()) {
                return Queue.ended(result, "ok", null);
            }
            try {
                producer.beginTransaction();
            } catch (RuntimeException error) {
                return Queue.ended(result, "info", "begin_transaction: " + errorName(error));
            }
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            String type;
            String why = null;
            String step = "send";
            try {
                for (ConsumerRecord<String, String> record : records) {
                    String value = record.value() + ":" + attempt;
                    JsonNode outKey = outputKeys.get(record.partition());
                    sent.add(producer.send(new ProducerRecord<>(
                        outputTopic, outputPartitions.get(record.partition()), outKey.asText(), value)));
                    outputs.add(pair(outKey, JSON.valueToTree(value)));
                }
                step = "send_offsets";
                producer.sendOffsetsToTransaction(next, member.consumer.groupMetadata());
                if (abort) {
                    step = "abort";
                    pending = "abort";
                    producer.abortTransaction();
                    pending = null;
                    type = "fail";
                    why = "aborted on purpose";
                } else {
                    step = "commit";
                    pending = "commit";
                    producer.commitTransaction();
                    pending = null;
                    type = "ok";
                }
            } catch (ProducerFencedException | OutOfOrderSequenceException
                     | AuthorizationException | UnsupportedVersionException error) {
                pending = null;
                type = "info";
                why = step + ": " + errorName(error);
            } catch (TimeoutException error) {
                pending = "commit".equals(step) ? "commit" : "abort";
                type = "info";
                why = step + ": " + errorName(error);
            } catch (RuntimeException error) {
                why = step + ": " + errorName(error);
                try {
                    pending = "abort";
                    producer.abortTransaction();
                    pending = null;
                    type = "fail";
                } catch (RuntimeException abortError) {
                    type = "info";
                    why = why + "; abort: " + errorName(abortError);
                }
            }
            ArrayNode withOffsets = JSON.createArrayNode();
            for (int i = 0; i < outputs.size(); i++) {
                Long offset = null;
                Future<RecordMetadata> future = sent.get(i);
                if (future.isDone()) {
                    try {
                        offset = future.get().offset();
                    } catch (InterruptedException | ExecutionException failed) {
                        offset = null;
                    }
                }
                ArrayNode output = JSON.createArrayNode();
                output.add(outputs.get(i).get(0));
                output.add(offset == null ? JSON.nullNode() : JSON.valueToTree(offset));
                output.add(outputs.get(i).get(1));
                withOffsets.add(output);
            }
            result.set("outputs", withOffsets);
            if ("fail".equals(type) && !rewind(first)) {
                type = "info";
                why = why + "; the consumer could not seek back";
            }
            return Queue.ended(result, type, why);
        }

        /** Seek each partition read back to its first record read, if still assigned. */
        private boolean rewind(Map<TopicPartition, Long> first) {
            try {
                Set<TopicPartition> assigned = member.consumer.assignment();
                first.forEach((partition, offset) -> {
                    if (assigned.contains(partition)) {
                        member.consumer.seek(partition, offset);
                    }
                });
                return true;
            } catch (RuntimeException error) {
                return false;
            }
        }

        @Override
        public void abandoned() {
            if (pending == null) {
                return;
            }
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ZOMBIE_MS);
            String outcome = "out of time";
            while (pending != null && System.nanoTime() < deadline) {
                try {
                    if ("commit".equals(pending)) {
                        producer.commitTransaction();
                    } else {
                        producer.abortTransaction();
                    }
                    outcome = pending + " went through";
                    pending = null;
                } catch (TimeoutException error) {
                    outcome = pending + " failed: " + errorName(error);
                } catch (RuntimeException error) {
                    outcome = pending + " failed: " + errorName(error);
                    break;
                }
            }
            System.err.println("abandoned with a transaction pending, as a zombie: " + outcome);
        }
    }
}
