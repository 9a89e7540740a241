"""The knowledge base against the sources a machine can read (PyPI's indexes, NVIDIA's nvcc wheels, DeepSpeed's
sdists), so a new release is a diff the audit prints:

  collect.py  live: reads the sources, bounded in size and time, into Facts (facts.py)
  facts.py    the facts the audit compares, and their recorded form (tests/data/kb_audit/, with date and URLs)
  compare.py  pure: KB + Facts -> findings (envsolver/kb/findings.py), each naming the KB row and the fact
  wheels.py   pure readers: a wheel's METADATA, its python tags, nvcc's `--list-gpu-code`, host_config.h
  sdists.py   pure readers of DeepSpeed's sdist: its requirements, setup.py's appends, the CUDA allow-list
  drivertable.py  NVIDIA's driver table (a saved README) against pci_devices.yaml, row by row (--driver-table)

scripts/kb_audit.py --upstream FILE compares recorded facts (CI); --live reads the sources (exit 1 on any
contradiction). conda repodata is envsolver/kb/audit.py's part.
"""
