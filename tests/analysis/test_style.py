"""One colour per algorithm, shared by every figure."""

from __future__ import annotations

from src.algos.registry import ALGORITHMS
from src.analysis.style import ALGO_COLORS, OKABE_ITO, algo_color, policy_label, policy_linestyle


def test_every_registered_algorithm_has_its_own_okabe_ito_colour() -> None:
    colours = [algo_color(name) for name in ALGORITHMS]
    assert len(set(colours)) == len(colours)
    assert set(colours) <= set(OKABE_ITO.values())


def test_unknown_algorithms_get_a_stable_spare_colour() -> None:
    colour = algo_color("new_algo")
    assert colour == algo_color("new_algo")
    assert colour in OKABE_ITO.values()
    assert colour not in ALGO_COLORS.values()


def test_shield_off_keeps_the_colour_and_is_dashed() -> None:
    assert policy_label("shield", False) == "shield (shield off)"
    assert policy_label("ippo", False) == "ippo"
    assert policy_linestyle("shield", False) == "--"
    assert policy_linestyle("shield", True) == "-"
