"""streamslo: load testing and SLO verification for streaming LLM endpoints.

The shared core lives here: the Sans-I/O stream measurement code (:mod:`streamslo.stream`),
the blocking-socket transports (:mod:`streamslo.transport`), the results directory
(:mod:`streamslo.results.layout`), the metrics maths (:mod:`streamslo.figures.metrics`) and the thresholds
(:mod:`streamslo.slo.thresholds`). The command line is :mod:`streamslo.cli`.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
