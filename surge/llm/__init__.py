"""LLM RL on the worker graph (issue 14): tasks and their verifiers so far; generation,
reward and trainer workers come next."""
