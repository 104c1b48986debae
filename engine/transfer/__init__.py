"""Moving KV blocks between workers: layout agreement, the NIXL agent, pull state."""
