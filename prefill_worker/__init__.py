"""prefill_worker."""
