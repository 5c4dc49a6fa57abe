"""Running outbox: liveness and readiness probes, metrics, heartbeats, the pause, the figures
and reads behind the pages.
"""
