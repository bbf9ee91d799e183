"""The system under test: a Kafka-protocol broker with a ZooKeeper controller and ISR replication."""
