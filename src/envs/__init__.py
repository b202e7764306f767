"""Safety environments (PettingZoo ParallelEnv views and batched vector envs) and their registry."""

from src.envs.base import StepResult, VectorEnv, joint_observation
from src.envs.registry import ENVS, EnvSpec, make_config, make_env, make_vector_env

__all__ = [
    "ENVS",
    "EnvSpec",
    "StepResult",
    "VectorEnv",
    "joint_observation",
    "make_config",
    "make_env",
    "make_vector_env",
]
