"""Locking a plan: the channels, the solve (in a rattler worker), checks, the files make writes."""
