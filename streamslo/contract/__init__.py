"""A server's stream contract, learned before the load (docs/servers.md, "What a run learns
before the load").

- ``probe.py``  one probe request at a time, judged by the run's own tracker (also the
  preflight's and ``check``'s)
- ``eos.py``    the model's end-of-sequence ids (flags, a local tokenizer folder, the server)
- ``learn.py``  the probes and what they prove: the terminal marker, usage, the per-chunk count,
  merged tokens, each means of forcing the length, whether greedy replies repeat
- ``model.py``  :class:`~streamslo.contract.model.Contract`: the findings, the run options they
  set (:class:`~streamslo.contract.model.Adaptation`) and the truth a run can check

Shared by ``streamslo run``'s preflight (:mod:`streamslo.run.preflight`) and ``streamslo check``
(:mod:`streamslo.check.contract`).
"""

from streamslo.contract.learn import learn
from streamslo.contract.model import Adaptation, Contract, MeansStatus, MeansTried

__all__ = ["Adaptation", "Contract", "MeansStatus", "MeansTried", "learn"]
