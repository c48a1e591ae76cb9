#!/usr/bin/env python3
"""A task in Python (identifier `emails/send`): fails, and is retried, without a `to`."""
import json
import os
import sys

payload = json.load(sys.stdin)["payload"]
if "to" not in payload:
    print("payload needs a 'to' address", file=sys.stderr)
    sys.exit(1)
print(f"sending job {os.environ['GRAPHILE_WORKER_JOB_ID']} to {payload['to']}")
