"""`Evaluation`: the report of a running server (`Evaluation.GetMetrics`) as
plain dicts, shaped like the output of `rankwatch replay --format json`."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Dict, Optional, Type

import grpc

from rankwatch.v1 import rankwatch_pb2 as pb
from rankwatch.v1 import rankwatch_pb2_grpc as pb_grpc

#: The reasons an interaction stays unattributed (docs/SPEC.md §3); reported even when zero.
UNATTRIBUTED_REASONS = ("no_impression", "outside_window", "not_in_list")


class Evaluation:
    """A client of the `Evaluation` service."""

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        credentials: Optional[grpc.ChannelCredentials] = None,
    ) -> None:
        """A client of the server at `target` (`host:port`), TLS when `credentials` are given."""
        # A report has no size limit (1,000 groups compared with a control
        # are tens of megabytes): past gRPC's usual 4 MiB it is read whole.
        options = [("grpc.max_receive_message_length", -1)]
        if credentials is None:
            self._channel = grpc.insecure_channel(target, options=options)
        else:
            self._channel = grpc.secure_channel(target, credentials, options=options)
        self._stub = pb_grpc.EvaluationStub(self._channel)

    def get_metrics(self, window: str = "", timeout: Optional[float] = 30.0) -> Dict[str, Any]:
        """The report since start (`window` empty) or for a configured rolling
        window such as `"5m"`: `config`, `counters`, `groups` and `window`."""
        report = self._stub.GetMetrics(pb.GetMetricsRequest(window=window), timeout=timeout)
        return report_dict(report)

    def close(self) -> None:
        """Closes the channel."""
        self._channel.close()

    def __enter__(self) -> "Evaluation":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.close()


def report_dict(report: pb.Report) -> Dict[str, Any]:
    """A `Report` in the shape of `rankwatch replay --format json` (plus `window`)."""
    counters = report.counters
    return {
        "config": {
            "k": list(report.config.k),
            "attribution_window_s": report.config.attribution_window_s,
            "allowed_lateness_s": report.config.allowed_lateness_s,
            "gain": report.config.gain,
            **({"control_model": report.config.control_model} if report.config.control_model else {}),
        },
        "counters": {
            "impressions": counters.impressions,
            "interactions": counters.interactions,
            "credited": counters.credited,
            "unattributed": {
                **{reason: 0 for reason in UNATTRIBUTED_REASONS},
                **dict(counters.unattributed),
            },
            "late": {"impressions": counters.late_impressions},
            "duplicates": {
                "impressions": counters.duplicate_impressions,
                "interactions": counters.duplicate_interactions,
            },
            "rejected": dict(counters.rejected),
            **({"shed": dict(sorted(counters.shed.items()))} if counters.shed else {}),
            **({"unregistered_interleaved_lists": counters.unregistered_interleaved_lists}
               if counters.unregistered_interleaved_lists else {}),
        },
        "groups": [
            {
                "model": group.model,
                "surface": group.surface,
                **({"segments": dict(sorted(group.segments.items()))} if group.segments else {}),
                "lists": group.lists,
                "engaged_lists": group.engaged_lists,
                "metrics": {
                    key: {
                        "all": mean.all,
                        "engaged": mean.engaged,
                        "se_all": mean.se_all,
                        "se_engaged": mean.se_engaged,
                    }
                    for key, mean in sorted(group.metrics.items())
                },
            }
            for group in report.groups
        ],
        **({"comparisons": [comparison_dict(c) for c in report.comparisons]}
           if report.config.control_model else {}),
        "window": report.window,
    }


def comparison_dict(comparison: pb.Comparison) -> Dict[str, Any]:
    """A `Comparison` in the shape of the replay's `comparisons` entries."""
    return {
        "surface": comparison.surface,
        **({"segments": dict(sorted(comparison.segments.items()))} if comparison.segments else {}),
        "model": comparison.model,
        "control": comparison.control,
        "metric": comparison.metric,
        "diff": comparison.diff,
        "se": comparison.se,
        "ci95": [comparison.ci95_lower, comparison.ci95_upper],
        "cs95": [comparison.cs95_lower, comparison.cs95_upper],
    }
