"""The queue analysis: per-key events, logs, anomaly finders and dependency edges, folded
into one analysis that the queue, acks, elections and txn checkers judge."""
