#!/bin/sh
# A task in shell: the job arrives as {"payload": ...} on stdin, its fields in
# GRAPHILE_WORKER_* variables. Exit 0 for success; anything else fails the job.
payload=$(cat)
echo "hello from job $GRAPHILE_WORKER_JOB_ID (attempt $GRAPHILE_WORKER_JOB_ATTEMPTS of $GRAPHILE_WORKER_JOB_MAX_ATTEMPTS): $payload"
