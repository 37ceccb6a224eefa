"""Evaluation: whole episodes played with one policy version, the same way whether the version
comes from a checkpoint (`surge eval`, checkpoint.py) or from the parameter stream during
training (the evaluation workers, surge/workers/evaluation.py)."""
