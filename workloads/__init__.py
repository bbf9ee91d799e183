"""Clients that record histories, their generators and the workloads built of them.

`core` is what every workload shares (the client protocol, the worker, generators, final
reads, the `workload` part); `kafka` holds the Kafka client adapters and how their errors
are classified; `groups` runs consumer-group members in child processes; `queue` and
`transfer` are the workloads, named in `registry`.
"""
