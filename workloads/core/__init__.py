"""What every workload shares: the client protocol, the worker, generators, final reads
and the `workload` part of a test."""
