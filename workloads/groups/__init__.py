"""Consumer-group members in child processes of their own, and the group ops' generators."""
