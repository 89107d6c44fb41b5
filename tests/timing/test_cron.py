"""A plain cron expression is expanded without croniter, exactly as croniter expands it."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from croniter import croniter

from dagrun.timing.cron import PRESETS, compile_cron, plain_expansion

BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
ODD_FIELDS = ["1-5", "*/2", "MON", "jan", "L", "?", "1#2", "15W", "-1", "1,,2", "100", "1,2,"]


def _field(rng: random.Random, low: int, high: int) -> str:
    """A field of any kind: a wildcard, a list (in range or not, padded or not, of every
    value or not), or syntax only croniter reads."""
    draw = rng.random()
    if draw < 0.3:
        return "*"
    if draw < 0.4:
        return ",".join(str(v) for v in rng.sample(range(low, high + 1), high - low + 1))
    if draw < 0.45:
        return ",".join(str(v) for v in range(low - 1, high + 2) if rng.random() < 0.9)
    if draw < 0.5:
        return rng.choice(ODD_FIELDS)
    count = rng.randint(1, 4)
    return ",".join(
        ("0" if rng.random() < 0.1 else "") + str(rng.randint(low - 1, high + 1))
        for _ in range(count)
    )


def _croniter_expansion(expression: str) -> tuple | None:
    try:
        return croniter.expand(expression)
    except Exception:  # any refusal: the plain path must refuse it too
        return None


def test_a_plain_expansion_is_croniters_and_anything_else_is_left_to_croniter():
    rng = random.Random(29)
    taken = 0
    for _ in range(20_000):
        fields = [_field(rng, low, high) for low, high in BOUNDS]
        mine = plain_expansion(fields)
        if mine is None:
            continue
        taken += 1
        assert _croniter_expansion(" ".join(fields)) == (mine, {}), fields
    assert taken > 1_000  # the draw reaches the plain path often, not by luck


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_is_plain(preset):
    fields = PRESETS[preset].split()
    assert (plain_expansion(fields), {}) == croniter.expand(PRESETS[preset])


@pytest.mark.parametrize(
    "fields",
    [
        ["0", "0", "1-5", "*", "*"],
        ["*/15", "*", "*", "*", "*"],
        ["0", "0", "*", "*", "MON"],
        ["0", "0", "L", "*", "*"],
        ["0", "0", ",".join(str(d) for d in range(1, 32)), "*", "1"],
        ["60", "0", "*", "*", "*"],
    ],
)
def test_ranges_steps_names_specials_whole_lists_and_bad_numbers_go_to_croniter(fields):
    assert plain_expansion(fields) is None


def test_a_plain_schedule_compiles_without_importing_croniter():
    code = (
        "import sys; from dagrun.timing.cron import compile_cron; "
        "compile_cron('30 6 * * 1,5'); compile_cron('@daily'); "
        "print('croniter' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_plain_schedule_fires_as_the_croniter_expansion_says():
    plain = compile_cron("30 6 * * 1,5")
    assert plain.expansion == ((30,), (6,), ("*",), ("*",), (1, 5))
