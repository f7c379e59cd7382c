"""The MLX mixture-of-experts engine under test (GLM-4.5 MoE family).

Imports nothing from the rest of `runner`. Public surface:

    from . import Engine
    eng = Engine.from_pretrained("tiny", max_batch_size=4, prefill_chunk=256, sink=events.append)
    outs = eng.generate([[1, 2, 3], [4, 5]], max_new_tokens=32, temperature=0.0)

For closed-loop drivers (the runner): `rid = eng.add_request(ids, max_new_tokens, ...)`,
then call `eng.step()` while `eng.has_work()`; `step()` returns the RequestEvents of the
requests that finished in the pass it committed (they also go to the sink). With
`pipeline=True` (the default) a step may leave the next decode pass queued: `has_work()`
stays true until it is committed too. `eng.collect(prompts, max_new_tokens)` runs
one generate() call and returns its outputs with the pass and request events it sent.
"""

from .config import EngineConfig, ModelArgs, parse_bytes
from .events import Collected, EventSink, PassEvent, RequestEvent


def __getattr__(name):
    # Engine pulls in MLX model code; import it on first use so that light users
    # (declaration validation, the store) stay fast.
    if name == "Engine":
        from .engine import Engine

        return Engine
    raise AttributeError(name)


__all__ = [
    "Engine",
    "EngineConfig",
    "ModelArgs",
    "PassEvent",
    "RequestEvent",
    "EventSink",
    "parse_bytes",
    "Collected",
]
