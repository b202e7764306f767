"""Namespaced metric keys, defined once for training logs, updates.parquet and wandb."""

from __future__ import annotations

# charts/: progress of training
GLOBAL_STEP = "charts/global_step"
EPISODE_RETURN = "charts/episode_return"
EPISODE_LENGTH = "charts/episode_length"
STEPS_PER_SECOND = "charts/steps_per_second"
LEARNING_RATE = "charts/learning_rate"

# losses/: PPO and critics
POLICY_LOSS = "losses/policy"
VALUE_LOSS = "losses/value"
COST_VALUE_LOSS = "losses/cost_value"
ENTROPY = "losses/entropy"
APPROX_KL = "losses/approx_kl"
CLIP_FRACTION = "losses/clip_fraction"
EXPLAINED_VARIANCE = "losses/explained_variance"

# safety/: constraint bookkeeping
EPISODE_COST = "safety/episode_cost"
VIOLATION_RATE = "safety/violation_rate"
LAMBDA = "safety/lambda"
CONSTRAINT_GAP = "safety/constraint_gap"

# shield/: the shield and its models
SHIELD_ARMED = "shield/armed"
SHIELD_INTERVENTIONS = "shield/interventions"
SHIELD_NO_SAFE_ACTION = "shield/no_safe_action"
SHIELD_MEAN_BOUND = "shield/mean_bound"
SHIELD_OPPONENT_WEIGHT = "shield/opponent_model_weight"
SHIELD_SECONDS = "shield/seconds"
SHIELD_MODEL_SECONDS = "shield/model_seconds"

WALL_CLOCK_KEYS = ("wall_time", STEPS_PER_SECOND, SHIELD_SECONDS, SHIELD_MODEL_SECONDS)
"""Update metrics that measure time, not the run: a resumed or repeated run changes them."""
SHIELD_CALIBRATION = "shield/calibration"
SHIELD_ALLOWANCE = "shield/allowance"
SHIELD_REALIZED = "shield/realized_risk"
SHIELD_LABELLED = "shield/labelled_decisions"
SHIELD_AUC_TEAM = "shield/auc_team"
"""AUC of the critic's q over the real outcomes of the latest labelled decisions (how well
its risks rank them)."""
SHIELD_IMITATION = "shield/imitation_loss"
CRITIC_LOSS = "shield/critic_loss"
WM_TRAIN_LOSS = "shield/world_model_train_loss"
WM_VALID_LOSS = "shield/world_model_valid_loss"
WM_COST_ACCURACY = "shield/world_model_cost_accuracy"
OM_TRAIN_LOSS = "shield/opponent_model_train_loss"
OM_VALID_LOSS = "shield/opponent_model_valid_loss"
OM_VALID_ACCURACY = "shield/opponent_model_valid_accuracy"
