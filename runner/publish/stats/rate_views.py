"""Which rates of a rate sweep a table or chart shows, and the View of each.

- Outside a sweep a block reads one View of every run (`[None]`). On a sweep a block
  shows every swept rate unless `rate=` names one: one rate's runs are never mixed with
  another's, and no rate is left out silently.
- A value (metric, gain, ratio) on a sweep names its rate: no rate is "the" cell's.
- A `rate=` that is not a swept rate (or one given where nothing is swept) is a failure
  naming the rates there are. This module reads PostData; it neither queries nor renders.
"""

from __future__ import annotations


def rate_text(rate: float) -> str:
    return f"{rate:g} req/s"


def shown_rates(data, rate, block: str) -> list[float | None]:
    """The rates a block shows: every swept rate (None outside a sweep) or the one named."""
    rates = list(data.rates)
    if rate is None:
        return rates or [None]
    if not rates:
        data.fail(
            f"{block}: rate= needs a rate sweep (arrivals.rate must be a list); "
            f"experiment {data.experiment!r} has none"
        )
        return [None]
    try:
        wanted = float(rate)
    except (TypeError, ValueError):
        wanted = None
    if wanted not in rates:
        data.fail(
            f"{block}: rate {rate!r} is not a swept rate of {data.experiment!r} "
            f"(swept: {', '.join(f'{r:g}' for r in rates)} req/s)"
        )
        return rates
    return [wanted]


def rate_view(data, requests, rate: float | None):
    """The newest data of one rate of a sweep (every run when rate is None)."""
    view = data.values.view(requests, now=True)
    return view if rate is None else data.views.get(data.experiment, data.quick, None, view.label, rate)


def value_rate(data, rate, what: str) -> tuple[bool, float | None]:
    """(ok, the rate) of a value (metric, gain, ratio): on a rate sweep it names one swept
    rate, since the rates' figures differ and no one of them is "the" cell; elsewhere none."""
    rates = list(data.rates)
    if rate is None and not rates:
        return True, None
    if not rates:
        data.fail(f"{what}: rate= needs a rate sweep; experiment {data.experiment!r} has none")
        return False, None
    swept = ", ".join(f"{r:g}" for r in rates)
    try:
        wanted = None if rate is None else float(rate)
    except (TypeError, ValueError):
        wanted = None
    if wanted not in rates:
        data.fail(
            f"{what}: experiment {data.experiment!r} sweeps the offered rate ({swept} req/s): "
            + ("name one (rate=...)" if rate is None else f"rate {rate!r} is not one of them")
        )
        return False, None
    return True, wanted
