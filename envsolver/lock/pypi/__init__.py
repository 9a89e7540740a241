"""The PyPI part of a lock: which file of a release a plan takes from PyPI (the index, live or the bundled
snapshot of it), checked against its exact grammar, and how it is installed into the env's own python."""
