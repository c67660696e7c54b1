#!/usr/bin/env bash
# Stop the private Engine 26 that start-dockerd26.sh started and remove its bridge.
STATE=${DOCKER26_STATE_DIR:-${VLLM_FORGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-forge}/engines/dockerd26}
if [ -f "$STATE/dockerd.pid" ]; then
  PID=$(cat "$STATE/dockerd.pid")
  kill -TERM "$PID" 2>/dev/null && for i in $(seq 1 40); do kill -0 "$PID" 2>/dev/null || break; sleep 0.5; done
fi
ip link del fd26br 2>/dev/null || true
