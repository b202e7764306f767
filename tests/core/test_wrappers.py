"""Tests of the hidden episode cap: `infer_episode_cap` and `apply_hidden_episode_cap`."""

import doctest
import inspect
from types import SimpleNamespace
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mpe2 import simple_spread_v3
from pettingzoo.utils.conversions import aec_to_parallel, parallel_to_aec
from pettingzoo.utils.wrappers import BaseParallelWrapper, BaseWrapper, OrderEnforcingWrapper

import src.core.wrappers
from src.core.wrappers import apply_hidden_episode_cap, episode_cap, infer_episode_cap

# The seed API document, restated: names, parameter kinds (`*`), defaults and annotations.
SEED_SIGNATURES = {
    "infer_episode_cap": "(env: Any) -> int | None",
    "apply_hidden_episode_cap": (
        "(*, active_agents: Iterable[str], terminations: dict[str, bool], "
        "truncations: dict[str, bool], episode_steps: int, episode_cap: int | None) "
        "-> tuple[dict[str, bool], bool]"
    ),
}


def _signature_text(function: object) -> str:
    """The signature as the seed document writes it (annotations without quotes)."""
    return str(inspect.signature(function)).replace("'", "")


@pytest.mark.parametrize("name", sorted(SEED_SIGNATURES))
def test_signatures_match_the_seed_document(name):
    function = getattr(src.core.wrappers, name)
    assert _signature_text(function) == SEED_SIGNATURES[name]
    assert function.__doc__


def test_apply_hidden_episode_cap_is_keyword_only():
    parameters = inspect.signature(apply_hidden_episode_cap).parameters.values()
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)
    assert all(p.default is inspect.Parameter.empty for p in parameters)
    with pytest.raises(TypeError):
        apply_hidden_episode_cap(["a"], {"a": False}, {"a": False}, 1, 1)


def test_package_exports():
    assert set(src.core.wrappers.__all__) == {"infer_episode_cap", "apply_hidden_episode_cap"}


def test_docstring_examples_run():
    results = doctest.testmod(episode_cap, raise_on_error=False)
    assert results.attempted >= 3
    assert results.failed == 0


# --------------------------------------------------------------------------- infer_episode_cap


class PlainWrapper:
    """A wrapper that stores the env under a given attribute and nothing else."""

    def __init__(self, env, attribute="env", **attributes):
        setattr(self, attribute, env)
        for name, value in attributes.items():
            setattr(self, name, value)


class ForwardingWrapper:
    """A wrapper whose `__getattr__` forwarding must never be reached by the cap search."""

    forwarded: ClassVar[list[str]] = []

    def __init__(self, env):
        self.env = env

    def __getattr__(self, name):
        ForwardingWrapper.forwarded.append(name)
        raise AssertionError(f"__getattr__ was triggered for {name!r}")


class CapProperty:
    """A cap exposed as a property: computed values are not instance attributes."""

    @property
    def max_steps(self):
        raise AssertionError("the max_steps property was evaluated")


class ClassLevelCap:
    max_steps = 7


class EnvCore:
    """Something env-like (reset and step on its class) held under an unusual name."""

    def __init__(self, max_steps):
        self.max_steps = max_steps

    def reset(self):
        return None

    def step(self):
        return None


@pytest.mark.parametrize("max_cycles", [25, 7])
def test_mpe2_simple_spread_parallel_and_aec(max_cycles):
    assert infer_episode_cap(simple_spread_v3.parallel_env(max_cycles=max_cycles)) == max_cycles
    assert infer_episode_cap(simple_spread_v3.env(max_cycles=max_cycles)) == max_cycles
    assert infer_episode_cap(simple_spread_v3.raw_env(max_cycles=max_cycles)) == max_cycles


@pytest.mark.parametrize(
    "make",
    [
        lambda: parallel_to_aec(simple_spread_v3.parallel_env(max_cycles=9)),
        lambda: aec_to_parallel(simple_spread_v3.env(max_cycles=9)),
        lambda: aec_to_parallel(parallel_to_aec(simple_spread_v3.parallel_env(max_cycles=9))),
        lambda: BaseParallelWrapper(simple_spread_v3.parallel_env(max_cycles=9)),
        lambda: OrderEnforcingWrapper(BaseWrapper(simple_spread_v3.env(max_cycles=9))),
        lambda: BaseParallelWrapper(
            BaseParallelWrapper(simple_spread_v3.parallel_env(max_cycles=9))
        ),
    ],
    ids=[
        "parallel_to_aec",
        "aec_to_parallel",
        "round_trip",
        "base_parallel_wrapper",
        "order_enforcing_base_wrapper",
        "two_parallel_wrappers",
    ],
)
def test_pettingzoo_wrapped_stacks(make):
    assert infer_episode_cap(make()) == 9


def test_record_video_wrapped_stack(tmp_path):
    from src.core.wrappers.record_video_parallel import RecordVideo

    env = simple_spread_v3.parallel_env(render_mode="rgb_array", max_cycles=25)
    wrapped = RecordVideo(BaseParallelWrapper(env), str(tmp_path / "videos"))
    assert infer_episode_cap(wrapped) == 25
    wrapped.close()


def test_gymnasium_time_limit():
    assert infer_episode_cap(gym.make("CartPole-v1")) == 500
    assert infer_episode_cap(gym.make("CartPole-v1", max_episode_steps=20)) == 20


@pytest.mark.parametrize("attribute", ["env", "aec_env", "par_env", "parallel_env", "_env"])
def test_child_attributes(attribute):
    inner = PlainWrapper(None, max_steps=11)
    assert infer_episode_cap(PlainWrapper(inner, attribute=attribute)) == 11


def test_unwrapped_instance_attribute():
    assert infer_episode_cap(PlainWrapper(None, unwrapped=PlainWrapper(None, max_cycles=4))) == 4


def test_env_like_attribute_under_any_name():
    assert infer_episode_cap(PlainWrapper(None, core=EnvCore(max_steps=13))) == 13
    # An object without reset/step under an unknown name is not part of the stack.
    assert infer_episode_cap(PlainWrapper(None, config=PlainWrapper(None, max_steps=13))) is None


@pytest.mark.parametrize("name", ["max_steps", "max_cycles", "max_episode_steps"])
def test_each_cap_attribute(name):
    assert infer_episode_cap(PlainWrapper(None, **{name: 6})) == 6


def test_attribute_order_on_one_layer():
    layer = PlainWrapper(None, max_episode_steps=30, max_cycles=20, max_steps=10)
    assert infer_episode_cap(layer) == 10
    assert infer_episode_cap(PlainWrapper(None, max_episode_steps=30, max_cycles=20)) == 20


def test_outermost_cap_wins():
    env = simple_spread_v3.parallel_env(max_cycles=25)
    assert infer_episode_cap(PlainWrapper(env, max_steps=10)) == 10
    assert infer_episode_cap(PlainWrapper(PlainWrapper(env), max_steps=40)) == 40


def test_none_means_no_cap_on_that_layer():
    env = simple_spread_v3.parallel_env(max_cycles=25)
    assert infer_episode_cap(PlainWrapper(env, max_steps=None, max_cycles=None)) == 25


def test_spec_instance_attribute():
    spec = SimpleNamespace(max_episode_steps=12)
    assert infer_episode_cap(PlainWrapper(None, spec=spec)) == 12
    no_cap_spec = SimpleNamespace(max_episode_steps=None)
    inner = PlainWrapper(None, max_steps=3)
    assert infer_episode_cap(PlainWrapper(inner, spec=no_cap_spec)) == 3


def test_getattr_forwarding_is_never_triggered():
    ForwardingWrapper.forwarded.clear()
    stack = ForwardingWrapper(ForwardingWrapper(simple_spread_v3.parallel_env(max_cycles=8)))
    assert infer_episode_cap(stack) == 8
    assert infer_episode_cap(ForwardingWrapper(None)) is None
    assert ForwardingWrapper.forwarded == []


def test_properties_and_class_attributes_are_not_read():
    assert infer_episode_cap(CapProperty()) is None
    assert infer_episode_cap(ClassLevelCap()) is None


@pytest.mark.parametrize("env", [None, 5, "env", object(), PlainWrapper(PlainWrapper(None))])
def test_no_cap_gives_none(env):
    assert infer_episode_cap(env) is None


def test_cycles_terminate():
    a, b = PlainWrapper(None), PlainWrapper(None)
    a.env, b.env = b, a
    assert infer_episode_cap(a) is None
    b.max_steps = 5
    assert infer_episode_cap(a) == 5
    a.env = a
    assert infer_episode_cap(a) is None


def test_numpy_integer_cap_is_returned_as_int():
    cap = infer_episode_cap(PlainWrapper(None, max_steps=np.int64(12)))
    assert cap == 12
    assert type(cap) is int


@pytest.mark.parametrize("value", ["25", 2.5, 25.0, True, [25]])
def test_non_int_cap_is_rejected(value):
    with pytest.raises(TypeError, match=r"PlainWrapper\.max_steps must be an int or None"):
        infer_episode_cap(PlainWrapper(None, max_steps=value))


@pytest.mark.parametrize("value", [0, -3])
def test_cap_below_one_is_rejected(value):
    with pytest.raises(ValueError, match=r"PlainWrapper\.max_cycles must be >= 1"):
        infer_episode_cap(PlainWrapper(None, max_cycles=value))


def test_bad_spec_cap_is_rejected():
    with pytest.raises(TypeError, match=r"spec\.max_episode_steps"):
        infer_episode_cap(PlainWrapper(None, spec=SimpleNamespace(max_episode_steps="10")))


# -------------------------------------------------------------------- apply_hidden_episode_cap


def _apply(**overrides):
    arguments = {
        "active_agents": ["a", "b", "c"],
        "terminations": {"a": False, "b": True, "c": False},
        "truncations": {"a": False, "b": False, "c": True},
        "episode_steps": 5,
        "episode_cap": 5,
    }
    arguments.update(overrides)
    return apply_hidden_episode_cap(**arguments)


def test_below_cap_changes_nothing():
    terminations = {"a": False, "b": False}
    truncations = {"a": False, "b": False}
    updated, fired = apply_hidden_episode_cap(
        active_agents=["a", "b"],
        terminations=terminations,
        truncations=truncations,
        episode_steps=4,
        episode_cap=5,
    )
    assert updated == {"a": False, "b": False}
    assert fired is False
    assert updated is not truncations


def test_at_cap_truncates_live_agents_only():
    terminations = {"a": False, "b": True, "c": False}
    truncations = {"a": False, "b": False, "c": True}
    updated, fired = _apply(terminations=terminations, truncations=truncations)
    assert updated == {"a": True, "b": False, "c": True}
    assert fired is True
    # The inputs are not modified.
    assert truncations == {"a": False, "b": False, "c": True}
    assert terminations == {"a": False, "b": True, "c": False}


def test_past_cap_still_fires():
    updated, fired = _apply(episode_steps=9)
    assert updated["a"] is True
    assert fired is True


def test_not_fired_when_every_agent_already_ended():
    updated, fired = _apply(
        terminations={"a": True, "b": True, "c": False},
        truncations={"a": False, "b": False, "c": True},
        episode_steps=100,
    )
    assert updated == {"a": False, "b": False, "c": True}
    assert fired is False


def test_no_cap_never_fires():
    updated, fired = _apply(episode_cap=None, episode_steps=10**9)
    assert updated == {"a": False, "b": False, "c": True}
    assert fired is False


def test_inactive_agents_are_copied_unchanged():
    updated, fired = apply_hidden_episode_cap(
        active_agents=("a",),
        terminations={"a": False, "gone": False},
        truncations={"a": False, "gone": False},
        episode_steps=3,
        episode_cap=3,
    )
    assert updated == {"a": True, "gone": False}
    assert fired is True


def test_generator_of_agents_and_numpy_flags():
    updated, fired = apply_hidden_episode_cap(
        active_agents=(agent for agent in ["a", "b"]),
        terminations={"a": np.bool_(False), "b": np.bool_(True)},
        truncations={"a": np.bool_(False), "b": np.bool_(False)},
        episode_steps=2,
        episode_cap=2,
    )
    assert updated == {"a": True, "b": False}
    assert fired is True


def test_no_active_agents():
    assert apply_hidden_episode_cap(
        active_agents=[], terminations={}, truncations={}, episode_steps=3, episode_cap=1
    ) == ({}, False)


@pytest.mark.parametrize(
    ("overrides", "error", "match"),
    [
        ({"episode_steps": -1}, ValueError, "episode_steps must be >= 0"),
        ({"episode_steps": 1.0}, TypeError, "episode_steps must be an int"),
        ({"episode_steps": True}, TypeError, "episode_steps must be an int"),
        ({"episode_steps": "3"}, TypeError, "episode_steps must be an int"),
        ({"episode_cap": 2.5}, TypeError, "episode_cap must be an int or None"),
        ({"episode_cap": "5"}, TypeError, "episode_cap must be an int or None"),
        ({"episode_cap": True}, TypeError, "episode_cap must be an int or None"),
        ({"episode_cap": 0}, ValueError, "episode_cap must be >= 1"),
        ({"episode_cap": -4}, ValueError, "episode_cap must be >= 1"),
        ({"active_agents": "abc"}, TypeError, "active_agents must be an iterable"),
        ({"active_agents": 3}, TypeError, "active_agents must be an iterable"),
        ({"active_agents": ["a", "z"]}, ValueError, r"terminations has no entry .*'z'"),
        (
            {"truncations": {"a": False, "b": False}},
            ValueError,
            r"truncations has no entry .*'c'",
        ),
        ({"terminations": [False, False, False]}, TypeError, "terminations must be a dict"),
        ({"truncations": None}, TypeError, "truncations must be a dict"),
        (
            {"terminations": {"a": 0, "b": True, "c": False}},
            TypeError,
            r"terminations\['a'\] must be a bool",
        ),
        (
            {"truncations": {"a": None, "b": False, "c": True}},
            TypeError,
            r"truncations\['a'\] must be a bool",
        ),
    ],
)
def test_bad_arguments_raise_clear_errors(overrides, error, match):
    with pytest.raises(error, match=match):
        _apply(**overrides)


# The fired flag and the updated truncations must agree for any flags, step count and cap.
@given(
    flags=st.dictionaries(
        st.sampled_from(["a", "b", "c", "d"]), st.tuples(st.booleans(), st.booleans())
    ),
    episode_steps=st.integers(min_value=0, max_value=50),
    episode_cap=st.none() | st.integers(min_value=1, max_value=50),
)
def test_cap_properties(flags, episode_steps, episode_cap):
    terminations = {agent: term for agent, (term, _) in flags.items()}
    truncations = {agent: trunc for agent, (_, trunc) in flags.items()}
    updated, fired = apply_hidden_episode_cap(
        active_agents=list(flags),
        terminations=terminations,
        truncations=truncations,
        episode_steps=episode_steps,
        episode_cap=episode_cap,
    )
    changed = [agent for agent in flags if updated[agent] != truncations[agent]]
    assert fired == bool(changed)
    assert set(updated) == set(truncations)
    # Only live agents change, and only from False to True.
    assert all(updated[a] and not terminations[a] and not truncations[a] for a in changed)
    capped = episode_cap is not None and episode_steps >= episode_cap
    if capped:
        assert all(terminations[a] or updated[a] for a in flags)
    else:
        assert updated == truncations


class HiddenCap(BaseParallelWrapper):
    """Declares a cap on the stack without enforcing it, as a config layer would."""

    def __init__(self, env, max_steps):
        super().__init__(env)
        self.max_steps = max_steps


def _run_episode(env, *, seed):
    """Run one random episode the way the training loop does; return (length, fired step)."""
    cap = infer_episode_cap(env)
    env.reset(seed=seed)
    for agent in env.possible_agents:
        env.action_space(agent).seed(seed)
    steps, fired_at = 0, None
    while env.agents:
        active = list(env.agents)
        actions = {agent: env.action_space(agent).sample() for agent in active}
        _, _, terminations, truncations, _ = env.step(actions)
        steps += 1
        truncations, fired = apply_hidden_episode_cap(
            active_agents=active,
            terminations=terminations,
            truncations=truncations,
            episode_steps=steps,
            episode_cap=cap,
        )
        if fired:
            fired_at = steps
        if all(terminations[a] or truncations[a] for a in active):
            break
    return steps, fired_at


def test_cap_on_an_outer_layer_holds_where_the_env_does_not_enforce_it():
    env = HiddenCap(simple_spread_v3.parallel_env(max_cycles=25), max_steps=3)
    assert _run_episode(env, seed=0) == (3, 3)


def test_cap_enforced_by_the_env_itself_does_not_fire():
    # mpe2 truncates every agent at max_cycles on its own, so the hidden cap changes no flag.
    env = simple_spread_v3.parallel_env(max_cycles=4)
    assert _run_episode(env, seed=0) == (4, None)
