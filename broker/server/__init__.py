"""The Kafka wire protocol: the client listener, request framing and one module per API."""
