"""Learners: each algorithm's side of the trainer (surge/workers/trainer.py `Learner`), and
the factory that builds the trainer worker around it (named by the algorithm's graph)."""
