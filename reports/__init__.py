"""HTML anomaly reports, plots, the store index and `kchaos serve`."""

from reports.index import write_index
from reports.report import Report, write_report
from reports.server import make_server

__all__ = ["Report", "make_server", "write_index", "write_report"]
