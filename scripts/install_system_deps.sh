#!/usr/bin/env bash
# Install the system packages the tests' Slurm lab needs (tests/slurmlab.py), on Debian or Ubuntu:
# slurmctld, slurmd, slurm-client (sinfo, scontrol, srun) and munge. .ci/run calls it before the install.
#
# Idempotent: it installs only what is missing. Where it cannot install (not root, no apt-get) it changes
# nothing, says what to install, and exits 0: the Slurm tests then skip, naming the missing commands.
set -euo pipefail

# package -> a command it installs (daemons live in sbin, which a user's PATH may lack)
declare -A PROVIDES=([slurmctld]=slurmctld [slurmd]=slurmd [slurm-client]=sinfo [munge]=munged)
missing=()
for package in slurmctld slurmd slurm-client munge; do
  if ! PATH="$PATH:/usr/sbin:/sbin" command -v "${PROVIDES[$package]}" >/dev/null 2>&1; then
    missing+=("$package")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install_system_deps: slurmctld, slurmd, slurm-client and munge are already installed."
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_system_deps: no apt-get here; install ${missing[*]} with this system's package manager" \
    "(the Slurm tests skip without them)."
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install_system_deps: installing ${missing[*]} needs root; run: sudo $0" \
    "(the Slurm tests skip without them)."
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q "${missing[@]}"
echo "install_system_deps: installed ${missing[*]}."
