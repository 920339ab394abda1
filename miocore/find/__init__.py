"""Find: from a problem to a solution that runs.

``handle`` is the public facade; ``invoker_cache`` holds built invokers. This room may import
the solver contract, the problem model, storage (``miocore.db``) and backends; nothing below it
imports this room.
"""

from miocore.find.handle import Handle

__all__ = ["Handle"]
