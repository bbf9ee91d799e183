"""Pure history analysis, one family a subpackage.

`history` is the contract everything shares (op types, JSONL, EDN, Porcupine's formats);
`core` the Checker and KeyedChecker protocols, Result and compose; `queue` the queue
analysis and the checkers judging it (queue, acks); `lin` linearizability; `txn`
transaction cycles; `groups` consumer groups; `cluster` the checkers reading the
controller event log (elections, availability); `transfer` exactly-once transfers;
`faults` which asked faults took effect; `registry` the checkers by name; `spark` runs
them on Spark, key by key.
"""
