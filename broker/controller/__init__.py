"""The ZooKeeper-era controller: one event queue, state machines, pure elections."""
