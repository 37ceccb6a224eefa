"""Learning algorithms: advantage estimators and the PPO learner."""
