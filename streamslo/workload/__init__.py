"""What the load sends: request options and bodies (:mod:`~streamslo.workload.requests`),
prompt datasets (:mod:`~streamslo.workload.datasets`), synthetic prompts
(:mod:`~streamslo.workload.prompts`) and k6-style scenarios (:mod:`~streamslo.workload.scenarios`).
"""

__all__: list[str] = []
