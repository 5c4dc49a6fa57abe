"""Long-running robustness runs; full size with OUTBOX_SOAK=1."""
