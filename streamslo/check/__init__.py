"""``streamslo check URL``: a server's stream contract, checked before any load (docs/check.md).

- ``contract.py``  the checks: protocols, terminal marker, max_tokens, ignore_eos, usage, errors,
  /v1/models, /metrics, keep-alive reuse; each with the run flags the server needs
The shell (arguments, the table, the JSON file, exit 0 / 99 / 2) is
:mod:`streamslo.commands.check`.
"""

__all__: list[str] = []
