"""The suite's locustfile with the test-start prewarm switched off (before/after comparison)."""

import streamslo.loadgen.hooks as _hooks
from streamslo.loadgen.locustfile import *  # noqa: F403

_hooks.prewarm = lambda: None  # type: ignore[attr-defined]
