#!/usr/bin/env bash
# Install the system packages the tests need, on Debian or Ubuntu: for the Slurm lab (tests/slurmlab.py)
# slurmctld, slurmd, slurm-client (sinfo, scontrol, srun) and munge; for the modulefile tests
# (tests/cluster/test_modulefile.py) lmod, Lmod itself. .ci/run calls it before the install.
#
# Idempotent: it installs only what is missing. Where it cannot install (not root, no apt-get) it changes
# nothing, says what to install, and exits 0: the Slurm and Lmod tests then skip, naming what is missing.
set -euo pipefail

# package -> a command it installs (daemons live in sbin, which a user's PATH may lack), or for lmod the file
# a shell sources to get `module` (Lmod keeps no command on PATH; LMOD_PKG is where its init/ lies, as Lmod's
# own init sets it: /usr/share/lmod/lmod for Debian's package)
declare -A PROVIDES=([slurmctld]=slurmctld [slurmd]=slurmd [slurm-client]=sinfo [munge]=munged
  [lmod]="${LMOD_PKG:-/usr/share/lmod/lmod}/init/bash")
PACKAGES=(slurmctld slurmd slurm-client munge lmod)
missing=()
for package in "${PACKAGES[@]}"; do
  provided="${PROVIDES[$package]}"
  if [[ "$provided" == /* ]]; then
    [ -f "$provided" ] || missing+=("$package")
  elif ! PATH="$PATH:/usr/sbin:/sbin" command -v "$provided" >/dev/null 2>&1; then
    missing+=("$package")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install_system_deps: ${PACKAGES[*]} are already installed."
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_system_deps: no apt-get here; install ${missing[*]} with this system's package manager" \
    "(the Slurm and Lmod tests skip without them)."
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install_system_deps: installing ${missing[*]} needs root; run: sudo $0" \
    "(the Slurm and Lmod tests skip without them)."
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q "${missing[@]}"
echo "install_system_deps: installed ${missing[*]}."
