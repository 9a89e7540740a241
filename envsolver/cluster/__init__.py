"""Clusters: the cluster file (model.py, file.py, grammar.py for the Slurm values it holds), Slurm access
(slurm.py, the only module that runs Slurm's commands), pure parsers of their output (parse.py), and the draft
of a cluster file from Slurm (survey.py -> decide.py -> draft.py)."""
