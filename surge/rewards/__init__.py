"""Rewards computed by models: the pure reward maths (for example the contrasting-language-goal
reward of VLM-RL and its baselines, in `clg`) and, later, the scorers that turn frames into
embeddings and a tiny CLIP to test them with."""
