#!/usr/bin/env bash
# A Docker-API engine for the docker launcher's live tests: Podman from Debian, set up the
# way these machines need (DESIGN.md "What runs where"), plus openssh-server for the ssh
# launcher's tests. Needs root (apt). The tests start and stop the services themselves.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq podman runc catatonit busybox-static openssh-server openssh-client >/dev/null
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
if [ "$nofile" = unlimited ] || [ "$nofile" -gt 1048576 ]; then nofile=1048576; fi
mkdir -p /etc/containers
# root here lacks CAP_SYS_RESOURCE (crun/runc cannot raise rlimits past the hard limits),
# and crun refuses the hybrid cgroups: runc, cgroupfs, file events
cat > /etc/containers/containers.conf <<CONF
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
podman --version
