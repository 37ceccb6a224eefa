"""Networks: the actor-critic, its encoders and action distributions."""
