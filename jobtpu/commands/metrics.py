"""`jobtpu metrics`: the home's figures in the Prometheus text format, for node_exporter's textfile
collector from cron (no server); `jobtpu serve` answers the same at /metrics."""

from __future__ import annotations

import sys

from jobtpu.commands import args
from jobtpu.home.layout import Home


def metrics(home: Home) -> int:
    from jobtpu.home.store import Store
    from jobtpu.web.metrics import metrics_text

    sys.stdout.write(metrics_text(home, Store(home).load()))
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "metrics")
    p.set_defaults(func=lambda home, a: metrics(home))
