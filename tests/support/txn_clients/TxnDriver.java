import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client's (kafka-clients) transactional producer of the tests, driven over stdin:
 * one command a line, one JSON answer a line ({"ok":true} or {"ok":false,"error":CLASS,
 * "message":...}). Commands: init, begin, send PARTITION VALUE, flush (waits for every send
 * since the last flush), offsets GROUP TOPIC PARTITION OFFSET (sendOffsetsToTransaction),
 * commit, abort, close.
 *
 * Usage: java TxnDriver BOOTSTRAP TRANSACTIONAL_ID TOPIC
 */
public final class TxnDriver {
    private static final PrintStream OUT = new PrintStream(System.out, true);

    private final String topic;
    private final KafkaProducer<String, String> producer;
    private final List<Future<RecordMetadata>> sent = new ArrayList<>();

    private TxnDriver(String bootstrap, String transactionalId, String topic) {
        Properties properties = new Properties();
        properties.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        properties.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        properties.put(ProducerConfig.ACKS_CONFIG, "all");
        properties.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        properties.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        properties.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        properties.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "30000");
        properties.put(ProducerConfig.METADATA_MAX_AGE_CONFIG, "1000");
        properties.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        properties.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG,
                       StringSerializer.class.getName());
        this.topic = topic;
        this.producer = new KafkaProducer<>(properties);
    }

    private boolean run(String[] command) throws Exception {
        switch (command[0]) {
            case "init" -> producer.initTransactions();
            case "begin" -> producer.beginTransaction();
            case "send" -> sent.add(producer.send(
                new ProducerRecord<>(topic, Integer.parseInt(command[1]), command[2], command[2])));
            case "flush" -> {
                producer.flush();
                for (Future<RecordMetadata> future : sent) {
                    future.get();
                }
                sent.clear();
            }
            case "offsets" -> producer.sendOffsetsToTransaction(
                Map.of(new TopicPartition(command[2], Integer.parseInt(command[3])),
                       new OffsetAndMetadata(Long.parseLong(command[4]))),
                new ConsumerGroupMetadata(command[1]));
            case "commit" -> producer.commitTransaction();
            case "abort" -> producer.abortTransaction();
            case "close" -> {
                producer.close();
                return false;
            }
            default -> throw new IllegalArgumentException("unknown command " + command[0]);
        }
        return true;
    }

    public static void main(String[] args) throws Exception {
        TxnDriver driver = new TxnDriver(args[0], args[1], args[2]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        boolean going = true;
        String line;
        while (going && (line = in.readLine()) != null) {
            try {
                going = driver.run(line.trim().split(" "));
                OUT.println("{\"ok\":true}");
            } catch (Exception exc) {
                Throwable cause = exc.getCause() != null && exc instanceof java.util.concurrent.ExecutionException
                    ? exc.getCause() : exc;
                OUT.println("{\"ok\":false,\"error\":\"" + cause.getClass().getSimpleName()
                            + "\",\"message\":\"" + String.valueOf(cause.getMessage())
                                .replace("\\", "\\\\").replace("\"", "'") + "\"}");
            }
        }
    }
}
