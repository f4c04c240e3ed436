"""Metrics and report layer: metrics.jsonl, summary.json, progress and tables."""

from gnntrain.metrics.recorder import RunRecorder, build_summary, failed_summary, write_json_atomic

__all__ = ["RunRecorder", "build_summary", "failed_summary", "write_json_atomic"]
