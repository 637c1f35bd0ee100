"""The demo's sample tools and scripted plan: a trip-planning request over three rounds
(run by ``toolloop demo``, see :mod:`toolloop.cli`)."""

from __future__ import annotations

from typing import Any

import anyio

from .planners import PlannerContext
from .testing import ScriptedPlanner

__all__ = ["PLANNER", "convert_currency", "find_fare", "get_weather"]

_WEATHER = {"Lisbon": (24, "sunny"), "Porto": (19, "cloudy"), "Faro": (27, "sunny")}
_FARES = {"Lisbon": 89.0, "Porto": 74.5, "Faro": 112.0}


async def get_weather(city: str, days: int = 3) -> dict[str, Any]:
    """The forecast for a city.

    Args:
        city: the city's name.
        days: how many days ahead.
    """
    await anyio.sleep(0.3)
    temp, sky = _WEATHER.get(city, (15, "unknown"))
    return {"city": city, "days": days, "max_c": temp, "sky": sky}


async def find_fare(origin: str, destination: str) -> dict[str, Any]:
    """The cheapest train fare between two cities, in EUR.

    Args:
        origin: where the trip starts.
        destination: where it ends.
    """
    await anyio.sleep(0.4)
    return {"from": origin, "to": destination, "eur": _FARES.get(destination, 150.0)}


def convert_currency(amount: float, to: str) -> dict[str, Any]:
    """Convert an amount in EUR to another currency.

    Args:
        amount: the amount in EUR.
        to: the ISO code of the target currency.
    """
    rates = {"USD": 1.08, "GBP": 0.85}
    if to not in rates:
        raise ValueError(f"no rate for {to}; known: {sorted(rates)}")
    return {"eur": amount, to: round(amount * rates[to], 2)}


def _round_two(context: PlannerContext) -> dict[str, Any]:
    # round two reads round one's results: the two sunniest cities get a fare
    sunny = [
        r.result["city"]
        for r in context.last_round_result
        if r.success and r.tool_name == "get_weather" and r.result["sky"] == "sunny"
    ]
    return {
        "next_action": "execute",
        "execution_commands": [
            {
                "purpose": f"fare to {city}",
                "tool_name": "find_fare",
                "tool_kwargs": {"origin": "Madrid", "destination": city},
                "todo_suggestion": "convert the cheapest fare",
            }
            for city in sunny
        ]
        + [
            {
                "purpose": "fare in GBP",
                "tool_name": "convert_currency",
                "tool_kwargs": {"amount": 89.0, "to": "GBP"},
            },
            {
                "purpose": "fare in JPY",
                "tool_name": "convert_currency",
                "tool_kwargs": {"amount": 89.0, "to": "JPY"},
            },
        ],
    }


PLANNER = ScriptedPlanner(
    [
        {
            "next_action": "execute",
            "execution_commands": [
                {
                    "purpose": f"weather in {city}",
                    "tool_name": "get_weather",
                    "tool_kwargs": {"city": city},
                    "todo_suggestion": "compare the cities",
                }
                for city in _WEATHER
            ]
            + [
                {
                    "purpose": "a tool that does not exist",
                    "tool_name": "book_hotel",
                    "tool_kwargs": {"city": "Faro"},
                },
                {
                    "purpose": "weather with a bad argument",
                    "tool_name": "get_weather",
                    "tool_kwargs": {"city": "Faro", "days": "three"},
                },
            ],
        },
        _round_two,
        {"next_action": "response"},
    ],
    delay=0.2,
)
