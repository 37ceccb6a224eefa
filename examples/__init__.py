"""Examples of using surge; a package so that `env.id=examples.custom_env:MyEnv-v0` imports."""
