"""The transfer workload: consume-transform-produce, exactly once."""
