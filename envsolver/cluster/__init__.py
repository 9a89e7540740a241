"""Clusters: the cluster file (model.py, file.py), Slurm access (slurm.py, the only module that runs Slurm's
commands), pure parsers of their output (parse.py) and the draft of a cluster file from Slurm (draft.py)."""
