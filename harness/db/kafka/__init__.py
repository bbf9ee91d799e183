"""Apache Kafka as a system under test: its jars (`distribution`), how a node runs it
(`broker`), its controller and state-change logs read as controller events (`logs`),
and the `kafka` db part (`db`)."""
