"""Capture: where mail goes instead of the network on staging (OUTBOX_DELIVERY), the store
that keeps it (`store`) and the transport the worker sends through (`transport`)."""
