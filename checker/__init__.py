"""Pure history analysis: history format, linearizability, queue, acks and election checkers."""
