"""gunicorn's settings for outbox's web app and API: /etc/outbox/gunicorn.conf.py."""

import os

# nginx on this host proxies to it (deploy/nginx.conf). A proxy on another host: bind an
# address it reaches, and name the proxy in forwarded_allow_ips below.
bind = ["127.0.0.1:8000"]

# Threads hide the database's round trips: on two cores 2 processes x 4 threads took the
# most requests a second (docs: internals/speed.md). One process per CPU this service may use.
worker_class = "gthread"
workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
threads = 4

# A web process that does not check in with gunicorn for this long is killed and
# replaced (gthread checks in between requests too: this bounds a hung process).
timeout = 60
# On SIGTERM (systemctl stop) and HUP (systemctl reload) a web process gets this long to
# finish the requests in hand; outbox-web.service's TimeoutStopSec is longer.
graceful_timeout = 30
# The heartbeat files on tmpfs: a slow disk must not make a web process look hung.
worker_tmp_dir = "/dev/shm"
# Off: HUP then starts web processes that import the code installed now (a new wheel).
preload_app = False

# X-Forwarded-Proto is taken (the request's scheme, https) only from these addresses.
# outbox itself reads X-Forwarded-For and -Proto only with OUTBOX_TRUST_PROXY=true:
# set it behind nginx, or every client is 127.0.0.1 to the sign-in lockout.
forwarded_allow_ips = "127.0.0.1,::1"

# To the journal: the client nginx saw (X-Forwarded-For), request, status, size, ms.
accesslog = "-"
access_log_format = '%({x-forwarded-for}i)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(M)sms'
proc_name = "outbox-web"

# gunicorn 25.1+ listens for `gunicornc` on a control socket: in the service's runtime
# folder (systemd sets RUNTIME_DIRECTORY), not under a home made read-only.
control_socket = os.path.join(
    os.environ.get("RUNTIME_DIRECTORY", "/run/outbox").split(":")[0], "gunicorn.ctl"
)


def child_exit(server, worker):
    """A web process ended: drop its live gauges from the prometheus files (multiprocess mode)."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    try:
        from prometheus_client import multiprocess
    except ImportError:  # metrics are not installed: nothing to clean up
        return
    multiprocess.mark_process_dead(worker.pid)
