"""Two robots walk down a corridor to its exit; the cell halfway along is a hazard.

A robot waits (0), steps forward (1), or takes the side passage (2): forward with probability
1/2, past the hazard when it is next. Standing on the hazard costs 1. Every step a robot is
still inside costs 0.05 reward, reaching the exit pays 1, and the episode ends when both are
out (or after max_cycles steps). The fast way is through the hazard; the safe way is slower.
"""

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class Corridor(ParallelEnv):
    def __init__(
        self, length: int = 7, max_cycles: int = 40, render_mode: str | None = None
    ) -> None:
        self.metadata = {"name": "corridor", "render_modes": ["rgb_array"], "render_fps": 4}
        self.length, self.hazard, self.max_cycles = length, length // 2, max_cycles
        self.render_mode, self.rng = render_mode, np.random.default_rng()
        self.possible_agents = ["robot_0", "robot_1"]
        self.observation_spaces = dict.fromkeys(self.possible_agents, spaces.Box(0, 1, (2,)))
        self.action_spaces = dict.fromkeys(self.possible_agents, spaces.Discrete(3))

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def _observe(self) -> dict:
        return {a: np.array([p / self.length, p + 1 == self.hazard], np.float32)
                for a, p in self.pos.items()}  # fmt: skip

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.t = list(self.possible_agents), 0
        self.pos = {agent: int(self.rng.integers(0, 2)) for agent in self.agents}
        return self._observe(), {agent: {} for agent in self.agents}

    def step(self, actions: dict) -> tuple:
        rewards, infos, self.t = {}, {}, self.t + 1
        for agent, action in actions.items():
            inside = self.pos[agent] < self.length
            if inside and (action == 1 or (action == 2 and self.rng.random() < 0.5)):
                skip = action == 2 and self.pos[agent] + 1 == self.hazard
                self.pos[agent] = min(self.pos[agent] + 1 + skip, self.length)
            rewards[agent] = (1.0 if self.pos[agent] == self.length else -0.05) if inside else 0.0
            infos[agent] = {"cost": float(self.pos[agent] == self.hazard)}
        done = all(p == self.length for p in self.pos.values())
        over = self.t >= self.max_cycles and not done
        ends, self.agents = dict.fromkeys(self.agents, done), [] if done or over else self.agents
        return self._observe(), rewards, ends, dict.fromkeys(ends, over), infos

    def render(self) -> np.ndarray:
        cells = np.full((2, self.length + 1, 3), 255, dtype=np.uint8)
        cells[:, self.hazard], cells[:, self.length] = (213, 94, 0), (160, 160, 160)
        for row, agent in enumerate(self.possible_agents):
            cells[row, self.pos[agent]] = ((0, 114, 178), (230, 159, 0))[row]
        return np.kron(cells, np.ones((24, 24, 1), dtype=np.uint8))
