"""The system under test: a Kafka-protocol broker, ZooKeeper controller and ISR replication."""
