#!/usr/bin/env bash
# What `jobtpu submit --cmd "bash run_remote.sh"` runs on every worker, in the job's snapshot.
set -euo pipefail
echo "job ${JOBTPU_JOB_ID} attempt ${JOBTPU_ATTEMPT} worker ${JOBTPU_WORKER}/${JOBTPU_NUM_WORKERS} on ${JOBTPU_MACHINE} (resume=${JOBTPU_RESUME})"
exec python3 train.py "$@"
