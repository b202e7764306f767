"""Every registered algorithm and version is smoke-tested as soon as it is registered."""

from __future__ import annotations

import pytest

from src.algos.ippo import IPPO, IPPO_VERSIONS
from src.algos.lagrange import LAG_VERSIONS
from src.algos.registry import (
    ALGORITHMS,
    VERSIONS,
    builtin_entries,
    get_algorithm,
    versions_of,
)
from src.algos.shield.assemble import SHIELD_VERSIONS
from src.algos.shield.opponent_model import OM_VERSIONS
from src.algos.shield.world_model import WM_VERSIONS
from src.algos.train import build_trainer, trainer_class
from src.checks import ConfigError, lookup
from src.config.run import SECTIONS, RunConfig
from tests.algos.conftest import toy_config
from tests.algos.toy_env import make_toy_env


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_builds_a_trainer(name):
    spec = get_algorithm(name)
    config = RunConfig.from_dict(toy_config(algo=name))
    trainer_cls = trainer_class(name, config.base)
    assert issubclass(trainer_cls, IPPO)
    assert set(spec.sections) <= set(SECTIONS) and "ppo" in spec.sections
    for key in spec.version_keys:
        assert config.version(key) in versions_of(key)
    assert config.shielded == spec.shielded
    assert config.eval_modes == ((True, False) if spec.shielded else (False,))
    if spec.shielded:
        return  # the shield's own tests train it; it needs its config keys and models
    config = toy_config(algo=name, timesteps=4 * 16)
    trainer = build_trainer(config, make_toy_env(config))
    trainer.train(progress=False)
    assert trainer.update == trainer.num_updates == 1


def test_builtin_entries_name_each_algorithms_own_code():
    # What a built-in algorithm's runs import by import path, and nothing of another's.
    from src.algos.ippo_lag import IPPOLag
    from src.algos.shield.assemble import load_shield
    from src.algos.shield.trainer import ShieldedIPPO
    from src.custom import load_entry

    entries = builtin_entries()
    assert set(entries) == set(ALGORITHMS)
    assert entries["ippo"] == ()
    assert [load_entry(entry) for entry in entries["ippo_lag"]] == [IPPOLag]
    for name in ("shield", "shield_dec"):
        assert [load_entry(entry) for entry in entries[name]] == [ShieldedIPPO, load_shield]
        assert trainer_class(name, {}) is ShieldedIPPO


def test_version_names_match_their_implementations():
    # The registry is a leaf that names the versions; each implementation registry holds them.
    implemented = {
        "ippo_version": IPPO_VERSIONS,
        "lag_version": LAG_VERSIONS,
        "shield_version": SHIELD_VERSIONS,
        "wm_version": WM_VERSIONS,
        "om_version": OM_VERSIONS,
    }
    assert set(VERSIONS) == set(implemented)
    for key, versions in implemented.items():
        assert sorted(versions_of(key)) == sorted(versions), key


@pytest.mark.parametrize("version", sorted(IPPO_VERSIONS))
def test_every_ippo_version_trains(version):
    config = toy_config(ippo_version=version, timesteps=4 * 16)
    trainer = build_trainer(config, make_toy_env(config))
    assert isinstance(trainer, IPPO_VERSIONS[version])
    trainer.train(progress=False)


@pytest.mark.parametrize("version", sorted(LAG_VERSIONS))
def test_every_lag_version_trains_and_rises_under_violations(version):
    # max_risk 0.01 with the untrained policy (violating most episodes) must raise lambda.
    config = toy_config(algo="ippo_lag", lag_version=version, max_risk=0.01, timesteps=4 * 16 * 2)
    trainer = build_trainer(config, make_toy_env(config))
    trainer.train(progress=False)
    assert trainer.multiplier.value > 0.0


def test_unknown_names_list_the_known_ones():
    with pytest.raises(
        ValueError, match=r"unknown algo 'x'; known: \['ippo', 'ippo_lag', 'shield', 'shield_dec'\]"
    ):
        get_algorithm("x")
    with pytest.raises(ValueError, match="known: "):
        lookup(LAG_VERSIONS, "v1", "lag_version")


def test_a_key_no_part_of_a_run_reads_is_refused_before_training():
    """A section's field given beside the base keys instead of in algo_params kept its default
    without a word (training used ent_coef 0.01 while config.json recorded 0.0, and the run
    could not be read back); it is refused, saying where it belongs, and so is a typo."""
    with pytest.raises(ConfigError) as refused:
        RunConfig.from_dict({**toy_config(algo="ippo"), "ent_coef": 0.0})
    assert str(refused.value) == (
        "run config has unknown keys ['ent_coef']: set ['ent_coef'] in algo_params"
    )
    with pytest.raises(ConfigError, match=r"^run config has unknown keys \['max_rsik'\]$"):
        RunConfig.from_dict({**toy_config(algo="ippo"), "max_rsik": 0.1})
    given = toy_config(algo="ippo", algo_params={"ent_coef": 0.0})
    assert RunConfig.from_dict(given).ppo.ent_coef == 0.0
