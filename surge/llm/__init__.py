"""LLM RL on the worker graph: tasks and their verifiers so far; generation,
reward and trainer workers come next."""
