"""Training algorithms: IPPO, Lagrangian IPPO and shielded IPPO, with their registry.

Entry points: `src.algos.train.train_run` (the train rule), `src.algos.policy.load_actor`
(evaluation and rendering), `src.algos.registry.ALGORITHMS`.
"""
