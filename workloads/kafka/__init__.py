"""Kafka client adapters (confluent-kafka, kafka-python): producers, consumers, transactions,
group members, and the classification of Kafka errors."""
