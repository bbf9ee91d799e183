"""The Apache Kafka Java client as the queue workload's client: `KchaosClient.java` run as a
child process (`workloads.kafka.java.client`), compiled per Kafka version (`build`)."""
