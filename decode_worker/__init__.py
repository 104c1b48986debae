"""decode_worker."""
