"""Consumer groups: a history read as groups, and their anomaly finders and checker."""
