"""Replication: partitions (ISR, high watermark), replica manager, follower fetchers."""
