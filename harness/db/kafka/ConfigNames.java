/** Prints every broker property name this Kafka version's KafkaConfig defines, one a line. */
public class ConfigNames {
    public static void main(String[] args) {
        System.out.println(kafka.server.KafkaConfig.configNames().mkString("\n"));
    }
}
